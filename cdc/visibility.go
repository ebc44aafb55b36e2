package cdc

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
)

// visibilityGate holds the events of a decoded transaction back from
// Kafka until PostgreSQL shows the transaction to new snapshots, so that an
// event is in Kafka only once its transaction is visible on the primary
// (docs/architecture.md, "An event in Kafka is visible in PostgreSQL").
//
// Why this is needed: a committing backend writes and flushes its commit
// record (RecordTransactionCommit, which also waits for synchronous
// standbys) and only then leaves the ProcArray (ProcArrayEndTransaction);
// until it has, new snapshots still see the transaction as running. The
// walsender decodes WAL up to the flush position, so pgoutput can send a
// transaction whose commit other sessions cannot see yet: for microseconds
// normally, for as long as the backend is descheduled on a busy machine,
// or for as long as a synchronous standby takes to answer. Every consumer
// that reads PostgreSQL because of an event relies on seeing it there: a
// rebuild builds from a snapshot taken after the topic's end offsets
// (rebuild/rebuild.go), the inbox projector reads followers and backfills
// after the follow events it handled. A post decoded, published and
// counted below a rebuild's T0 while still invisible to the build's
// snapshot was in neither the build nor the catch-up, and was lost from
// every rebuilt inbox (seen once in CI).
//
// A transaction id is finished when it is below the snapshot's xmin, or
// below its xmax and not among its running ids; a finished transaction
// that pgoutput sent has committed, so every later snapshot sees it.
//
// The reader never waits: it registers each transaction as it begins
// (add), and the lanes wait for it before publishing its first event
// (txn.waitVisible). One goroutine (run) reads a snapshot whenever
// transactions are waiting and releases every one it shows finished, so
// one small query covers every transaction decoded while the previous one
// ran; a transaction still running is asked about again after a pause
// that doubles from waitStep to maxWaitStep.
type visibilityGate struct {
	snapshot func(ctx context.Context) (string, error) // pg_current_snapshot()::text
	m        *metrics
	log      *slog.Logger

	mu      sync.Mutex
	pending []*txn // added, not yet seen by run
	wake    chan struct{}

	waitStep    time.Duration
	maxWaitStep time.Duration
	slowAfter   time.Duration // a transaction held this long is logged
}

func newVisibilityGate(snapshot func(ctx context.Context) (string, error), m *metrics, log *slog.Logger) *visibilityGate {
	return &visibilityGate{snapshot: snapshot, m: m, log: log, wake: make(chan struct{}, 1),
		waitStep: 100 * time.Microsecond, maxWaitStep: 20 * time.Millisecond, slowAfter: 5 * time.Second}
}

// add registers t (its xid set) to be released once visible.
func (g *visibilityGate) add(t *txn) {
	t.visible = make(chan struct{})
	g.mu.Lock()
	g.pending = append(g.pending, t)
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// run releases registered transactions as they become visible, until ctx
// ends.
func (g *visibilityGate) run(ctx context.Context) {
	var waiting []*txn
	step := g.waitStep
	var lastErr time.Time
	for {
		if len(waiting) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-g.wake:
			}
		}
		g.mu.Lock()
		waiting = append(waiting, g.pending...)
		clear(g.pending)
		g.pending = g.pending[:0]
		g.mu.Unlock()
		if len(waiting) == 0 {
			continue
		}
		start := time.Now()
		s, err := g.snapshot(ctx)
		var sn pgSnapshot
		if err == nil {
			sn, err = parseSnapshot(s)
		}
		g.m.visibilityReads.Inc()
		g.m.visibilityReadSeconds.Add(time.Since(start).Seconds())
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if time.Since(lastErr) > 10*time.Second {
				lastErr = time.Now()
				g.log.Warn("cdc: cannot read a snapshot to check that decoded transactions are visible; their events wait", "err", err)
			}
		} else {
			waiting = g.release(sn, waiting)
		}
		if len(waiting) == 0 {
			step = g.waitStep
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(step):
		}
		step = min(2*step, g.maxWaitStep)
	}
}

// release closes the visible channel of every transaction sn shows
// finished and returns the others, counting and logging the ones held.
func (g *visibilityGate) release(sn pgSnapshot, waiting []*txn) []*txn {
	kept := waiting[:0]
	now := time.Now()
	for _, t := range waiting {
		if sn.finished(t.xid) {
			t.shown.Store(true)
			close(t.visible)
			continue
		}
		if !t.held {
			t.held = true
			t.heldAt = now
			g.m.visibilityHeld.Inc()
		} else if !t.told && now.Sub(t.heldAt) >= g.slowAfter {
			t.told = true
			g.log.Warn("cdc: a decoded transaction is still not visible in PostgreSQL; its events wait (a synchronous standby not answering? a stuck backend?)",
				"xid", sn.widen(t.xid), "waited", now.Sub(t.heldAt).Round(time.Millisecond))
		}
		kept = append(kept, t)
	}
	clear(waiting[len(kept):])
	return kept
}

// pgSnapshot is a parsed pg_snapshot: xmin, xmax and the ids in progress.
type pgSnapshot struct {
	xmin, xmax uint64
	xip        []uint64
}

// parseSnapshot parses pg_snapshot's text form "xmin:xmax:xip,xip,...".
func parseSnapshot(s string) (pgSnapshot, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return pgSnapshot{}, fmt.Errorf("pg_snapshot %q: want xmin:xmax:xip", s)
	}
	var sn pgSnapshot
	var err error
	if sn.xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return pgSnapshot{}, fmt.Errorf("pg_snapshot %q: xmin: %w", s, err)
	}
	if sn.xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return pgSnapshot{}, fmt.Errorf("pg_snapshot %q: xmax: %w", s, err)
	}
	if parts[2] != "" {
		for _, x := range strings.Split(parts[2], ",") {
			v, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return pgSnapshot{}, fmt.Errorf("pg_snapshot %q: xip: %w", s, err)
			}
			sn.xip = append(sn.xip, v)
		}
	}
	if sn.xmin > sn.xmax {
		return pgSnapshot{}, fmt.Errorf("pg_snapshot %q: xmin above xmax", s)
	}
	return sn, nil
}

// widen returns the 64-bit id (epoch and xid, as xid8) of the 32-bit xid
// pgoutput sends, taking the epoch from the snapshot: a decoded
// transaction is recent, so its id lies within 2^31 of xmax.
func (s pgSnapshot) widen(xid uint32) uint64 {
	full := s.xmax&^0xFFFFFFFF | uint64(xid)
	switch {
	case full > s.xmax && full-s.xmax > 1<<31 && full >= 1<<32:
		full -= 1 << 32 // the previous epoch
	case full < s.xmax && s.xmax-full > 1<<31:
		full += 1 << 32 // the next epoch (xmax just before a wraparound)
	}
	return full
}

// finished reports whether transaction xid (32 bits, as decoded) had ended
// when the snapshot was taken.
func (s pgSnapshot) finished(xid uint32) bool {
	full := s.widen(xid)
	if full < s.xmin {
		return true
	}
	if full >= s.xmax {
		return false
	}
	for _, r := range s.xip {
		if r == full {
			return false
		}
	}
	return true
}

// readSnapshot reads the server's current snapshot (one small query on the
// pool; it takes no transaction id).
func (c *CDC) readSnapshot(ctx context.Context) (string, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var s string
	err := c.pool.QueryRow(qctx, `SELECT pg_current_snapshot()::text`).Scan(&s)
	return s, err
}
