package queries

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/feedco/feed/testkit/testenv"
)

// knowsDeleted reports whether the post cache learnt id's deletion from the
// feed.
func (b *bundle) knowsDeleted(id int64) bool { return b.feed.posts.knowsDeleted(id) }

// The feed's polls are called directly here (the Feed runs no poller),
// so every step is deterministic.
func TestDeletionFeedSeesEveryCommittedDeletion(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{noDeletionFeed: true})
	ctx := context.Background()
	a := b.user()
	old, p1, p2, p3 := b.post(a, base), b.post(a, base+1), b.post(a, base+2), b.post(a, base+3)
	b.deleteRow(old) // before the feed starts: read back from deletionMemory
	if err := b.feed.pollDeletions(ctx); err != nil {
		t.Fatal(err)
	}
	if !b.knowsDeleted(old.id) {
		t.Fatal("a deletion of the last deletionMemory missed at start")
	}
	if b.feed.deletions.through.Load() == 0 || b.feed.deletions.horizon == "" {
		t.Fatal("the first poll set no horizon")
	}

	// A transaction that started first but commits last: the poll between
	// must not skip it (it is above the poll's xmin, so read again).
	tx, err := b.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO events (event_id, stream_id, stream_version, type, payload)
VALUES (gen_random_uuid(), 'post-' || $1::bigint, 2, 'post.deleted.v1', jsonb_build_object('postId', $1::bigint::text, 'authorId', $2::bigint::text))`, p1.id, a); err != nil {
		t.Fatal(err)
	}
	b.deleteRow(p2) // commits while tx is open
	before := time.Now()
	if err := b.feed.pollDeletions(ctx); err != nil {
		t.Fatal(err)
	}
	if !b.knowsDeleted(p2.id) || b.knowsDeleted(p1.id) {
		t.Fatalf("after the first commit: p2 %v (want true), p1 %v (want false: not committed)", b.knowsDeleted(p2.id), b.knowsDeleted(p1.id))
	}
	if through := b.feed.deletions.through.Load(); through < before.UnixNano() {
		t.Fatalf("through %d did not move past the poll's start %d", through, before.UnixNano())
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.feed.pollDeletions(ctx); err != nil {
		t.Fatal(err)
	}
	if !b.knowsDeleted(p1.id) {
		t.Fatal("a deletion whose transaction began before the previous poll and committed after it was skipped")
	}

	// A backlog longer than one scan restarts from the recent window.
	b.feed.deletions.scanLimit = 2
	for i := range 3 {
		b.post(a, base+10+int64(i))
	}
	b.exec(`INSERT INTO events (event_id, stream_id, stream_version, type, payload)
SELECT gen_random_uuid(), 'noise-' || g, 1, 'user.registered.v1', '{}'::jsonb FROM generate_series(1, 5) g`)
	b.deleteRow(p3)
	if err := b.feed.pollDeletions(ctx); err != nil {
		t.Fatal(err)
	}
	if !b.knowsDeleted(p3.id) {
		t.Fatal("a deletion behind a cut scan was missed")
	}
}

// With the feed running, a deletion is hidden as soon as a poll has seen
// it, before the posts projector writes the tombstone (Redis still says
// the post is live), and it stays hidden when the body is read again.
func TestHomeHidesDeletionSeenByFeedBeforeTombstone(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	u, _, all := b.projectedFollow(5)
	sameFeed(t, "before", b.readHome(u, 3), b.truth(u)) // warms the caches, starts the poller
	b.deleteRow(all[4])                                 // no tombstone in Redis
	committed := time.Now()
	testenv.Eventually(t, 10*time.Second, "the deletion feed polls past the commit", func() bool {
		return b.feed.deletions.through.Load() > committed.UnixNano()
	})
	if !b.knowsDeleted(all[4].id) {
		t.Fatal("the poll that started after the commit did not learn the deletion")
	}
	got := b.readHome(u, 3)
	sameFeed(t, "deleted hidden before its tombstone", got, b.truth(u))
	if slices.Contains(got, all[4]) {
		t.Fatal("deleted post shown")
	}
	// Evicted and read again from Redis, which still says live: hidden.
	b.feed.posts.evict(all[4].id)
	sameFeed(t, "after eviction", b.readHome(u, 3), b.truth(u))
}

// While the feed is fresh, a cached live body is trusted up to
// feedTrustMaxAge without asking Redis; stale, PostCacheTTL applies. A
// deletion the feed learnt turns a late live answer into a deletion.
func TestPostCacheTrustsFreshFeed(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	c := newPostCache(10, time.Second)
	c.store(&cachedPost{it: newItem(1, 1, "x", 1), checkedAt: now.UnixNano()})
	out := make([]*cachedPost, 1)
	for _, tc := range []struct {
		after time.Duration
		fresh bool
		hit   bool
	}{
		{500 * time.Millisecond, false, true},
		{2 * time.Second, false, false},
		{2 * time.Second, true, true},
		{feedTrustMaxAge - time.Second, true, true},
		{feedTrustMaxAge + time.Second, true, false},
	} {
		out[0] = nil
		ask, _ := c.lookup([]int64{1}, now.Add(tc.after), tc.fresh, out)
		if hit := len(ask) == 0 && out[0] != nil; hit != tc.hit {
			t.Errorf("%v after confirmation, feed fresh %v: hit %v, want %v", tc.after, tc.fresh, hit, tc.hit)
		}
	}
	c.markDeleted([]int64{1, 2}, now)
	ask, _ := c.lookup([]int64{1}, now.Add(time.Hour), false, out)
	if len(ask) != 0 || !out[0].deleted {
		t.Fatal("a cached body the feed learnt deleted is not known deleted")
	}
	if got := c.store(&cachedPost{it: newItem(2, 1, "x", 1), checkedAt: now.UnixNano()}); !got.deleted {
		t.Fatal("a live answer for a post the feed knows deleted was stored live")
	}
	c.forgetDeletionsBefore(now.Add(time.Second))
	if got := c.store(&cachedPost{it: newItem(3, 1, "x", 1), checkedAt: now.UnixNano()}); got.deleted {
		t.Fatal("post 3 was never deleted")
	}
	if _, n := c.len(); n != 0 {
		t.Fatalf("%d deletions kept past forgetDeletionsBefore", n)
	}
}
