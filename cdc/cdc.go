// Package cdc streams the event log to Kafka: a logical replication slot on
// the events table (pgoutput), decoded by the reader, published by the
// processor through ordered lanes keyed by audience, and confirmed to
// PostgreSQL by the checkpointer only once Kafka acknowledged every event up
// to that point. Delivery is at-least-once, in commit order per key.
// docs/cdc.md has the whole story.
package cdc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CDC is one change-data-capture process for one slot.
type CDC struct {
	cfg  Config
	pool *pgxpool.Pool
	m    *metrics
	ckpt *checkpointer
	proc *processor

	// lastReceived is the commit LSN of the newest transaction received
	// whole; after a reconnect, transactions up to it are skipped (they are
	// already on their way). Reader goroutine only.
	lastReceived pglogrepl.LSN
	// sentLSN is the LSN last confirmed to PostgreSQL.
	sentLSN atomic.Uint64
	// unsaved counts acknowledged events not yet added to cdc_state.
	unsaved atomic.Int64
	// visible holds decoded transactions' events back until PostgreSQL
	// shows the transactions to new snapshots.
	visible *visibilityGate
	// decode parses the pgoutput messages (decodeMessage; tests also run
	// parseMessage).
	decode pgoutputDecoder

	// The frontier (heal.go): samples waiting for the acknowledged position
	// to pass them, and whether a heal holds the frontier still.
	frontierMu     sync.Mutex
	frontierPaused bool
	samples        []frontierSample
	// stopped is the error CDC stopped for good with (Ready).
	stopped atomic.Pointer[error]
	// hook, when set (tests), is called at each heal stage.
	hook func(stage string)
	// streaming calls Config.OnStreaming once.
	streaming sync.Once
}

// New returns a CDC that reads through pool's database and publishes with
// pubs: lane i uses pubs[i % len(pubs)], so each publisher (its own
// producer and broker connection, one request in flight each) carries a
// fixed set of keys. It refuses nil dependencies and an invalid config.
func New(cfg Config, pool *pgxpool.Pool, pubs ...Publisher) (*CDC, error) {
	if pool == nil {
		return nil, errors.New("cdc: nil pool")
	}
	if len(pubs) == 0 {
		return nil, errors.New("cdc: no publisher")
	}
	for _, p := range pubs {
		if p == nil {
			return nil, errors.New("cdc: nil publisher")
		}
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &CDC{cfg: cfg, pool: pool, m: newMetrics(cfg.Registerer), ckpt: newCheckpointer(0), decode: decodeMessage}
	c.visible = newVisibilityGate(c.readSnapshot, c.m, cfg.Logger)
	c.proc = newProcessor(cfg, pubs, c.m, &c.unsaved)
	return c, nil
}

// Run streams until ctx ends, reconnecting with exponential backoff after
// any error (at most UnavailableBackoff while PostgreSQL is unavailable).
// At the end it publishes what it already read (bounded by
// ShutdownTimeout), confirms what Kafka acknowledged and returns nil once
// every goroutine it started returned; the next start resumes from the
// slot's confirmed position. When the slot it streamed from is gone and it
// may not heal (OnSlotLoss, docs/cdc.md "Slot loss"), it stops the same
// way and returns an error wrapping ErrSlotLost.
// It must be called once.
func (c *CDC) Run(ctx context.Context) error {
	laneCtx, cancelLanes := context.WithCancel(context.WithoutCancel(ctx))
	c.proc.start(laneCtx)
	// The lanes wait on the visibility gate: it lives as long as they do.
	visibleDone := make(chan struct{})
	go func() {
		defer close(visibleDone)
		c.visible.run(laneCtx)
	}()
	defer func() {
		cancelLanes()
		<-visibleDone
	}()
	stateCtx, cancelState := context.WithCancel(context.WithoutCancel(ctx))
	stateDone := make(chan struct{})
	go func() {
		defer close(stateDone)
		c.stateLoop(stateCtx)
	}()

	var runErr error
	backoff := c.cfg.MinBackoff
	for ctx.Err() == nil {
		started := time.Now()
		progressed, err := c.session(ctx, cancelLanes)
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, ErrSlotLost) {
			runErr = err
			c.stopped.Store(&runErr)
			break
		}
		c.m.reconnects.Inc()
		if progressed || time.Since(started) > time.Minute {
			backoff = c.cfg.MinBackoff
		}
		wait := retryDelay(backoff, err, c.cfg.UnavailableBackoff)
		c.cfg.Logger.Warn("cdc: replication session ended, reconnecting", "slot", c.cfg.Slot, "backoff", wait, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		backoff = min(backoff*2, c.cfg.MaxBackoff)
	}
	// The session flushed the lanes if it was running; otherwise flush them
	// here (nothing can be confirmed without a connection: the next start
	// redelivers).
	c.flush(cancelLanes)
	cancelState()
	<-stateDone
	c.saveState(context.Background())
	return runErr
}

// flush closes the lanes and waits for them to publish their queues, at
// most ShutdownTimeout; then it abandons the rest (redelivered next time).
func (c *CDC) flush(cancelLanes context.CancelFunc) {
	done := make(chan struct{})
	go func() {
		c.proc.stop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(c.cfg.ShutdownTimeout):
		c.cfg.Logger.Warn("cdc: shutdown timeout, unacknowledged events will be redelivered at next start")
		cancelLanes()
		<-done
	}
}

// stateLoop writes the progress row and measures the slot's lag every
// StateInterval, warning loudly past LagWarnBytes.
func (c *CDC) stateLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.StateInterval)
	defer t.Stop()
	var lastWarn time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.saveState(ctx)
		fctx, cancel := context.WithTimeout(ctx, c.cfg.StateInterval)
		c.advanceFrontier(fctx)
		cancel()
		qctx, cancel := context.WithTimeout(ctx, c.cfg.StateInterval)
		var lag *int64
		err := c.pool.QueryRow(qctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1`, c.cfg.Slot).Scan(&lag)
		cancel()
		if err != nil || lag == nil {
			continue
		}
		c.m.slotLagBytes.Set(float64(*lag))
		if *lag > c.cfg.LagWarnBytes && time.Since(lastWarn) > time.Minute {
			lastWarn = time.Now()
			c.cfg.Logger.Warn("CDC SLOT LAG: PostgreSQL is keeping WAL for an unconfirmed replication slot; "+
				"Kafka or CDC is behind or down, and the disk fills until it catches up or the slot is dropped",
				"slot", c.cfg.Slot, "lag_bytes", *lag, "threshold_bytes", c.cfg.LagWarnBytes)
		}
	}
}

// saveState upserts the progress row. Errors are logged: the row is for
// operators, the slot itself holds the real position.
func (c *CDC) saveState(ctx context.Context) {
	lsn := pglogrepl.LSN(c.sentLSN.Load())
	if lsn == 0 {
		return
	}
	p := c.ckpt.advance()
	n := c.unsaved.Swap(0)
	var lastCommit *time.Time
	if !p.lastCommitAt.IsZero() {
		lastCommit = &p.lastCommitAt
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := c.pool.Exec(qctx, `
		INSERT INTO cdc_state AS s (slot_name, confirmed_lsn, events_published, last_commit_at, updated_at)
		VALUES ($1, $2::pg_lsn, $3, $4, now())
		ON CONFLICT (slot_name) DO UPDATE SET
			confirmed_lsn = excluded.confirmed_lsn,
			events_published = s.events_published + excluded.events_published,
			last_commit_at = coalesce(excluded.last_commit_at, s.last_commit_at),
			updated_at = now()`,
		c.cfg.Slot, lsn.String(), n, lastCommit)
	if err != nil {
		c.unsaved.Add(n)
		if ctx.Err() != nil {
			return // shutdown; Run saves once more
		}
		c.cfg.Logger.Warn("cdc: write progress row", "err", fmt.Errorf("upsert cdc_state: %w", err))
	}
}
