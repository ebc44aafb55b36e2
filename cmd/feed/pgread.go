package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/feedco/feed/internal/transient"
)

// Dead pooled connections: when PostgreSQL terminates its connections
// (a restart, pg_terminate_backend, a failover), the pool's idle ones are
// dead and the next statement on each fails. The query side's reads run
// once more on another connection (readRetryDB), and for a few seconds
// after a dead connection is seen the pool pings every connection it
// hands out (pingAfterDeadConn), so the rest are found and replaced before
// a statement goes out on them.

// deadConnSeen is when a statement last failed on a dead pooled
// connection (unix nanoseconds).
var deadConnSeen atomic.Int64

// pingWindow is how long after a dead connection every acquired one is
// pinged.
const pingWindow = 5 * time.Second

// pingAfterDeadConn is pgxpool's ShouldPing: pgx's default (a connection
// idle for more than a second), and every connection within pingWindow of
// a dead one.
func pingAfterDeadConn(_ context.Context, p pgxpool.ShouldPingParams) bool {
	return p.IdleDuration > time.Second || time.Now().UnixNano()-deadConnSeen.Load() < int64(pingWindow)
}

// readRetryDB is the query side's PostgreSQL: a query (a read) that fails
// on a dead pooled connection before it returned a row runs once more.
// Exec is not retried.
type readRetryDB struct{ *pgxpool.Pool }

func (d readRetryDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := d.Pool.Query(ctx, sql, args...)
	if err != nil {
		if !d.retry(ctx, err) {
			return nil, err
		}
		return d.Pool.Query(ctx, sql, args...)
	}
	return &retryRows{Rows: rows, retry: func() (pgx.Rows, error) { return d.Pool.Query(ctx, sql, args...) },
		shouldRetry: func(err error) bool { return d.retry(ctx, err) }}, nil
}

// retry reports whether err is a dead pooled connection worth one more
// try, and notes it for pingAfterDeadConn.
func (readRetryDB) retry(ctx context.Context, err error) bool {
	if !transient.DeadConn(err) || ctx.Err() != nil {
		return false
	}
	deadConnSeen.Store(time.Now().UnixNano())
	return true
}

// retryRows are a query's rows that, when the first Next fails on a dead
// connection, are those of the same query run again.
type retryRows struct {
	pgx.Rows
	retry       func() (pgx.Rows, error)
	shouldRetry func(error) bool
	started     bool // a row was returned, or the query was run again
	err         error
}

func (r *retryRows) Next() bool {
	if r.Rows.Next() {
		r.started = true
		return true
	}
	if r.started || !r.shouldRetry(r.Rows.Err()) {
		return false
	}
	r.started = true
	r.Rows.Close()
	rows, err := r.retry()
	if err != nil {
		r.err = err
		return false
	}
	r.Rows = rows
	return rows.Next()
}

func (r *retryRows) Err() error {
	if r.err != nil {
		return r.err
	}
	return r.Rows.Err()
}

func (r *retryRows) CommandTag() pgconn.CommandTag { return r.Rows.CommandTag() }
