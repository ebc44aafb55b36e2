package rebuild

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/projections"
)

// The follow events of the log, read as replay/ reads it (docs/replay.md,
// "Ordering"): in position order, only events whose transaction and every
// older one have finished (tx_id below the safe horizon), in keyset pages.
// The horizon is fixed once, after T0, so what it leaves out committed
// after T0 and is in Kafka at or above T0.

// followTypes are the event types the followers projection needs.
var followTypes = []string{"user.followed.v1", "user.unfollowed.v1"}

const followPageSQL = `SELECT position, event_id::text, stream_version, type, payload FROM events
WHERE type = ANY($1) AND position > $2 AND tx_id < $3::text::xid8 ORDER BY position LIMIT $4`

// startHorizon returns the snapshot xmax now, once every transaction below
// it has finished (the same wait as replay's PostgreSQL source).
func (r *Rebuilder) startHorizon(ctx context.Context) (uint64, error) {
	read := func(q string) (uint64, error) {
		var s string
		if err := r.pool.QueryRow(ctx, q).Scan(&s); err != nil {
			return 0, fmt.Errorf("read snapshot: %w", err)
		}
		return strconv.ParseUint(s, 10, 64)
	}
	target, err := read(`SELECT pg_snapshot_xmax(pg_current_snapshot())::text`)
	if err != nil {
		return 0, err
	}
	wait := 5 * time.Millisecond
	for {
		xmin, err := read(`SELECT pg_snapshot_xmin(pg_current_snapshot())::text`)
		if err != nil {
			return 0, err
		}
		if xmin >= target {
			return target, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 200*time.Millisecond)
	}
}

// replayFollows applies every follow event below the horizon to f, page by
// page; the next page is read while the previous one is applied.
func (r *Rebuilder) replayFollows(ctx context.Context, f *projections.Followers, horizon uint64, prog *Progress) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type page struct {
		batch []projections.Decoded
		err   error
	}
	pages := make(chan page, 2)
	go func() {
		defer close(pages)
		var last int64
		h := strconv.FormatUint(horizon, 10)
		for {
			batch, err := r.readFollowPage(ctx, last, h)
			select {
			case pages <- page{batch, err}:
			case <-ctx.Done():
				return
			}
			if err != nil || len(batch) < r.cfg.PageSize {
				return
			}
			last = batch[len(batch)-1].Env.Position
		}
	}()
	var n int64
	for p := range pages {
		if p.err != nil {
			return n, p.err
		}
		if err := f.ApplyBatch(ctx, p.batch); err != nil {
			return n, err
		}
		n += int64(len(p.batch))
		prog.Add(len(p.batch))
	}
	return n, ctx.Err()
}

func (r *Rebuilder) readFollowPage(ctx context.Context, after int64, horizon string) ([]projections.Decoded, error) {
	rows, err := r.pool.Query(ctx, followPageSQL, followTypes, after, horizon, r.cfg.PageSize)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	defer rows.Close()
	out := make([]projections.Decoded, 0, r.cfg.PageSize)
	for rows.Next() {
		var d projections.Decoded
		var payload []byte
		if err := rows.Scan(&d.Env.Position, &d.Env.EventID, &d.Env.StreamVersion, &d.Env.Type, &payload); err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
		d.Env.Payload = payload
		ev, err := events.DefaultCodec.DecodeEnvelope(d.Env)
		if err != nil {
			return nil, fmt.Errorf("decode event %s at %d: %w", d.Env.EventID, d.Env.Position, err)
		}
		d.Ev = ev
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return out, nil
}
