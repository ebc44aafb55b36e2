package queries

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// instance is another API instance's query side beside b.feed: the same
// PostgreSQL and key namespace, a Redis client of its own.
func (b *bundle) instance(rdb redis.UniversalClient, cfg Config) *Feed {
	b.t.Helper()
	cfg.Keys = readmodel.Keys{Prefix: b.keys.Prefix, Versions: readmodel.Versions{}}
	cfg.Registerer = prometheus.NewRegistry()
	f, err := New(cfg, b.db.Pool, rdb)
	if err != nil {
		b.t.Fatal(err)
	}
	runFeed(b.t, f)
	return f
}

// TestOwnPostThroughAnotherInstance: a post made through one API instance
// is in its author's next home read through another, 100 times out of
// 100: the first instance marked it as the author's newest (PostCreated),
// and the reader, whose timeline of the author does not hold it (no
// projector runs), reads it from PostgreSQL. Every instance has the read
// cache on (the default), and the reader reads the author's feed before
// every post, so its cache holds the author's marker when the post is
// marked (checked each time, read again until it does): only the read's
// barrier (tracker.barrier) makes it wait for the invalidation of that
// key, which Redis sends before it answers the writer. With
// FEED_TEST_REDIS=cluster the same runs on the cluster, through the
// tracker of the author's node.
func TestOwnPostThroughAnotherInstance(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	u, _, _ := b.projectedFollow(3)
	b.setZ(b.keys.Timeline(u), nil, true, -1) // built: only the marker shows a new post
	open := func() redis.UniversalClient {
		c, err := testenv.OpenRedis()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	writer := b.instance(open(), Config{ReadCacheBarrier: true})
	reader := b.instance(open(), Config{ReadCacheBarrier: true})
	kNew := reader.tl.NewestKey(u)
	testenv.Eventually(t, 10*time.Second, "the reader's read cache is on for the author's node", func() bool {
		return reader.cache.currentFor(kNew) != nil
	})

	ms := time.Now().UnixMilli()
	misses, uncached := 0, 0
	for i := range 100 {
		if _, err := reader.Home(b.ctx, u, "", 20); err != nil {
			t.Fatal(err)
		}
		if !reader.cache.holds(kNew) {
			// Not cached (a generation ended under load, its cache
			// flushed): the read after the post could not be stale.
			// Read until it is.
			uncached++
			testenv.Eventually(t, 10*time.Second, "the reader's cache holds the author's marker", func() bool {
				_, err := reader.Home(b.ctx, u, "", 20)
				return err == nil && reader.cache.holds(kNew)
			})
		}
		mine := b.post(u, ms+int64(i))
		if err := writer.PostCreated(b.ctx, NewPost{ID: mine.id, AuthorID: u, Content: fmt.Sprint("post ", mine.id), CreatedAt: time.UnixMilli(mine.ms)}); err != nil {
			t.Fatalf("PostCreated: %v", err)
		}
		p, err := reader.Home(b.ctx, u, "", 20)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Items) == 0 || itemKey(t, p.Items[0]) != mine {
			misses++
		}
	}
	t.Logf("reads again until the reader's cache held the author's marker (its generation had ended): %d of 100", uncached)
	if misses > 0 {
		t.Errorf("the post was not in the author's next read through another instance %d times of 100", misses)
	}
}

// holds reports whether anything is cached for k.
func (c *readCache) holds(k string) bool {
	sh := c.shard(k)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.cur[k] != nil || sh.old[k] != nil
}
