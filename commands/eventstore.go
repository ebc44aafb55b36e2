package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/transient"
)

// streamVersionConstraint is the UNIQUE (stream_id, stream_version)
// constraint of migrations/001_event_log.up.sql: the optimistic lock.
const streamVersionConstraint = "events_stream_version_key"

// Append writes evs to their stream at versions expectedVersion+1, +2, ...
// in tx. Every event must belong to the same stream. It fails with
// ErrVersionConflict when the stream is not at expectedVersion: either its
// committed head differs, or a concurrent transaction wrote the next version
// first (the unique index makes this one wait for that one, then fail).
func Append(ctx context.Context, tx pgx.Tx, expectedVersion int64, meta events.Metadata, evs ...events.Event) error {
	if len(evs) == 0 {
		return nil
	}
	if expectedVersion < 0 {
		return fmt.Errorf("append: expected version %d is negative", expectedVersion)
	}
	stream := evs[0].StreamID()
	ids := make([]uuid.UUID, len(evs))
	types := make([]string, len(evs))
	payloads := make([]string, len(evs))
	for i, e := range evs {
		if e.StreamID() != stream {
			return fmt.Errorf("append: events of streams %s and %s in one append", stream, e.StreamID())
		}
		id, p, err := newEventRow(e)
		if err != nil {
			return err
		}
		ids[i], types[i], payloads[i] = id, e.EventType(), p
	}
	mb, err := encodeMetadata(meta)
	if err != nil {
		return err
	}
	// The WHERE guard rejects a stale or future expected version against the
	// committed head; the unique constraint catches the race the guard
	// cannot see (an uncommitted append of the same version).
	tag, err := tx.Exec(ctx, `
		INSERT INTO events (event_id, stream_id, stream_version, type, payload, metadata)
		SELECT e.id, $1, $2 + e.ord, e.type, e.payload, $6
		FROM unnest($3::uuid[], $4::text[], $5::jsonb[]) WITH ORDINALITY AS e(id, type, payload, ord)
		WHERE (SELECT coalesce(max(stream_version), 0) FROM events WHERE stream_id = $1) = $2`,
		stream, expectedVersion, ids, types, payloads, mb)
	if err != nil {
		if isVersionConflict(err) {
			return fmt.Errorf("append to %s at version %d: %w", stream, expectedVersion, ErrVersionConflict)
		}
		return fmt.Errorf("append to %s: %w", stream, err)
	}
	if tag.RowsAffected() != int64(len(evs)) {
		return fmt.Errorf("append to %s at version %d: stream is at another version: %w", stream, expectedVersion, ErrVersionConflict)
	}
	return nil
}

// newEventRow is e's row of the log but its stream and version: a new
// UUIDv7 event id and the encoded payload.
func newEventRow(e events.Event) (uuid.UUID, string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.UUID{}, "", fmt.Errorf("append: new event id: %w", err)
	}
	p, err := events.Encode(e)
	if err != nil {
		return uuid.UUID{}, "", fmt.Errorf("append: %w", err)
	}
	return id, string(p), nil
}

// encodeMetadata is an event row's metadata column.
func encodeMetadata(meta events.Metadata) ([]byte, error) {
	mb, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("append: encode metadata: %w", err)
	}
	return mb, nil
}

// StreamVersion returns the committed head version of a stream (0 when it
// has no events), the expected version for the next Append.
func StreamVersion(ctx context.Context, tx pgx.Tx, stream string) (int64, error) {
	var v int64
	err := tx.QueryRow(ctx, `SELECT coalesce(max(stream_version), 0) FROM events WHERE stream_id = $1`, stream).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("read version of %s: %w", stream, err)
	}
	return v, nil
}

func isVersionConflict(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "23505" && pg.ConstraintName == streamVersionConstraint
}

// isRetryable reports errors after which running the whole transaction
// again can succeed: a lost optimistic race, a deadlock, a serialization
// failure.
func isRetryable(err error) bool {
	if errors.Is(err, ErrVersionConflict) {
		return true
	}
	return transient.TxConflict(err)
}
