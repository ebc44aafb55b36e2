package main

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/testkit/testenv"
)

// A Redis that refuses connections fails a command after one dial per
// attempt (go-redis's default is five, 100 ms apart, per attempt, and
// three retries with a backoff): the query side's breaker counts the
// failure at once.
func TestRedisFailsFast(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // refused from now on
	opt := &redis.Options{Addr: addr}
	failFast(&opt.DialTimeout, &opt.DialerRetries, &opt.MaxRetries, &opt.MinRetryBackoff, &opt.MaxRetryBackoff)
	var dials atomic.Int64
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	if err := c.Get(context.Background(), "k").Err(); err == nil {
		t.Fatal("a refused Redis answered")
	}
	if n := dials.Load(); n > 2 {
		t.Fatalf("%d dials for one command against a refused Redis, want at most 2 (one per attempt)", n)
	}
}

// PostgreSQL terminated the pool's connections (a restart, a failover):
// the query side's next read runs once more on a new connection instead
// of failing, and the pool pings the connections it hands out for a
// while, so the other dead ones are replaced before a read goes out on
// them.
func TestReadRetriedOnDeadConnection(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	pool, err := openPostgres(ctx, Config{DatabaseURL: db.URL}, 8, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	read := readRetryDB{pool}
	count := func() (int, error) {
		rows, err := read.Query(ctx, `SELECT count(*) FROM users`)
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		var n int
		for rows.Next() {
			if err := rows.Scan(&n); err != nil {
				return 0, err
			}
		}
		return n, rows.Err()
	}
	if _, err := count(); err != nil { // a pooled connection, used a moment ago: not pinged
		t.Fatal(err)
	}
	var terminated int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = '') t`).Scan(&terminated); err != nil {
		t.Fatal(err)
	}
	if terminated == 0 {
		t.Fatal("no connection of the pool to terminate")
	}
	for i := range 3 {
		if _, err := count(); err != nil {
			t.Fatalf("read %d after the pool's connections were terminated: %v", i, err)
		}
	}
}
