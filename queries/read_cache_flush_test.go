package queries

import (
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/readmodel"
)

// FLUSHDB of another database of the server, then FLUSHALL: each empties
// Redis's tracking table (no key read before it is invalidated again) and
// sends a null invalidation. The cache flushes itself and stays on: the
// same generation, caching again, and a write made after the flush (of
// which no invalidation comes) is on the next read. On a redis-server of
// the test's own, since FLUSHALL wipes every database.
func TestReadCacheSurvivesFlush(t *testing.T) {
	t.Parallel()
	b, srv := setupOwnRedis(t, Config{})
	rdb := b.rdb.(*redis.Client)
	rdb.AddHook(cacheSyncHook{b.feed})
	seed := func() {
		if err := rdb.SAdd(b.ctx, b.keys.Celebrities(), readmodel.SentinelBuilt).Err(); err != nil {
			t.Fatal(err)
		}
	}
	seed()
	u, a := cachedFeedOn(b)
	g := b.feed.cache.current()
	gens := b.feed.cache.stats.generations.Load()
	// another client, without the sync hook, on database 1
	o := rdb.Options()
	o.DB = 1
	other1 := redis.NewClient(o)
	t.Cleanup(func() { _ = other1.Close() })
	other0 := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = other0.Close() })

	flushed := func(what string, flushes int64) {
		t.Helper()
		if err := b.feed.cache.sync(b.ctx); err != nil {
			t.Fatal(err)
		}
		// one null invalidation per tracking connection
		if got := b.feed.cache.stats.flushes.Load() - flushes; got < 1 {
			t.Fatalf("%s: %d cache flushes, want at least 1", what, got)
		}
		if b.feed.cache.current() != g || b.feed.cache.stats.generations.Load() != gens {
			t.Fatalf("%s: the read cache's generation ended (off, then %d generations since): a flush must not turn it off",
				what, b.feed.cache.stats.generations.Load()-gens)
		}
	}

	if err := other1.Set(b.ctx, "x", 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	flushes := b.feed.cache.stats.flushes.Load()
	if err := other1.FlushDB(b.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	flushed("FLUSHDB of database 1", flushes)
	// u's inbox is no longer tracked by Redis: this write sends no
	// invalidation, and is seen only because the cache dropped the inbox.
	k := addToInbox(b, other0, u, a, base+10)
	if got, n := firstItem(b, u); got != k || n != 4 {
		t.Fatalf("after FLUSHDB: first item %v of %d, want the new post %v of 4 (a stale inbox)", got, n, k)
	}
	// cached again, from the same generation
	hits := b.feed.cache.stats.hits.Load()
	firstItem(b, u)
	waitIdle(b.feed)
	firstItem(b, u)
	if b.feed.cache.stats.hits.Load() == hits {
		t.Fatal("no cache hits after FLUSHDB: the cache is not caching")
	}

	flushes = b.feed.cache.stats.flushes.Load()
	if err := other0.FlushAll(b.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	flushed("FLUSHALL", flushes)
	// The read models written again (through the test client), with one
	// more post.
	seed()
	if err := rdb.HSet(b.ctx, b.keys.FollowingVersions(u), readmodel.SentinelBuilt, 1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.SAdd(b.ctx, b.keys.Following(u), strconv.FormatInt(a, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	k2 := b.post(a, base+11)
	b.projectAll(nil, []int64{u}, 500, 500)
	if got, n := firstItem(b, u); got != k2 || n != 5 {
		t.Fatalf("after FLUSHALL: first item %v of %d, want the new post %v of 5", got, n, k2)
	}
	if b.feed.cache.current() != g {
		t.Fatal("the read cache's generation ended after FLUSHALL")
	}
}
