package rebuild

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrBusy is returned when another rebuild holds the lock.
var ErrBusy = errors.New("another rebuild is running")

// lockKey is the PostgreSQL advisory lock of the rebuilds of one key
// namespace (prefix): a 64-bit hash of a fixed label and the prefix.
func lockKey(prefix string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("feed.rebuild\x00" + prefix))
	return int64(h.Sum64())
}

// lock is a held advisory lock: session-level, on one connection kept for
// the whole rebuild. A rebuild killed in any way loses its connection, and
// PostgreSQL releases the lock at once: no stale lock, no fencing token.
type lock struct {
	conn *pgxpool.Conn
	key  int64
}

// acquire takes the lock without waiting, or returns ErrBusy.
func acquire(ctx context.Context, pool *pgxpool.Pool, prefix string) (*lock, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("take rebuild lock: %w", err)
	}
	key := lockKey(prefix)
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok); err != nil {
		conn.Release()
		return nil, fmt.Errorf("take rebuild lock: %w", err)
	}
	if !ok {
		conn.Release()
		return nil, ErrBusy
	}
	return &lock{conn: conn, key: key}, nil
}

// release unlocks; if that fails the connection is closed, which unlocks too.
func (l *lock) release(ctx context.Context) {
	if _, err := l.conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, l.key); err != nil {
		_ = l.conn.Conn().Close(context.WithoutCancel(ctx))
	}
	l.conn.Release()
}

// Locked reports whether a rebuild of the namespace holds the lock now (for
// `feed status`), without taking it.
func Locked(ctx context.Context, pool *pgxpool.Pool, prefix string) (bool, error) {
	key := uint64(lockKey(prefix))
	var held bool
	err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1)`,
		int64(key>>32), int64(key&0xffffffff)).Scan(&held)
	if err != nil {
		return false, fmt.Errorf("read rebuild lock: %w", err)
	}
	return held, nil
}
