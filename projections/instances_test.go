package projections_test

import (
	"context"
	"slices"
	"testing"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// TestFollowersLateEventOfAMovedPartition plays what two projector
// instances of one consumer group can do when a partition moves between
// them: the instance that lost it finishes an event it had in flight
// after the new owner applied that event and the next ones (a rebalance
// that outlasted the handler, or a consumer evicted while still running).
// Each instance is a projector of its own on a Redis client of its own.
// The late event must change nothing: the follower count counts every
// event once, and the celebrity set keeps the newest decision (the
// followee crossed the threshold and came back below it). A crash that
// redelivers everything from the start changes nothing either.
func TestFollowersLateEventOfAMovedPartition(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	x, a, b, c := w.user(true), w.user(true), w.user(true), w.user(true)
	w.follow(a, x)   // 1 follower
	w.follow(b, x)   // 2: a celebrity at threshold 2
	w.unfollow(a, x) // 1: no longer
	w.follow(c, x)   // 2: a celebrity again
	w.unfollow(b, x) // 1: no longer
	envs := w.envs[4:]

	rd := testenv.NewRedis(t)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	cfg := projections.Config{Keys: keys, CelebrityThreshold: 2}
	instance := func() projections.Projector {
		other := testenv.NewRedis(t) // a client of its own, on the same server
		ps, err := projections.New(cfg, w.db.Pool, other.Client, nil, projections.NameFollowers)
		if err != nil {
			t.Fatal(err)
		}
		return ps[0]
	}
	first, second := instance(), instance()
	apply := func(p projections.Projector, envs ...events.Envelope) {
		t.Helper()
		for _, e := range envs {
			if err := projections.Apply(context.Background(), []projections.Projector{p}, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(when string, count int64, celebrity bool, following map[int64][]string) {
		t.Helper()
		ctx := context.Background()
		n, _, err := readmodel.NewFollows(keys).CountOf(ctx, rd.Client, x)
		if err != nil {
			t.Fatal(err)
		}
		if n != count {
			t.Errorf("%s: follower count %d, want %d", when, n, count)
		}
		in, err := rd.Client.SIsMember(ctx, keys.Celebrities(), idstr(x)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if in != celebrity {
			t.Errorf("%s: followee in the celebrity set %v, want %v", when, in, celebrity)
		}
		for u, want := range following {
			got, err := rd.Client.SMembers(ctx, keys.Following(u)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) && len(got)+len(want) > 0 {
				t.Errorf("%s: following:{%d} = %v, want %v", when, u, got, want)
			}
		}
	}

	// The first instance applies the first two events; the partition moves
	// while the second is in flight: the second instance starts at it.
	apply(first, envs[0])
	apply(second, envs[1], envs[2], envs[3])
	apply(first, envs[1]) // late: a celebrity, by an older event
	// Kafka's order was: in, out, in: the newest decision is "in"; b and
	// c follow x.
	check("after the late follow", 2, true, map[int64][]string{a: nil, b: {idstr(x)}, c: {idstr(x)}})
	apply(second, envs[4])
	apply(first, envs[3]) // late again: "in", older than the last "out"
	final := map[int64][]string{a: nil, b: nil, c: {idstr(x)}}
	check("after the late unfollow", 1, false, final)
	// A crash of both: everything redelivered from the oldest offset, in
	// order, by either instance.
	apply(first, envs...)
	check("after a redelivery of everything", 1, false, final)
}

// TestInboxLateUnfollowOfAMovedPartition: the instance that lost a
// partition applies an unfollow late, after the new owner applied it and
// the follow that undid it (with its backfill). The author's posts stay
// in the follower's inbox: nothing the follower should see is lost.
func TestInboxLateUnfollowOfAMovedPartition(t *testing.T) {
	t.Parallel()
	func() {
		w := newWorld(t)
		u, x := w.user(true), w.user(true)
		w.follow(u, x)
		p1 := w.post(x)
		w.unfollow(u, x)
		w.follow(u, x)
		p2 := w.post(x)
		envs := w.envs[2:] // follow, post, unfollow, follow, post

		rd := testenv.NewRedis(t)
		keys := readmodel.Keys{Prefix: rd.Prefix}
		cfg := projections.Config{Keys: keys, CelebrityThreshold: 100, BackfillPosts: 20}
		instance := func() []projections.Projector {
			other := testenv.NewRedis(t)
			ps, err := projections.New(cfg, w.db.Pool, other.Client, nil, projections.NameInbox, projections.NameTimelines)
			if err != nil {
				t.Fatal(err)
			}
			return ps
		}
		first, second := instance(), instance()
		apply := func(ps []projections.Projector, envs ...events.Envelope) {
			t.Helper()
			for _, e := range envs {
				if err := projections.Apply(context.Background(), ps, e); err != nil {
					t.Fatal(err)
				}
			}
		}
		apply(first, envs[0], envs[1])
		apply(second, envs[2], envs[3], envs[4])
		apply(first, envs[2]) // late: the unfollow, after the follow again
		want := []string{idstr(p2), idstr(p1)}
		if ids, _, _ := inboxView(t, rd.Client, keys, u); !slices.Equal(ids, want) {
			t.Errorf("inbox of the follower after the late unfollow: %v, want %v", ids, want)
		}
		// In order, once more (a crash redelivers everything): the same.
		apply(second, envs...)
		if ids, _, _ := inboxView(t, rd.Client, keys, u); !slices.Equal(ids, want) {
			t.Errorf("inbox of the follower after a redelivery: %v, want %v", ids, want)
		}
	}()
}
