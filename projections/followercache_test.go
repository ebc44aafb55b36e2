package projections_test

import (
	"context"
	"strings"
	"testing"

	"github.com/feedco/feed/internal/testenv"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
)

// The follower cache (followercache.go) gives the same pushes as a fresh
// follower query per post: follows and unfollows handled in order drop the
// author's list, a follower who comes back (user_activity only, no event)
// is asked about again, a follower past the inbox TTL still gets it, and a
// gap in the partition's offsets (a message handled by another consumer,
// as after a rebalance) drops the lists. A redelivered stretch changes
// nothing.
func TestFollowerCacheMatchesFreshQueries(t *testing.T) {
	t.Parallel()
	h := newCacheHarness(t, 3, projections.Config{CelebrityThreshold: 100})
	w, rd, keys, inbox, ps, apply, skip, has := h.w, h.rd, h.keys, h.inbox, h.ps, h.apply, h.skip, h.has
	ctx := context.Background()
	loads := func(want int64, when string) {
		t.Helper()
		if got := inbox.FollowerLoads(); got != want {
			t.Fatalf("%s: %d follower lists read from PostgreSQL, want %d", when, got, want)
		}
	}

	author, x, y, z, late := w.user(true), w.user(true), w.user(true), w.user(false), w.user(true)
	w.follow(x, author)
	w.follow(z, author) // inactive: no pushes
	w.follow(late, author)
	// Seen 30 days minus 30 minutes ago: active, but past the inbox TTL
	// (30 days minus 1 hour): every push also gives the inbox its TTL.
	w.exec(`UPDATE user_activity SET last_seen_at = now() - interval '719 hours 30 minutes' WHERE user_id = $1`, late)
	apply()
	p1 := w.post(author)
	apply()
	loads(1, "first post")
	if !has(x, p1) || has(z, p1) || !has(late, p1) {
		t.Fatalf("first post: x %v (want true), inactive z %v (want false), late %v (want true)", has(x, p1), has(z, p1), has(late, p1))
	}
	if ttl := inboxTTL(t, rd.Client, keys, h.layout, late); ttl <= 0 {
		t.Errorf("the inbox of a follower past the TTL has TTL %v after a push, want one", ttl)
	}
	if inbox.FollowerRows() != 3 {
		t.Fatalf("cache holds %d rows, want the author's 3 followers", inbox.FollowerRows())
	}
	p2 := w.post(author)
	apply()
	loads(1, "second post (cached)")
	if !has(x, p2) || has(z, p2) {
		t.Fatalf("second post from the cache: x %v, inactive z %v", has(x, p2), has(z, p2))
	}

	// A follow handled in order: the list is read again and y gets the next post.
	w.follow(y, author)
	p3 := w.post(author)
	apply()
	loads(2, "after a follow")
	if !has(y, p3) || !has(y, p1) {
		t.Fatalf("the new follower's inbox: post %v, backfill %v", has(y, p3), has(y, p1))
	}

	// z comes back: only user_activity changes, no event. The cached list
	// is reused, and z is asked about again.
	w.exec(`UPDATE user_activity SET last_seen_at = now() WHERE user_id = $1`, z)
	p4 := w.post(author)
	apply()
	loads(2, "after z came back")
	if !has(z, p4) {
		t.Fatalf("the follower who came back did not get the post pushed from the cached list")
	}

	// An unfollow handled in order: x gets no more, and keeps none.
	w.unfollow(x, author)
	p5 := w.post(author)
	apply()
	loads(3, "after an unfollow")
	if has(x, p5) || has(x, p1) {
		t.Fatalf("the unfollower's inbox holds the author's posts")
	}

	// A follow whose message this consumer never saw (handled elsewhere
	// before a rebalance): the gap in offsets drops the list, so v gets p6.
	// Without that rule the cached list would leave v out for good.
	v := w.user(true)
	apply()
	w.follow(v, author)
	skip()
	p6 := w.post(author)
	apply()
	loads(4, "after a gap in offsets")
	if !has(v, p6) {
		t.Fatalf("the follower whose follow was handled by another consumer did not get the next post")
	}

	// Redelivery of an older stretch (offsets go back): the lists are
	// dropped and read again. A replay pushes with today's followers (so v
	// gets the old posts too), which is what a fresh query per post does:
	// the same stretch applied to a copy of the state by a projector
	// without the cache ends identical.
	ref := testenv.NewRedis(t)
	keys0, err := testenv.Keys(ctx, rd.Client, rd.Prefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys0 {
		b, err := rd.Client.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := rd.Client.Restore(ctx, strings.ReplaceAll(k, rd.Prefix, ref.Prefix), 0, b).Err(); err != nil {
			t.Fatal(err)
		}
	}
	uncached := newProjectors(t, w, ref.Client, projections.Config{Keys: readmodel.Keys{Prefix: ref.Prefix}, CelebrityThreshold: 100, FollowerCacheRows: -1})
	loaded := inbox.FollowerLoads()
	for o := int64(0); o < h.offset; o++ {
		env, ok := h.all[o]
		if !ok {
			continue // the skipped one
		}
		if err := projections.Apply(projections.WithDelivery(ctx, "feed", 3, o), ps, env); err != nil {
			t.Fatal(err)
		}
		if err := projections.Apply(projections.WithDelivery(ctx, "feed", 3, o), uncached, env); err != nil {
			t.Fatal(err)
		}
	}
	if d := diff(dump(t, ref.Client, ref.Prefix), dump(t, rd.Client, rd.Prefix)); d != "" {
		t.Fatalf("a redelivered stretch: with the cache Redis differs from fresh queries:\n%s", d)
	}
	if inbox.FollowerLoads() == loaded {
		t.Fatalf("the redelivery reused a list across an offset going back")
	}
	if !has(v, p1) {
		t.Fatalf("the replayed first post did not reach today's follower v")
	}
}
