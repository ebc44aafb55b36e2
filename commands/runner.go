package commands

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/internal/transient"
)

// Runner runs a command's transaction: each attempt bounded by TxTimeout,
// the whole transaction run again (with jittered backoff) when it loses a
// concurrency race or its connection, and ErrVersionConflict when it keeps
// losing races.
type Runner struct {
	db  DB
	cfg Config
}

// TxFunc is one attempt of a command's work inside a transaction.
type TxFunc func(ctx context.Context, tx pgx.Tx) error

// Run runs fn in a transaction and commits it, retrying on version
// conflicts, deadlocks and serialization failures, and on a connection
// lost before COMMIT was sent (see RunReplaySafe). A connection lost while
// the COMMIT was in flight is ErrOutcomeUnknown: the transaction may have
// committed, so it is not run again.
func (r *Runner) Run(ctx context.Context, fn TxFunc) error {
	return r.run(ctx, fn, false)
}

// RunReplaySafe is Run for work that is safe to run again even when an
// earlier attempt may have committed (it claims an idempotency key in the
// transaction, so a second run replays the first): a connection lost
// during COMMIT is retried too.
func (r *Runner) RunReplaySafe(ctx context.Context, fn TxFunc) error {
	return r.run(ctx, fn, true)
}

func (r *Runner) run(ctx context.Context, fn TxFunc, replaySafe bool) error {
	var err error
	for attempt := 0; attempt < r.cfg.MaxAttempts; attempt++ {
		if attempt > 0 {
			if werr := sleepJitter(ctx, attempt); werr != nil {
				return werr
			}
		}
		var atCommit bool
		atCommit, err = r.once(ctx, fn)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return err
		case transient.PostgresDown(err):
			if atCommit && !replaySafe && !transient.NotSent(err) {
				return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
			}
			continue // nothing committed, or the retry replays what did
		case !isRetryable(err):
			return err
		}
	}
	if transient.PostgresDown(err) {
		return err // PostgreSQL is away: the caller answers 503
	}
	if errors.Is(err, ErrVersionConflict) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrVersionConflict, err)
}

// StmtFunc is one attempt of a command's work as a single autocommitted
// statement on db: the statement is the whole transaction.
type StmtFunc func(ctx context.Context, db DB) error

// RunStatement runs fn, a single autocommitted statement, retrying on
// version conflicts, deadlocks and serialization failures (PostgreSQL
// rolled the statement back) and on a connection lost before the
// statement was sent. Any other failure without a statement error from
// PostgreSQL (a connection lost, the backend terminated, the attempt's
// timeout) may have come after the implicit commit, so it is
// ErrOutcomeUnknown and not run again.
func (r *Runner) RunStatement(ctx context.Context, fn StmtFunc) error {
	var err error
	for attempt := 0; attempt < r.cfg.MaxAttempts; attempt++ {
		if attempt > 0 {
			if werr := sleepJitter(ctx, attempt); werr != nil {
				return werr
			}
		}
		err = r.onceStatement(ctx, fn)
		switch {
		case err == nil:
			return nil
		case transient.NotSent(err):
			if ctx.Err() != nil {
				return err
			}
			continue // never reached PostgreSQL
		case !statementFailed(err):
			return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		case !isRetryable(err):
			return err
		}
	}
	if transient.PostgresDown(err) {
		return err
	}
	if errors.Is(err, ErrVersionConflict) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrVersionConflict, err)
}

func (r *Runner) onceStatement(ctx context.Context, fn StmtFunc) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.TxTimeout)
	defer cancel()
	return fn(ctx, r.db)
}

// statementFailed reports an error of an autocommitted statement that
// PostgreSQL rolled back: an error it reported (or one the command derived
// from the statement's answer, such as ErrNotFound), as opposed to a lost
// connection or a terminated backend, whose report can follow the commit.
func statementFailed(err error) bool {
	if transient.PostgresDown(err) || transient.Timeout(err) || errors.Is(err, context.Canceled) {
		return false
	}
	return true
}

// once runs one attempt; atCommit reports that err came from the COMMIT
// (fn had succeeded), the only point where a lost connection leaves the
// outcome unknown.
func (r *Runner) once(ctx context.Context, fn TxFunc) (atCommit bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.TxTimeout)
	defer cancel()
	tx, err := r.db.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(ctx) }() // after a commit: a no-op
	if err := fn(ctx, tx); err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return true, err
	}
	return false, nil
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
