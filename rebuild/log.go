package rebuild

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// The followers build reads the follow events of the log as replay/ reads
// it (docs/replay.md, "Ordering"): only events whose transaction and every
// older one have finished (tx_id below the safe horizon). The horizon is
// fixed once, after T0, so what it leaves out committed after T0 and is in
// Kafka at or above T0.

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
