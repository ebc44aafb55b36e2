package commands

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
)

// Runner runs a command's transaction: each attempt bounded by TxTimeout,
// the whole transaction run again (with jittered backoff) when it loses a
// concurrency race, and ErrVersionConflict when it keeps losing.
type Runner struct {
	db  DB
	cfg Config
}

// TxFunc is one attempt of a command's work inside a transaction.
type TxFunc func(ctx context.Context, tx pgx.Tx) error

// Run runs fn in a transaction and commits it, retrying on version
// conflicts, deadlocks and serialization failures.
func (r *Runner) Run(ctx context.Context, fn TxFunc) error {
	var err error
	for attempt := 0; attempt < r.cfg.MaxAttempts; attempt++ {
		if attempt > 0 {
			if werr := sleepJitter(ctx, attempt); werr != nil {
				return werr
			}
		}
		err = r.once(ctx, fn)
		if err == nil || !isRetryable(err) {
			return err
		}
	}
	if errors.Is(err, ErrVersionConflict) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrVersionConflict, err)
}

func (r *Runner) once(ctx context.Context, fn TxFunc) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.TxTimeout)
	defer cancel()
	return pgx.BeginFunc(ctx, r.db, func(tx pgx.Tx) error { return fn(ctx, tx) })
}

// sleepJitter waits a random time in [0, 2ms * 2^attempt) so that racing
// transactions stop colliding.
func sleepJitter(ctx context.Context, attempt int) error {
	d := time.Duration(rand.Int64N(int64(2*time.Millisecond) << attempt))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
