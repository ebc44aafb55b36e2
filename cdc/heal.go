package cdc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SlotLossMode says what CDC does when the slot it streamed from is gone
// (dropped by hand, or invalidated past max_slot_wal_keep_size and
// dropped): a new slot starts at the WAL position of its creation, so the
// events committed in between would never reach Kafka.
type SlotLossMode string

const (
	// SlotLossHeal republishes from the event log every event Kafka may
	// not have (from the recorded frontier on), then streams from a new
	// slot created so that nothing falls between the two.
	SlotLossHeal SlotLossMode = "heal"
	// SlotLossStop stops CDC with an error wrapping ErrSlotLost and creates
	// no slot, for operators who prefer to decide by hand.
	SlotLossStop SlotLossMode = "stop"
)

// ErrSlotLost means the slot CDC streamed from is gone and CDC stopped
// instead of creating a slot past events Kafka may not have: OnSlotLoss is
// SlotLossStop, or no frontier was recorded to heal from. `feed cdc
// drop-slot` forgets the progress row (the next start is then a first
// start, and the gap must be replayed or the projections rebuilt).
var ErrSlotLost = errors.New("the replication slot CDC streamed from is gone")

// Heal stages at which tests stop CDC (CDC.hook).
const (
	stageSlotCreated = "slot-created"
	stageRepublished = "republished"
)

// republishPage is the number of events read from the log per query while
// healing.
const republishPage = 5000

// maxFrontierSamples bounds the samples waiting for the confirmed position
// to pass them (while Kafka is down, no new ones are taken).
const maxFrontierSamples = 64

// frontierSample is a candidate frontier: every transaction with an id
// below xid had finished when the WAL insert position was wal, so its
// commit record lies before wal.
type frontierSample struct {
	xid uint64
	wal pglogrepl.LSN
}

// slotState is CDC's progress row as prepareSlot needs it.
type slotState struct {
	found    bool    // CDC streamed from the slot
	frontier *uint64 // nil: unknown
	healFrom *uint64 // set while a heal has not finished
}

func (c *CDC) loadState(ctx context.Context) (slotState, error) {
	var st slotState
	var frontier, healFrom *string
	err := c.pool.QueryRow(ctx, `SELECT frontier_xid::text, heal_from::text FROM cdc_state WHERE slot_name = $1`, c.cfg.Slot).Scan(&frontier, &healFrom)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read progress of slot %s: %w", c.cfg.Slot, err)
	}
	st.found = true
	if st.frontier, err = parseXid8(frontier); err != nil {
		return st, err
	}
	if st.healFrom, err = parseXid8(healFrom); err != nil {
		return st, err
	}
	return st, nil
}

func parseXid8(s *string) (*uint64, error) {
	if s == nil {
		return nil, nil
	}
	v, err := strconv.ParseUint(*s, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("parse xid8 %q: %w", *s, err)
	}
	return &v, nil
}

// prepareSlot makes sure the slot exists before a session streams from it,
// and that streaming from it leaves no gap in Kafka:
//
//   - no slot and no progress row: a first start; the slot is created and
//     the row records the frontier (the snapshot xmin read before the
//     creation: every event below it predates the slot);
//   - the slot exists: it is used as it is, after finishing a heal an
//     earlier process left unfinished;
//   - no slot but a progress row: the slot was lost; CDC heals or stops
//     (OnSlotLoss).
//
// It runs under a session advisory lock per slot, so a warm standby waits
// for the process that heals instead of healing at the same time.
func (c *CDC) prepareSlot(ctx context.Context) (err error) {
	unlock, err := c.lockSlot(ctx)
	if err != nil {
		return err
	}
	defer unlock()

	exists, err := checkSlot(ctx, c.pool, c.cfg.Slot, c.cfg.Publication)
	if err != nil {
		return err
	}
	st, err := c.loadState(ctx)
	if err != nil {
		return err
	}
	switch {
	case exists && st.healFrom != nil:
		c.cfg.Logger.Warn("cdc: finishing an interrupted heal before streaming", "slot", c.cfg.Slot, "tx_id_from", *st.healFrom)
		return c.heal(ctx, *st.healFrom)
	case exists:
		if !st.found {
			// A slot created outside CDC, or by a CDC without progress
			// row: from now on its loss is a loss.
			_, err := c.pool.Exec(ctx, `INSERT INTO cdc_state (slot_name, confirmed_lsn)
				SELECT $1::text, coalesce(confirmed_flush_lsn, '0/0') FROM pg_replication_slots WHERE slot_name = $1::text
				ON CONFLICT (slot_name) DO NOTHING`, c.cfg.Slot)
			if err != nil {
				return fmt.Errorf("record progress row of slot %s: %w", c.cfg.Slot, err)
			}
		}
		return nil
	case !st.found:
		return c.firstStart(ctx)
	default:
		return c.slotLost(ctx, st)
	}
}

// lockSlot takes the session advisory lock of the slot, so one process at
// a time creates, heals or checks it; unlock releases it.
func (c *CDC) lockSlot(ctx context.Context) (unlock func(), err error) {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire connection: %w", err)
	}
	lock := "feed_cdc_slot:" + c.cfg.Slot
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, lock); err != nil {
		conn.Release()
		return nil, fmt.Errorf("lock slot %s: %w", c.cfg.Slot, err)
	}
	return func() {
		if _, uerr := conn.Exec(context.Background(), `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, lock); uerr != nil {
			_ = conn.Conn().Close(context.Background()) // ending the session releases the lock
		}
		conn.Release()
	}, nil
}

// PrepareFirstStart creates the slot and its progress row when this is
// CDC's first start (no slot, no progress row), as Run would, without
// streaming. A process that takes writes and runs CDC itself (`feed dev`)
// calls it before it accepts the first write: an event committed before
// the slot exists would never reach Kafka. A slot that exists, or that
// was lost, is left to Run.
func PrepareFirstStart(ctx context.Context, cfg Config, pool *pgxpool.Pool) error {
	if pool == nil {
		return errors.New("cdc: nil pool")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	c := &CDC{cfg: cfg, pool: pool}
	unlock, err := c.lockSlot(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	exists, err := checkSlot(ctx, pool, cfg.Slot, cfg.Publication)
	if err != nil || exists {
		return err
	}
	st, err := c.loadState(ctx)
	if err != nil || st.found {
		return err
	}
	return c.firstStart(ctx)
}

// firstStart creates the slot and records the progress row with the
// frontier read just before: every transaction below it had finished
// before the slot existed, so no event below it is the slot's to stream.
func (c *CDC) firstStart(ctx context.Context) error {
	x0, err := c.snapshotXmin(ctx)
	if err != nil {
		return err
	}
	// No timeout but ctx: creating a slot waits for every transaction
	// running on the cluster (any database) to finish, however long.
	lsn, created, err := createSlot(ctx, c.pool, c.cfg.Slot, c.cfg.Logger)
	if err != nil || !created {
		return err
	}
	c.cfg.Logger.Info("cdc: created replication slot", "slot", c.cfg.Slot, "lsn", lsn)
	_, err = c.pool.Exec(ctx, `INSERT INTO cdc_state (slot_name, confirmed_lsn, frontier_xid, frontier_at)
		VALUES ($1, $2::pg_lsn, $3::text::xid8, now()) ON CONFLICT (slot_name) DO NOTHING`,
		c.cfg.Slot, lsn, strconv.FormatUint(x0, 10))
	if err != nil {
		return fmt.Errorf("record progress row of slot %s: %w", c.cfg.Slot, err)
	}
	return nil
}

// slotLost handles a slot that is gone although CDC streamed from it.
func (c *CDC) slotLost(ctx context.Context, st slotState) error {
	why := ""
	switch {
	case c.cfg.OnSlotLoss == SlotLossStop:
		why = "OnSlotLoss is stop (FEED_CDC_ON_SLOT_LOSS=stop)"
	case st.frontier == nil && st.healFrom == nil:
		why = "no frontier was recorded, so there is no safe point to republish from"
	}
	if why != "" {
		c.m.slotLost.WithLabelValues(string(SlotLossStop)).Inc()
		c.cfg.Logger.Error("cdc: REPLICATION SLOT LOST: events committed since it went may be missing from Kafka; stopping without creating a slot",
			"slot", c.cfg.Slot, "reason", why)
		note := "stopped: slot missing, " + why
		if _, err := c.pool.Exec(ctx, `UPDATE cdc_state SET last_slot_loss = $2, last_slot_loss_at = now() WHERE slot_name = $1`, c.cfg.Slot, note); err != nil {
			c.cfg.Logger.Warn("cdc: record the slot loss", "err", err)
		}
		return fmt.Errorf("slot %s: %w: %s; see docs/cdc.md, Slot loss", c.cfg.Slot, ErrSlotLost, why)
	}
	var from string
	err := c.pool.QueryRow(ctx, `UPDATE cdc_state SET heal_from = coalesce(heal_from, frontier_xid),
			last_slot_loss = 'healing', last_slot_loss_at = now()
		WHERE slot_name = $1 RETURNING heal_from::text`, c.cfg.Slot).Scan(&from)
	if err != nil {
		return fmt.Errorf("record heal of slot %s: %w", c.cfg.Slot, err)
	}
	fromXid, err := parseXid8(&from)
	if err != nil {
		return err
	}
	if st.healFrom == nil {
		c.m.slotLost.WithLabelValues(string(SlotLossHeal)).Inc()
	}
	c.cfg.Logger.Error("cdc: REPLICATION SLOT LOST: creating a new slot, then republishing from the event log every event from the last acknowledged frontier on",
		"slot", c.cfg.Slot, "tx_id_from", *fromXid)
	if _, _, err := createSlot(ctx, c.pool, c.cfg.Slot, c.cfg.Logger); err != nil {
		return err
	}
	c.hookAt(stageSlotCreated)
	return c.heal(ctx, *fromXid)
}

// heal republishes, in position order and through the lanes, every event
// with from <= tx_id < to, where to is the next transaction id as of a
// snapshot taken after the slot was created and every transaction below it
// has finished (so they are all visible to new snapshots). Together with
// the slot that covers everything: a transaction that committed before the
// slot's starting point had its id before the slot existed, so below to;
// one that commits after it is streamed. Once Kafka acknowledged them all,
// the frontier becomes to and the heal is recorded as done. Interrupted
// anywhere, it is done again by the next start (heal_from stays set).
func (c *CDC) heal(ctx context.Context, from uint64) error {
	c.pauseFrontier()
	defer c.resumeFrontier()
	var startText *string
	err := c.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, c.cfg.Slot).Scan(&startText)
	if err != nil {
		return fmt.Errorf("read start of slot %s: %w", c.cfg.Slot, err)
	}
	if startText == nil {
		return fmt.Errorf("slot %s has no confirmed position", c.cfg.Slot)
	}
	start, err := pglogrepl.ParseLSN(*startText)
	if err != nil {
		return fmt.Errorf("parse start of slot %s: %w", c.cfg.Slot, err)
	}
	to, err := c.waitFinished(ctx)
	if err != nil {
		return err
	}
	began := time.Now()
	n, err := c.republish(ctx, c.pool, from, to, 0, start, nil)
	if err != nil {
		return err
	}
	c.hookAt(stageRepublished)
	note := fmt.Sprintf("healed: republished %d events with tx_id in [%d, %d) from the event log; new slot from %s", n, from, to, start)
	_, err = c.pool.Exec(ctx, `UPDATE cdc_state SET
			frontier_xid = greatest(coalesce(frontier_xid, $2::text::xid8), $2::text::xid8), frontier_at = now(),
			heal_from = NULL, slot_losses = slot_losses + 1, last_slot_loss = $3, last_slot_loss_at = now()
		WHERE slot_name = $1`, c.cfg.Slot, strconv.FormatUint(to, 10), note)
	if err != nil {
		return fmt.Errorf("record end of heal of slot %s: %w", c.cfg.Slot, err)
	}
	c.cfg.Logger.Warn("cdc: slot loss healed: republished the event log's range, streaming from the new slot",
		"slot", c.cfg.Slot, "republished", n, "tx_id_from", from, "tx_id_to", to, "new_slot_lsn", start.String(),
		"took", time.Since(began).Round(time.Millisecond))
	return nil
}

// querier is what republish reads the log through: the pool, or a
// transaction whose one snapshot every page reads.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// republish hands the events with from <= tx_id < to and a position above
// after to the lanes, in position order (commit order for one key's events
// whenever each was written by a transaction that saw the previous one,
// which is how the write side orders an audience's changes), with start as
// their commit LSN, and waits until Kafka acknowledged them all. It reads
// through db and returns how many. onPage, when set, is called after each
// page is handed to the lanes with the count so far and the last position
// handed.
func (c *CDC) republish(ctx context.Context, db querier, from, to uint64, after int64, start pglogrepl.LSN, onPage func(n, last int64)) (int64, error) {
	t := &txn{commitLSN: start, commitTime: time.Now(), receivedAt: time.Now()}
	t.complete.Store(true)
	cols := eventColumns{position: 0, eventID: 1, streamID: 2, streamVersion: 3, typ: 4, payload: 5, metadata: 6, recordedAt: 7}
	fromS, toS := strconv.FormatUint(from, 10), strconv.FormatUint(to, 10)
	var n int64
	for {
		// Text columns in the format pgoutput sends them (recorded_at as
		// the replication session prints it: ISO, UTC).
		rows, err := db.Query(ctx, `
			SELECT position::text, event_id::text, stream_id, stream_version::text, type, payload::text, metadata::text,
			       to_char(recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || '+00'
			FROM events WHERE tx_id >= $1::text::xid8 AND tx_id < $2::text::xid8 AND position > $3
			ORDER BY events.position LIMIT $4`, fromS, toS, after, republishPage) // not the text column of that name
		if err != nil {
			return n, fmt.Errorf("read events to republish: %w", err)
		}
		page, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([][]byte, error) {
			v := make([]string, 8)
			if err := r.Scan(&v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]); err != nil {
				return nil, err
			}
			b := make([][]byte, len(v))
			for i := range v {
				b[i] = []byte(v[i])
			}
			return b, nil
		})
		if err != nil {
			return n, fmt.Errorf("read events to republish: %w", err)
		}
		for _, vals := range page {
			row, err := rowOf(cols, vals, start)
			if err != nil {
				return n, fmt.Errorf("republish: %w", err)
			}
			if row.decodeErr != nil {
				c.m.undecodable.Inc()
				c.cfg.Logger.Error("cdc: cannot decode event payload; publishing it with audience key 0",
					"event", row.env.EventID, "type", row.env.Type, "err", row.decodeErr)
			}
			after = row.env.Position
			t.pending.Add(1)
			t.submitted++
			c.m.inFlight.Inc()
			select {
			case c.proc.lane(row.env.AudienceKey) <- item{row: row, txn: t}:
			case <-ctx.Done():
				return n, ctx.Err()
			}
			n++
		}
		if onPage != nil && len(page) > 0 {
			onPage(n, after)
		}
		if len(page) < republishPage {
			break
		}
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for t.pending.Load() > 0 {
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-tick.C:
		}
	}
	c.m.republished.Add(float64(n))
	return n, nil
}

// waitFinished reads the id the next transaction will get and waits until
// every transaction below it has finished, then returns it.
func (c *CDC) waitFinished(ctx context.Context) (uint64, error) {
	var xs string
	if err := c.pool.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text`).Scan(&xs); err != nil {
		return 0, fmt.Errorf("read snapshot: %w", err)
	}
	target, err := strconv.ParseUint(xs, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read snapshot %q: %w", xs, err)
	}
	return target, c.waitXmin(ctx, target)
}

// waitXmin waits until every transaction with an id below target has
// finished.
func (c *CDC) waitXmin(ctx context.Context, target uint64) error {
	began, told := time.Now(), false
	wait := 5 * time.Millisecond
	for {
		xmin, err := c.snapshotXmin(ctx)
		if err != nil {
			return err
		}
		if xmin >= target {
			return nil
		}
		if !told && time.Since(began) > 5*time.Second {
			told = true
			c.cfg.Logger.Warn("cdc: waiting for older transactions to finish before republishing", "oldest_running_xid", xmin)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// snapshotXmin returns pg_snapshot_xmin(pg_current_snapshot()): every
// transaction id below it has finished.
func (c *CDC) snapshotXmin(ctx context.Context) (uint64, error) {
	var x string
	if err := c.pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`).Scan(&x); err != nil {
		return 0, fmt.Errorf("read snapshot xmin: %w", err)
	}
	v, err := strconv.ParseUint(x, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read snapshot xmin %q: %w", x, err)
	}
	return v, nil
}

// pauseFrontier stops the frontier from moving and forgets its samples,
// for the duration of a heal: what the new slot confirms says nothing
// about the events before its start until the republished ones are
// acknowledged.
func (c *CDC) pauseFrontier() {
	c.frontierMu.Lock()
	defer c.frontierMu.Unlock()
	c.frontierPaused = true
	c.samples = nil
}

func (c *CDC) resumeFrontier() {
	c.frontierMu.Lock()
	defer c.frontierMu.Unlock()
	c.frontierPaused = false
}

// advanceFrontier raises the recorded frontier to the newest sample whose
// WAL position the acknowledged (confirmable) position has passed: every
// transaction below that sample's xid committed before its position, so
// the slot sent it and Kafka acknowledged its events. Then it takes a new
// sample. Called every StateInterval.
func (c *CDC) advanceFrontier(ctx context.Context) {
	c.frontierMu.Lock()
	defer c.frontierMu.Unlock()
	if c.frontierPaused {
		return
	}
	confirmed := c.ckpt.advance().confirmed
	k := 0
	for k < len(c.samples) && c.samples[k].wal <= confirmed {
		k++
	}
	if k > 0 {
		x := c.samples[k-1].xid
		c.samples = c.samples[k:]
		_, err := c.pool.Exec(ctx, `UPDATE cdc_state SET frontier_xid = $2::text::xid8, frontier_at = now()
			WHERE slot_name = $1 AND heal_from IS NULL AND (frontier_xid IS NULL OR frontier_xid < $2::text::xid8)`,
			c.cfg.Slot, strconv.FormatUint(x, 10))
		if err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("cdc: record frontier", "err", fmt.Errorf("update cdc_state: %w", err))
		}
	}
	if len(c.samples) >= maxFrontierSamples {
		return
	}
	// One statement: its snapshot is taken when it starts, before the
	// insert position is read, so every transaction below the xmin wrote
	// its commit record before that position.
	var xs, ws string
	if err := c.pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text, pg_current_wal_insert_lsn()::text`).Scan(&xs, &ws); err != nil {
		return
	}
	x, err := strconv.ParseUint(xs, 10, 64)
	if err != nil {
		return
	}
	w, err := pglogrepl.ParseLSN(ws)
	if err != nil {
		return
	}
	c.samples = append(c.samples, frontierSample{xid: x, wal: w})
}

// hookAt calls the test hook, if any, at a heal stage.
func (c *CDC) hookAt(stage string) {
	if c.hook != nil {
		c.hook(stage)
	}
}

// Ready returns nil while CDC runs or may run, and the error that stopped
// it (wrapping ErrSlotLost) once it stopped for good: a readiness probe
// should fail then.
func (c *CDC) Ready() error {
	if err := c.stopped.Load(); err != nil {
		return *err
	}
	return nil
}
