// Package testenv gives each test its own PostgreSQL database and Redis key
// prefix on the real servers, cleaned up with t.Cleanup, so tests run in
// parallel without seeing each other; and the helpers tests share to run a
// component until the test ends (Go), to wait for a condition (Eventually)
// and to run their binary as a child process they can kill (ChildMain).
package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/internal/service"
	"github.com/feedco/feed/migrations"
)

// AdminURL is the maintenance database tests create their databases from.
func AdminURL() string {
	if u := os.Getenv("FEED_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// RedisURL is the Redis server tests use.
func RedisURL() string {
	if u := os.Getenv("FEED_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// RandomName returns prefix followed by 12 random hex characters.
func RandomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// DB is a test's own database, migrated.
type DB struct {
	Name string
	URL  string
	Pool *pgxpool.Pool
}

// NewDB creates a fresh database with every migration applied, and drops it
// (and any replication slot on it) when the test ends.
func NewDB(t testing.TB) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := RandomName("feedtest_")
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatalf("connect to PostgreSQL (run `make test`, which prepares it): %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	u, err := url.Parse(AdminURL())
	if err != nil {
		t.Fatalf("parse admin url: %v", err)
	}
	u.Path = "/" + name
	db := &DB{Name: name, URL: u.String()}
	t.Cleanup(func() { dropDB(t, name) })
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 32
	db.Pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect to %s: %v", name, err)
	}
	t.Cleanup(db.Pool.Close)
	if _, err := migrations.Up(ctx, db.Pool); err != nil {
		t.Fatalf("migrate %s: %v", name, err)
	}
	return db
}

func dropDB(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Logf("drop %s: %v", name, err)
		return
	}
	defer admin.Close(ctx)
	// A forgotten slot keeps WAL forever: drop every slot of this database.
	// An active slot's walsender is terminated first.
	_, _ = admin.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, name)
	for i := 0; i < 50; i++ {
		_, err = admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, name)
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Logf("drop slots of %s: %v", name, err)
	}
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		t.Logf("drop database %s: %v", name, err)
	}
}

// Redis is a test's own Redis key prefix on the shared server.
type Redis struct {
	Client redis.UniversalClient
	Prefix string
}

// NewRedis returns a client and a unique key prefix; every key under the
// prefix is deleted when the test ends. With FEED_TEST_REDIS=cluster the
// client is NewRedisCluster's, so that any package's tests run on the
// cluster (docs/testing.md).
func NewRedis(t testing.TB) *Redis {
	t.Helper()
	if os.Getenv("FEED_TEST_REDIS") == "cluster" {
		return NewRedisCluster(t)
	}
	opt, err := redis.ParseURL(RedisURL())
	if err != nil {
		t.Fatal(err)
	}
	opt.PoolSize = 64
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("connect to Redis (run `make test`, which prepares it): %v", err)
	}
	return withPrefix(t, c)
}

// withPrefix gives c a random key prefix whose keys are deleted, and c
// closed, when the test ends.
func withPrefix(t testing.TB, c redis.UniversalClient) *Redis {
	r := &Redis{Client: c, Prefix: RandomName("t") + ":"}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		DeletePrefix(ctx, c, r.Prefix)
		_ = c.Close()
	})
	return r
}

// DeletePrefix deletes every key that starts with prefix: on a cluster,
// on every master, one key per UNLINK (keys of different slots).
func DeletePrefix(ctx context.Context, c redis.UniversalClient, prefix string) {
	if cc, ok := c.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			deletePrefix(ctx, n, prefix, true)
			return nil
		})
		return
	}
	deletePrefix(ctx, c, prefix, false)
}

func deletePrefix(ctx context.Context, c redis.UniversalClient, prefix string, oneKeyEach bool) {
	iter := c.Scan(ctx, 0, escapeGlob(prefix)+"*", 1000).Iterator()
	var batch []string
	flush := func() {
		if oneKeyEach {
			pipe := c.Pipeline()
			for _, k := range batch {
				pipe.Unlink(ctx, k)
			}
			_, _ = pipe.Exec(ctx)
		} else {
			c.Unlink(ctx, batch...)
		}
		batch = batch[:0]
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
}

func escapeGlob(s string) string {
	r := strings.NewReplacer(`*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`, `\`, `\\`)
	return r.Replace(s)
}

// Eventually polls cond every 20 ms until it returns true or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(timeout, 20*time.Millisecond, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, fmt.Sprint(what))
	}
}

// Poll calls cond every interval until it holds or timeout passes, and
// reports whether it held: Eventually for a caller that says itself what
// was left (the differences it was waiting to see go), or whose condition
// is too costly to ask every 20 ms.
func Poll(timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(interval)
	}
	return cond()
}

// Go runs fn in a goroutine until the returned stop is called or the test
// ends, whichever comes first: stop cancels fn's context and waits for fn
// to return. An error from fn fails the test.
func Go(t testing.TB, name string, fn func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// Start starts s, waits until it is ready, and stops it when the test
// ends (a failed or late stop fails the test). It returns s.
func Start(t testing.TB, s *service.Service) *service.Service {
	t.Helper()
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop %s: %v", s.Name(), err)
		}
	})
	select {
	case <-s.Ready():
	case <-s.Done():
		t.Fatalf("%s ended before it was ready: %v", s.Name(), s.Err())
	}
	return s
}

// Logger is the logger of components under test: their warnings and
// errors on stderr, shown by go test with the test's output, and nothing
// below.
func Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers and a reader:
// a child process's stdout and stderr, or a command's output read while
// it runs.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
