package projections_test

import (
	"slices"
	"testing"

	"github.com/feedco/feed/internal/testenv"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
)

// An unfollow removes every post of that author from the follower's inbox,
// also posts older than the author's newest ones: here the author posted
// more as a celebrity (never pushed) than the inbox holds entries, so
// "the author's newest ZCARD posts" would miss the two that were pushed.
// Found by the convergence oracle (e2e), where a user who then follows
// nobody had the leftovers shown: without following:{u} the reader trusts
// the inbox.
func TestUnfollowRemovesOlderPushedPosts(t *testing.T) {
	t.Parallel()
	eachLayout(t, testUnfollowRemovesOlderPushedPosts)
}

func testUnfollowRemovesOlderPushedPosts(t *testing.T, layout string) {
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	ps := newProjectors(t, w, rd.Client, projections.Config{Keys: keys, CelebrityThreshold: 2, InboxLayout: layout})

	// Each step is applied before the next is written, as a projector that
	// keeps up sees them (a backfill reads the posts of that moment).
	done := 0
	apply := func() {
		t.Helper()
		applyAll(t, ps, w.envs[done:])
		done = len(w.envs)
	}
	reader, author, other, friend := w.user(true), w.user(true), w.user(true), w.user(true)
	w.follow(reader, friend)
	w.follow(reader, author) // 1 follower: pushed
	apply()
	p1, p2 := w.post(author), w.post(author)
	kept := w.post(friend)
	apply()
	w.follow(other, author) // 2 followers: a celebrity from now on
	apply()
	for range 6 {
		w.post(author) // pulled, never pushed
	}
	apply()
	ids, _, _ := inboxView(t, rd.Client, keys, layout, reader)
	if !slices.Contains(ids, idstr(p1)) || !slices.Contains(ids, idstr(p2)) {
		t.Fatalf("before the unfollow the inbox holds %v, want the pushed posts %d and %d", ids, p1, p2)
	}

	w.unfollow(reader, author) // back to 1 follower: crosses down too
	apply()
	ids, _, _ = inboxView(t, rd.Client, keys, layout, reader)
	if slices.Contains(ids, idstr(p1)) || slices.Contains(ids, idstr(p2)) {
		t.Errorf("after the unfollow the inbox still holds the author's posts: %v (pushed %d, %d)", ids, p1, p2)
	}
	if !slices.Contains(ids, idstr(kept)) {
		t.Errorf("the unfollow removed another author's post %d: %v", kept, ids)
	}
}
