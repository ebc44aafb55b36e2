package commands

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// pairChange is a command on a pair of users (a follow, a mute) as one
// statement that runs once both users' rows are locked: the statement, its
// arguments, the pair, and how its answer reads.
type pairChange struct {
	sql    string
	args   []any
	ids    []int64 // the pair, the actor first
	result func(pgx.Row) (bool, error)
}

// inTx locks the pair in tx (lockUsers) and runs the statement.
func (c pairChange) inTx(ctx context.Context, tx pgx.Tx) (bool, error) {
	if err := lockUsers(ctx, tx, c.ids...); err != nil {
		return false, err
	}
	return c.result(tx.QueryRow(ctx, c.sql, c.args...))
}

// batch is inTx without a transaction of the caller's: the users' lock and
// the statement queued in one pgx batch, sent at once and answered at
// once. PostgreSQL runs the statements of a batch (the extended protocol's
// messages up to one Sync) as one implicit transaction, all or nothing,
// and in READ COMMITTED each statement still takes its own snapshot when
// it starts: the statement starts once the lock is held and sees every
// change of the pair committed before, as in inTx. A user that does not
// exist fails the batch (a foreign key) or changes nothing; the lock's
// rows say which user, as lockUsers does. A follow's five round trips
// (BEGIN, the lock, the block check, the change, COMMIT) become one:
// BenchmarkFollow in api/ (docs/benchmarks.md, "Write side").
func (c pairChange) batch(ctx context.Context, db DB) (bool, error) {
	var b pgx.Batch
	b.Queue(lockUsersSQL, c.ids)
	b.Queue(c.sql, c.args...)
	br := db.SendBatch(ctx, &b)
	changed, err := func() (bool, error) {
		rows, err := br.Query()
		if err != nil {
			return false, fmt.Errorf("lock users: %w", err)
		}
		if err := checkLocked(rows, c.ids); err != nil {
			return false, err
		}
		return c.result(br.QueryRow())
	}()
	if cerr := br.Close(); err == nil && cerr != nil {
		return false, fmt.Errorf("change %d -> %d: %w", c.ids[0], c.ids[1], cerr)
	}
	return changed, err
}
