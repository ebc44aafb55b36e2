package queries

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/feedco/feed/readmodel"
)

func TestPostCacheBoundedAndKeepsRecentlyUsed(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	c := newPostCache(10, time.Second)
	put := func(id int64) { c.store(&cachedPost{it: newItem(id, 1, "x", 1), author: 1, checkedAt: now.UnixNano()}) }
	hit := func(id int64) bool {
		out := make([]*cachedPost, 1)
		ask, _ := c.lookup([]int64{id}, now, false, out)
		return len(ask) == 0 && out[0] != nil
	}
	put(7)
	for id := int64(1); id <= 1000; id++ {
		put(id)
		if id%5 == 0 && !hit(7) { // post 7 is read all the time
			t.Fatalf("recently used post 7 evicted after %d inserts", id)
		}
		if n, _ := c.len(); n > 10 {
			t.Fatalf("cache holds %d entries, bound 10", n)
		}
	}
	if hit(3) {
		t.Error("an old, unused post survived 1000 inserts into a 10-entry cache")
	}
	t.Run("live entries expire, deletions are final", func(t *testing.T) {
		c := newPostCache(10, time.Second)
		c.store(&cachedPost{it: newItem(1, 1, "x", 1), checkedAt: now.UnixNano()})
		c.store(&cachedPost{it: newItem(2, 1, "", 1), deleted: true, checkedAt: now.UnixNano()})
		out := make([]*cachedPost, 2)
		ask, stale := c.lookup([]int64{1, 2}, now.Add(2*time.Second), false, out)
		if len(ask) != 1 || ask[0] != 0 || stale[0] == nil || out[1] == nil || !out[1].deleted {
			t.Fatalf("ask %v stale %v out %v", ask, stale, out)
		}
		// A late live answer does not undo a known deletion.
		c.store(&cachedPost{it: newItem(2, 1, "x", 1), checkedAt: now.Add(3 * time.Second).UnixNano()})
		if _, _ = c.lookup([]int64{2}, now, false, out[:1]); out[0] == nil || !out[0].deleted {
			t.Fatal("deletion undone")
		}
	})
}

// clock is a settable time source for Feed.now.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }
func newClock(t time.Time) *clock    { c := &clock{}; c.ns.Store(t.UnixNano()); return c }
func (b *bundle) useClock(c *clock)  { b.feed.setClock(c.now) }
func (b *bundle) hydrated(from string) float64 {
	return counter(b.feed.metrics.Hydrations.WithLabelValues(from))
}

// The deletion guarantee of the process cache without the deletion feed
// (PostgreSQL unreachable, or the feed stale): a post deleted after this
// process cached it is hidden from the first read that starts PostCacheTTL
// after the process last confirmed it live; a known deletion is final
// (never asked again). Warm pages hydrate from process memory.
func TestHomeDeletionHiddenWithinPostCacheTTL(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{PostCacheTTL: time.Second, noDeletionFeed: true})
	clk := newClock(time.Now())
	b.useClock(clk)
	u, _, all := b.projectedFollow(6)
	first := func() []key {
		t.Helper()
		p, err := b.feed.Home(b.ctx, u, "", 3)
		if err != nil {
			t.Fatal(err)
		}
		var ks []key
		for _, it := range p.Items {
			ks = append(ks, itemKey(t, it))
		}
		return ks
	}
	first()
	redisBefore := b.hydrated("redis")
	if got := first(); len(got) != 3 || got[0] != all[5] {
		t.Fatalf("warm page %v", got)
	}
	if b.hydrated("redis") != redisBefore {
		t.Error("a warm page within the TTL read post bodies from Redis")
	}
	b.deletePost(all[5]) // tombstone in Redis, as the posts projector writes it
	clk.add(time.Second)
	if got := first(); len(got) != 3 || got[0] != all[4] {
		t.Fatalf("page %v: the deleted post is still shown one TTL after its tombstone", got)
	}
	clk.add(time.Hour)
	before := b.hydrated("redis")
	got := first() // the batch's live posts are re-confirmed; the deleted one is not asked
	if len(got) != 3 || got[0] != all[4] {
		t.Fatalf("page %v", got)
	}
	if n := b.hydrated("redis") - before; n != 5 {
		t.Errorf("%v posts confirmed in Redis, want the 5 live ones (the deletion is final)", n)
	}
}

// PostCreated marks the post as its author's newest and writes nothing
// else to Redis; an older post marked later (two posts of one author
// committed at once) does not lower the marker; an id 0 is refused.
func TestPostCreatedMarksNewest(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	u := b.user()
	old, fresh := b.post(u, base+5), b.post(u, base+20)
	b.created(u, fresh)
	b.created(u, old)
	if got, err := b.rdb.Get(b.ctx, b.keys.Newest(u)).Int64(); err != nil || got != fresh.id {
		t.Fatalf("marker %v %v, want the newer post %d", got, err, fresh.id)
	}
	if ttl := b.rdb.TTL(b.ctx, b.keys.Newest(u)).Val(); ttl <= 0 || ttl > readmodel.NewestTTL {
		t.Errorf("marker TTL %v, want in (0, %v]", ttl, readmodel.NewestTTL)
	}
	if n := b.rdb.Exists(b.ctx, b.keys.Post(old.id), b.keys.Post(fresh.id), b.keys.Timeline(u)).Val(); n != 0 {
		t.Errorf("PostCreated wrote %d keys of the post or the timeline", n)
	}
	if err := b.feed.PostCreated(b.ctx, NewPost{ID: 0, AuthorID: u}); err == nil {
		t.Error("post id 0 accepted")
	}
}

// A production-sized cache is split in shards and still holds at most its
// size.
func TestPostCacheShardedStaysBounded(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	c := newPostCache(100_000, time.Second)
	if len(c.shards) != 32 {
		t.Fatalf("%d shards for 100,000 posts, want 32 (at least 1,024 per generation each)", len(c.shards))
	}
	for id := int64(1); id <= 300_000; id++ {
		c.store(&cachedPost{it: newItem(id, 1, "x", 1), checkedAt: now.UnixNano()})
	}
	if n, _ := c.len(); n > 100_000 || n < 50_000 {
		t.Fatalf("%d entries after 300,000 stores into a 100,000-post cache", n)
	}
	out := make([]*cachedPost, 1)
	if ask, _ := c.lookup([]int64{300_000}, now, false, out); len(ask) != 0 || out[0] == nil {
		t.Fatal("the newest post is not cached")
	}
}
