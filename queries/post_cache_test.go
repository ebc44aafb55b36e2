package queries

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
func (b *bundle) useClock(c *clock)  { b.feed.now = c.now }
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
	b := setup(t, Config{PostCacheTTL: time.Second})
	clk := newClock(time.Now())
	b.useClock(clk)
	b.stopDeletionFeed()
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

// PostCreated writes what the projectors write, and never more: SET NX
// keeps a tombstone that got there first, and a post at or below the
// timeline's ~floor is not added.
func TestPostCreatedRespectsTombstoneAndFloor(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	u := b.user()
	gone := b.post(u, base+10)
	b.deletePost(gone) // the tombstone is in Redis before the hook runs
	b.created(u, gone)
	raw, _ := b.rdb.Get(b.ctx, b.keys.Post(gone.id)).Bytes()
	var p readmodel.Post
	if err := json.Unmarshal(raw, &p); err != nil || !p.Deleted {
		t.Fatalf("tombstone overwritten: %s", raw)
	}
	old := b.post(u, base+5)
	b.setZ(b.keys.Timeline(u), []key{gone}, true, base+5)
	b.created(u, old)
	if err := b.rdb.ZScore(b.ctx, b.keys.Timeline(u), strconv.FormatInt(old.id, 10)).Err(); err != redis.Nil {
		t.Fatalf("post at the floor added to the timeline (%v)", err)
	}
	fresh := b.post(u, base+20)
	b.created(u, fresh)
	members, _ := b.rdb.ZRevRange(b.ctx, b.keys.Timeline(u), 0, -1).Result()
	want := fmt.Sprint([]string{readmodel.SentinelBuilt, strconv.FormatInt(fresh.id, 10), strconv.FormatInt(gone.id, 10), readmodel.SentinelFloor})
	if fmt.Sprint(members) != want {
		t.Fatalf("timeline %v, want %v", members, want)
	}
	if err := b.feed.PostCreated(b.ctx, NewPost{ID: 0, AuthorID: u}); err == nil {
		t.Error("post id 0 accepted")
	}
	// The own page shows the fresh post and hides the deleted one.
	sameFeed(t, "own posts", b.readHome(u, 2), b.truth(u))
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
