package cdc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrCDCRunning means a CDC process streams from the slot: a reseed
// refuses to run beside it (Reseed).
var ErrCDCRunning = errors.New("a CDC process is streaming from the replication slot")

// ErrUnknownPosition means a reseed's starting point names no event of
// the log: a position past its end, or a time after its newest event.
var ErrUnknownPosition = errors.New("no event of the log at or after that point")

// ReseedFrom is where a reseed starts: a position (Position >= 1) or a
// time (Time, compared with recorded_at), exactly one of them.
type ReseedFrom struct {
	Position int64
	Time     time.Time
}

func (f ReseedFrom) String() string {
	if f.Position > 0 {
		return "position " + strconv.FormatInt(f.Position, 10)
	}
	return "time " + f.Time.UTC().Format(time.RFC3339Nano)
}

// ReseedProgress is what a reseed reports while it runs.
type ReseedProgress struct {
	// Queued counts events handed to the lanes, Acked those Kafka
	// acknowledged; Total is how many the reseed publishes in all.
	Queued, Acked, Total int64
	// Position is the position of the last event queued.
	Position int64
}

// ReseedResult describes a finished reseed.
type ReseedResult struct {
	Topic string
	// Events published, from FromPosition to ToPosition (the first and
	// last position published; 0 when none).
	Events                   int64
	FromPosition, ToPosition int64
	// Below is the xmax of the snapshot the log was read in: every event
	// published was written by a transaction below it that the snapshot
	// shows committed. CommitLSN is the commit LSN the events carry (the
	// WAL insert position read before the snapshot).
	Below     uint64
	CommitLSN pglogrepl.LSN
	Took      time.Duration
}

// Reseed republishes the event log from a point on to cfg.Topic through
// the lanes CDC publishes with, for an operator who refills Kafka (a new
// topic, a lost cluster), and returns once Kafka acknowledged every event.
// It is the slot-loss heal's republication (republish) with a position
// bound instead of a transaction-id one, and gives the same guarantees:
//
//   - Visibility: it reads W, the WAL insert position, takes a
//     transaction id X, waits until every transaction below X has
//     finished (so every transaction whose commit record lies before W is
//     visible),
//     then reads the log in one REPEATABLE READ snapshot: it publishes
//     what that snapshot shows, each event visible to new snapshots
//     before it is published (a rebuild that reads PostgreSQL after the
//     topic's end offsets sees it).
//   - Order: position order, which is commit order for one key's events
//     (the write side orders an audience's changes on its users row), one
//     key's events published one at a time in its lane.
//   - Commit LSN: every event carries W, above the commit LSN of
//     everything CDC published before (it is stopped) and below that of
//     every transaction the snapshot does not show (they committed after
//     it, so after W), which CDC streams next: the celebrity set's order
//     guard (readmodel.Order) ranks a reseeded event after what the
//     projectors applied before and before what CDC streams next.
//
// Nothing is lost between a reseed and CDC: every transaction that
// committed before CDC's slot position (CDC is stopped) is in the
// snapshot, and CDC streams what commits after it when it starts again; events in
// both are published twice, which the projectors absorb.
//
// Reseed requires CDC stopped: it refuses with ErrCDCRunning while a
// process streams from cfg.Slot, and holds the slot's advisory lock while
// it runs, so a CDC that starts meanwhile waits for it before streaming.
// Beside a running CDC, a key's live events would reach the topic before
// its older, reseeded ones. It does not read, create or change the slot
// or CDC's progress row.
func Reseed(ctx context.Context, cfg Config, pool *pgxpool.Pool, from ReseedFrom, progress func(ReseedProgress), pubs ...Publisher) (ReseedResult, error) {
	res := ReseedResult{Topic: cfg.Topic}
	if (from.Position > 0) == !from.Time.IsZero() || from.Position < 0 {
		return res, errors.New("cdc: reseed: want a position of at least 1 or a time, exactly one")
	}
	c, err := New(cfg, pool, pubs...)
	if err != nil {
		return res, err
	}
	began := time.Now()
	unlock, err := c.lockSlot(ctx)
	if err != nil {
		return res, err
	}
	defer unlock()
	var active bool
	var pid *int32
	err = pool.QueryRow(ctx, `SELECT active, active_pid FROM pg_replication_slots WHERE slot_name = $1`, c.cfg.Slot).Scan(&active, &pid)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return res, fmt.Errorf("read slot %s: %w", c.cfg.Slot, err)
	}
	if active {
		who := ""
		if pid != nil {
			who = fmt.Sprintf(" (walsender pid %d)", *pid)
		}
		return res, fmt.Errorf("%w %s%s: stop every `feed cdc` and `feed dev` of this database first; "+
			"beside a running CDC a key's newer events would reach the topic before its reseeded older ones", ErrCDCRunning, c.cfg.Slot, who)
	}

	first, err := c.reseedStart(ctx, from)
	if err != nil {
		return res, err
	}
	// W first. Then a transaction id X assigned after it, and a wait
	// until every transaction below X has finished: every transaction
	// whose commit record lies before W had its id before X (a snapshot's
	// xmax would not do: a transaction between writing its commit record
	// and leaving the ProcArray may hold an id above it), so it is
	// visible. The log is read in one snapshot taken then.
	// What it shows committed before it; what it does not show commits
	// after it, so after W.
	var ws string
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&ws); err != nil {
		return res, fmt.Errorf("read WAL position: %w", err)
	}
	w, err := pglogrepl.ParseLSN(ws)
	if err != nil {
		return res, fmt.Errorf("parse WAL position %q: %w", ws, err)
	}
	var xs string
	if err := pool.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xs); err != nil {
		return res, fmt.Errorf("read a transaction id: %w", err)
	}
	x, err := strconv.ParseUint(xs, 10, 64)
	if err != nil {
		return res, fmt.Errorf("read a transaction id %q: %w", xs, err)
	}
	if err := c.waitXmin(ctx, x+1); err != nil {
		return res, err
	}
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return res, fmt.Errorf("begin the reseed's snapshot: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var bs string
	if err := tx.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text`).Scan(&bs); err != nil {
		return res, fmt.Errorf("read the reseed's snapshot: %w", err)
	}
	below, err := strconv.ParseUint(bs, 10, 64)
	if err != nil {
		return res, fmt.Errorf("read the reseed's snapshot %q: %w", bs, err)
	}
	res.Below, res.CommitLSN = below, w
	var total int64
	err = tx.QueryRow(ctx, `SELECT count(*), coalesce(min(position), 0), coalesce(max(position), 0) FROM events
		WHERE position >= $1`, first).Scan(&total, &res.FromPosition, &res.ToPosition)
	if err != nil {
		return res, fmt.Errorf("count events to reseed: %w", err)
	}

	laneCtx, cancelLanes := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelLanes()
	c.proc.start(laneCtx)
	defer c.flush(cancelLanes)
	var queued, last atomic.Int64
	report := func() {
		if progress != nil {
			progress(ReseedProgress{Queued: queued.Load(), Acked: c.unsaved.Load(), Total: total, Position: last.Load()})
		}
	}
	stopTick := make(chan struct{})
	tickDone := make(chan struct{})
	go func() {
		defer close(tickDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopTick:
				return
			case <-t.C:
				report()
			}
		}
	}()
	n, err := c.republish(ctx, tx, 0, below, first-1, w, func(n, pos int64) {
		queued.Store(n)
		last.Store(pos)
	})
	close(stopTick)
	<-tickDone
	queued.Store(n)
	report()
	if err != nil {
		return res, fmt.Errorf("reseed: %w", err)
	}
	res.Events = n
	res.Took = time.Since(began)
	c.cfg.Logger.Info("cdc: reseeded the topic from the event log", "topic", c.cfg.Topic, "events", n,
		"from_position", res.FromPosition, "to_position", res.ToPosition, "tx_id_below", below, "commit_lsn", w.String(),
		"took", res.Took.Round(time.Millisecond))
	return res, nil
}

// reseedStart resolves from to the first position to publish, or
// ErrUnknownPosition when the log has no event there.
func (c *CDC) reseedStart(ctx context.Context, from ReseedFrom) (int64, error) {
	var last *int64
	if err := c.pool.QueryRow(ctx, `SELECT max(position) FROM events`).Scan(&last); err != nil {
		return 0, fmt.Errorf("read the end of the log: %w", err)
	}
	if last == nil {
		return 0, fmt.Errorf("%w: the event log is empty", ErrUnknownPosition)
	}
	if from.Position > 0 {
		if from.Position > *last {
			return 0, fmt.Errorf("%w: position %d is past the end of the log (its last event is at position %d)", ErrUnknownPosition, from.Position, *last)
		}
		return from.Position, nil
	}
	// Positions are taken at insert and recorded_at is the inserting
	// transaction's start, so every event recorded at or after the time
	// lies at or after the first such position; the few older events
	// between are published too (duplicates, absorbed).
	var first *int64
	if err := c.pool.QueryRow(ctx, `SELECT min(position) FROM events WHERE recorded_at >= $1`, from.Time).Scan(&first); err != nil {
		return 0, fmt.Errorf("find the first event recorded at or after %s: %w", from.Time.UTC().Format(time.RFC3339Nano), err)
	}
	if first == nil {
		var newest time.Time
		_ = c.pool.QueryRow(ctx, `SELECT max(recorded_at) FROM events`).Scan(&newest)
		return 0, fmt.Errorf("%w: no event recorded at or after %s (the newest was recorded at %s)", ErrUnknownPosition,
			from.Time.UTC().Format(time.RFC3339Nano), newest.UTC().Format(time.RFC3339Nano))
	}
	return *first, nil
}
