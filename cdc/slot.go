package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNoPublication means the publication is missing: the database is not
// migrated (`feed migrate`).
var ErrNoPublication = errors.New("publication is missing (run `feed migrate`)")

// ErrSlotElsewhere means a slot of that name exists for another database or
// another plugin: slot names are cluster-wide.
var ErrSlotElsewhere = errors.New("replication slot belongs to another database or plugin")

// ErrSlotActive means a process is streaming from the slot right now.
var ErrSlotActive = errors.New("replication slot is in use")

// ErrNoSlot means the slot does not exist.
var ErrNoSlot = errors.New("replication slot does not exist")

// DefaultSlot is the replication slot of a database when none is
// configured (FEED_SLOT): feed_cdc_ and the database's name ("postgres"
// when empty) in lower case, other characters than letters, digits and _
// as _, cut to PostgreSQL's 63. Slot names are cluster-wide, so two
// databases on one server need two.
func DefaultSlot(database string) string {
	if database == "" {
		database = "postgres"
	}
	var b strings.Builder
	b.WriteString("feed_cdc_")
	for _, r := range strings.ToLower(database) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 63 {
		s = s[:63]
	}
	return s
}

// ensureSlot checks the publication and creates the slot when missing. It
// reports whether it created the slot. It knows nothing of what CDC
// streamed before: CDC itself goes through prepareSlot (heal.go).
func ensureSlot(ctx context.Context, pool *pgxpool.Pool, slot, publication string, log *slog.Logger) (bool, error) {
	exists, err := checkSlot(ctx, pool, slot, publication)
	if err != nil || exists {
		return false, err
	}
	_, created, err := createSlot(ctx, pool, slot, log)
	return created, err
}

// checkSlot checks the publication and reports whether the slot exists; a
// slot of that name for another database or plugin is ErrSlotElsewhere.
func checkSlot(ctx context.Context, pool *pgxpool.Pool, slot, publication string) (bool, error) {
	var ok bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, publication).Scan(&ok); err != nil {
		return false, fmt.Errorf("look up publication %s: %w", publication, err)
	}
	if !ok {
		return false, fmt.Errorf("publication %s: %w", publication, ErrNoPublication)
	}
	var db, plugin string
	err := pool.QueryRow(ctx, `SELECT coalesce(database, ''), coalesce(plugin, '') FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&db, &plugin)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up slot %s: %w", slot, err)
	}
	var cur string
	if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&cur); err != nil {
		return false, fmt.Errorf("read database name: %w", err)
	}
	if db != cur || plugin != "pgoutput" {
		return false, fmt.Errorf("slot %s (database %q, plugin %q): %w", slot, db, plugin, ErrSlotElsewhere)
	}
	return true, nil
}

// createSlot creates the slot and returns the LSN it starts streaming at:
// every transaction that commits after it is decoded, none before.
// created is false when another process created it concurrently.
func createSlot(ctx context.Context, pool *pgxpool.Pool, slot string, log *slog.Logger) (lsn string, created bool, err error) {
	log.Info("cdc: creating replication slot; this waits for the transactions running on the server now to finish", "slot", slot)
	err = pool.QueryRow(ctx, `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`, slot).Scan(&lsn)
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "42710" { // created concurrently
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("create slot %s: %w", slot, err)
	}
	return lsn, true, nil
}

// DropSlot drops the slot and forgets its progress row, for decommissioning
// a deployment: PostgreSQL then stops keeping WAL for it, and the next CDC
// start is a first start (a new slot from the WAL position of that moment)
// rather than the healing of a lost slot. It refuses while a CDC process
// streams from the slot (ErrSlotActive). When there is no slot it still
// forgets the progress row (which is how an operator accepts a lost slot's
// gap) and returns ErrNoSlot.
// WARNING: events committed after the drop are never streamed by a new slot.
func DropSlot(ctx context.Context, pool *pgxpool.Pool, slot string) error {
	var active bool
	var pid *int32
	err := pool.QueryRow(ctx, `SELECT active, active_pid FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active, &pid)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := pool.Exec(ctx, `DELETE FROM cdc_state WHERE slot_name = $1`, slot); err != nil {
			return fmt.Errorf("forget progress of slot %s: %w", slot, err)
		}
		return fmt.Errorf("drop slot %s: %w", slot, ErrNoSlot)
	}
	if err != nil {
		return fmt.Errorf("look up slot %s: %w", slot, err)
	}
	if active {
		p := int32(0)
		if pid != nil {
			p = *pid
		}
		return fmt.Errorf("drop slot %s (walsender pid %d): stop `feed cdc` first: %w", slot, p, ErrSlotActive)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot); err != nil {
		var pg *pgconn.PgError
		if errors.As(err, &pg) && pg.Code == "55006" {
			return fmt.Errorf("drop slot %s: %w", slot, ErrSlotActive)
		}
		return fmt.Errorf("drop slot %s: %w", slot, err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM cdc_state WHERE slot_name = $1`, slot); err != nil {
		return fmt.Errorf("forget progress of slot %s: %w", slot, err)
	}
	return nil
}

// SlotStatus is what `feed status` shows about CDC.
type SlotStatus struct {
	Slot   string
	Exists bool
	// Active is true while a CDC process streams from the slot.
	Active bool
	// ConfirmedLSN is what CDC confirmed (everything before it is in Kafka).
	ConfirmedLSN string
	CurrentLSN   string
	// LagBytes is pg_current_wal_lsn() - confirmed_flush_lsn: the WAL the
	// server keeps for the slot (it includes other databases' WAL).
	LagBytes int64
	// WALStatus is pg_replication_slots.wal_status (reserved, extended,
	// unreserved, lost).
	WALStatus string
	// LagSeconds is the age of the oldest event not yet published (0 when
	// everything recorded is published).
	LagSeconds float64
	// EventsPublished counts the events acknowledged by Kafka (from the
	// progress row CDC writes every few seconds).
	EventsPublished int64
	// LastCommitAt is the commit time of the newest published transaction.
	LastCommitAt time.Time
	// UpdatedAt is when CDC last wrote its progress row; old means CDC is
	// not running.
	UpdatedAt time.Time

	// Streamed is true when CDC has a progress row for the slot: it
	// streamed from it, so a missing slot was lost (not a first start).
	Streamed bool
	// Frontier is the recorded frontier (every event with a smaller tx_id,
	// committed since CDC first created the slot, is in Kafka), "" while
	// unknown; FrontierAt is when it was last raised.
	Frontier   string
	FrontierAt time.Time
	// HealPending is true while a heal has not finished republishing.
	HealPending bool
	// SlotLosses counts the slot losses CDC healed; LastSlotLoss says what
	// CDC did about the most recent one (healed, or stopped), at
	// LastSlotLossAt.
	SlotLosses     int64
	LastSlotLoss   string
	LastSlotLossAt time.Time
}

// SlotLossLine is the line `feed status` prints about slot losses, ending
// in a newline, or "" when there is nothing to say: the slot is missing
// although CDC streamed from it, a heal is under way, or CDC handled a
// loss before.
func (s SlotStatus) SlotLossLine() string {
	var msg string
	switch {
	case !s.Exists && s.Streamed:
		msg = "SLOT LOST: the slot CDC streamed from is gone; `feed cdc` republishes from the event log what Kafka may lack (or stops, FEED_CDC_ON_SLOT_LOSS=stop); see docs/cdc.md, Slot loss"
	case s.HealPending:
		msg = "HEALING: republishing from the event log after the loss of the slot"
	}
	if s.LastSlotLoss != "" {
		last := fmt.Sprintf("%s at %s (%d healed in all)", s.LastSlotLoss, s.LastSlotLossAt.UTC().Format(time.RFC3339), s.SlotLosses)
		if msg == "" {
			msg = last
		} else {
			msg += "; last: " + last
		}
	}
	if msg == "" {
		return ""
	}
	return "  slot loss        " + msg + "\n"
}

// Status reads the slot's lag and CDC's progress row.
func Status(ctx context.Context, pool *pgxpool.Pool, slot string) (SlotStatus, error) {
	s := SlotStatus{Slot: slot}
	var confirmed, walStatus *string
	err := pool.QueryRow(ctx, `
		SELECT active, confirmed_flush_lsn::text, pg_current_wal_lsn()::text,
		       coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint, wal_status
		FROM pg_replication_slots WHERE slot_name = $1`, slot).
		Scan(&s.Active, &confirmed, &s.CurrentLSN, &s.LagBytes, &walStatus)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return s, fmt.Errorf("read slot %s: %w", slot, err)
	default:
		s.Exists = true
	}
	if confirmed != nil {
		s.ConfirmedLSN = *confirmed
	}
	if walStatus != nil {
		s.WALStatus = *walStatus
	}
	var lastCommit, updated, frontierAt, lossAt *time.Time
	var frontier, loss *string
	err = pool.QueryRow(ctx, `
		SELECT events_published, last_commit_at, updated_at, frontier_xid::text, frontier_at,
		       heal_from IS NOT NULL, slot_losses, last_slot_loss, last_slot_loss_at
		FROM cdc_state WHERE slot_name = $1`, slot).
		Scan(&s.EventsPublished, &lastCommit, &updated, &frontier, &frontierAt, &s.HealPending, &s.SlotLosses, &loss, &lossAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return s, fmt.Errorf("read progress of slot %s: %w", slot, err)
	default:
		s.Streamed = true
	}
	for _, f := range []struct {
		dst *time.Time
		src *time.Time
	}{{&s.LastCommitAt, lastCommit}, {&s.UpdatedAt, updated}, {&s.FrontierAt, frontierAt}, {&s.LastSlotLossAt, lossAt}} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	if frontier != nil {
		s.Frontier = *frontier
	}
	if loss != nil {
		s.LastSlotLoss = *loss
	}
	if !s.Exists {
		return s, nil
	}
	// The oldest event recorded after the newest published commit is the
	// oldest one not yet published (recorded_at is its transaction's start,
	// so this errs towards a larger lag).
	var oldest *time.Time
	err = pool.QueryRow(ctx, `SELECT min(recorded_at) FROM events WHERE recorded_at > coalesce($1::timestamptz, '-infinity')`, lastCommit).Scan(&oldest)
	if err != nil {
		return s, fmt.Errorf("read oldest unpublished event: %w", err)
	}
	if oldest != nil && s.LagBytes > 0 {
		s.LagSeconds = max(time.Since(*oldest).Seconds(), 0)
	}
	return s, nil
}
