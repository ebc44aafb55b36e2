package queries

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// setupOwnRedis is setup over an own redis-server.
func setupOwnRedis(t *testing.T, cfg Config) (*bundle, *testenv.RedisServer) {
	t.Helper()
	srv := testenv.StartRedisServer(t)
	db := testenv.NewDB(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 16})
	t.Cleanup(func() { _ = rdb.Close() })
	cfg.Keys = readmodel.Keys{Prefix: "t:"}
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	cfg.Logger = testenv.Logger()
	f, err := New(cfg, db.Pool, rdb)
	if err != nil {
		t.Fatal(err)
	}
	runFeed(t, f)
	return &bundle{t: t, ctx: context.Background(), feed: f, db: db, rdb: rdb, keys: cfg.Keys, reg: reg}, srv
}

// graph is a small social graph: reader follows two authors; a stranger
// and a deleted post must not show.
func (b *bundle) graph() (reader, author int64) {
	reader, author, other, stranger := b.user(), b.user(), b.user(), b.user()
	b.follow(reader, author)
	b.follow(reader, other)
	base := time.Now().Add(-time.Hour).UnixMilli()
	for i := range int64(7) {
		b.post(author, base+i*10)
		b.post(other, base+i*10+3)
		b.post(stranger, base+i*10+5)
	}
	b.post(reader, base+100)
	b.deleteRow(b.post(author, base+101))
	return reader, author
}

// While Redis is down, home and author pages come from PostgreSQL, marked
// degraded, equal to the truth page by page; the read circuit opens; when
// Redis comes back empty, reads are answered (cold, from PostgreSQL) and
// never fail, and the circuit closes.
func TestHomeDegradedWhileRedisDown(t *testing.T) {
	t.Parallel()
	b, srv := setupOwnRedis(t, Config{RedisBreakerOpen: 200 * time.Millisecond})
	reader, author := b.graph()
	sameFeed(t, "redis up", b.readHome(reader, 3), b.truth(reader))

	srv.Stop()
	// Until the process learns that Redis is gone (its invalidation
	// connection ends, or the keep-alive gives up on it), the read cache
	// answers the pages it holds as it would with Redis up: right pages,
	// and successes for the circuit. On a loaded machine that can outlast
	// the reads below, so read until the pages come from PostgreSQL.
	testenv.Eventually(t, 10*time.Second, "home pages degraded after Redis stopped (the read cache no longer answers)", func() bool {
		p, err := b.feed.Home(b.ctx, reader, "", 3)
		if err != nil {
			t.Fatalf("home read on a stopped Redis: %v", err)
		}
		return p.Degraded
	})
	for range 3 {
		sameFeed(t, "redis down", b.readHome(reader, 3), b.truth(reader))
	}
	if s := b.feed.Circuits().Reads; s != "open" {
		t.Fatalf("read circuit %s after reads failed on a stopped Redis, want open", s)
	}
	p, err := b.feed.Home(b.ctx, reader, "", 2)
	if err != nil || !p.Degraded || len(p.Items) != 2 || p.NextCursor == nil {
		t.Fatalf("first page while Redis is down: %+v, %v; want 2 degraded items and a cursor", p, err)
	}
	got := b.readAll(func(c string) (Page, error) {
		p, err := b.feed.AuthorPosts(b.ctx, author, author, c, 2)
		if err == nil && !p.Degraded {
			t.Errorf("author page while Redis is down not degraded")
		}
		return p, err
	}, 2)
	sameFeed(t, "author posts, redis down", got, b.authorTruth(author))

	srv.Start() // back, empty
	testenv.Eventually(t, 10*time.Second, "reads no longer degraded and the read circuit closed after Redis came back", func() bool {
		p, err := b.feed.Home(b.ctx, reader, "", 50)
		if err != nil {
			t.Fatalf("home read after Redis came back empty: %v", err)
		}
		keys := make([]key, len(p.Items))
		for i, it := range p.Items {
			keys[i] = itemKey(t, it)
		}
		sameFeed(t, "redis back empty", keys, b.truth(reader))
		return !p.Degraded && b.feed.Circuits().Reads == "closed"
	})
	sameFeed(t, "redis back, paged", b.readHome(reader, 3), b.truth(reader))
}

// While Redis is down the write-through fails a few times, then its
// circuit opens and PostCreated skips Redis at once (ErrCircuitOpen); the
// author's own new posts still show (from PostgreSQL). When Redis is back
// the half-open probe closes the circuit.
func TestPostCreatedCircuitOpensWhileRedisDown(t *testing.T) {
	t.Parallel()
	// The open period is long enough that the checks of the open circuit
	// below run inside it however slow the host; the probe loop waits it out.
	b, srv := setupOwnRedis(t, Config{RedisBreakerOpen: 3 * time.Second, RedisBreakerFailures: 3})
	reader, _ := b.graph()
	srv.Stop()
	base := time.Now().UnixMilli()
	for i := range int64(3) {
		k := b.post(reader, base+i)
		err := b.feed.PostCreated(b.ctx, NewPost{ID: k.id, AuthorID: reader, Content: fmt.Sprint("post ", k.id), CreatedAt: time.UnixMilli(k.ms)})
		if err == nil || errors.Is(err, ErrCircuitOpen) || !errors.Is(err, ErrRedisUnavailable) {
			t.Fatalf("write-through %d with Redis down: %v, want a Redis error before the circuit opens", i, err)
		}
	}
	if s := b.feed.Circuits().Writes; s != "open" {
		t.Fatalf("write circuit %s after 3 failures, want open", s)
	}
	k := b.post(reader, base+10)
	err := b.feed.PostCreated(b.ctx, NewPost{ID: k.id, AuthorID: reader, Content: fmt.Sprint("post ", k.id), CreatedAt: time.UnixMilli(k.ms)})
	if !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("write-through with the circuit open: %v, want ErrCircuitOpen", err)
	}
	if v := counter(b.feed.Metrics().WriteThroughs.WithLabelValues("skipped")); v != 1 {
		t.Fatalf("skipped write-throughs %v, want 1", v)
	}
	sameFeed(t, "own posts while Redis is down", b.readHome(reader, 4), b.truth(reader))

	srv.Start()
	// Past RedisBreakerOpen the next call is the probe. go-redis's pool,
	// after PoolSize failed dials, returns the last dial error until its
	// own background dial (once a second) succeeds: a probe in that second
	// fails and opens the circuit again, and a later one closes it.
	deadline := time.Now().Add(20 * time.Second)
	for ms := base + 20; ; ms++ {
		// Calls inside RedisBreakerOpen are skipped: the first once the
		// circuit is half-open is the probe.
		testenv.Eventually(t, 20*time.Second, "the write circuit half-open", func() bool { return b.feed.Circuits().Writes != "open" })
		k = b.post(reader, ms)
		err := b.feed.PostCreated(b.ctx, NewPost{ID: k.id, AuthorID: reader, Content: fmt.Sprint("post ", k.id), CreatedAt: time.UnixMilli(k.ms)})
		if err == nil {
			break
		}
		if !errors.Is(err, ErrRedisUnavailable) && !errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("probe write-through with Redis back: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("probe write-through still failing 20 s after Redis came back: %v", err)
		}
	}
	if s := b.feed.Circuits().Writes; s != "closed" {
		t.Fatalf("write circuit %s after a successful probe, want closed", s)
	}
	sameFeed(t, "own posts after Redis is back", b.readHome(reader, 4), b.truth(reader))
}

// The PostgreSQL fallback is bounded: with every slot taken, a read that
// needs it fails with ErrFallbackBusy (503), never waits long.
func TestDegradedReadsBounded(t *testing.T) {
	t.Parallel()
	b, srv := setupOwnRedis(t, Config{FallbackReads: 1})
	reader, _ := b.graph()
	srv.Stop()
	if err := b.feed.fallback.Acquire(b.ctx, 1); err != nil {
		t.Fatal(err)
	}
	_, err := b.feed.Home(b.ctx, reader, "", 10)
	if !errors.Is(err, ErrFallbackBusy) {
		t.Fatalf("home with the fallback full: %v, want ErrFallbackBusy", err)
	}
	b.feed.fallback.Release(1)
	if p, err := b.feed.Home(b.ctx, reader, "", 10); err != nil || !p.Degraded {
		t.Fatalf("home with a free fallback slot: %+v, %v", p, err)
	}
}
