package projections_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

const horizonH = 4 * 24 * time.Hour // the default PostHorizon, which the projectors here take

func pexpireTime(t *testing.T, rdb redis.UniversalClient, key string) int64 {
	t.Helper()
	v, err := rdb.Do(context.Background(), "PEXPIRETIME", key).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// horizonWorld writes posts six days old (past the horizon: a post, its
// edit, a like, a repost, a reply, a deletion of another) and an hour
// old (a post, its like, a recent repost of the old post), and returns
// them.
type horizonPosts struct {
	a, b, c                           int64
	old, oldGone, oldRepost, oldReply int64
	recent, recentRepostOfOld         int64
}

func horizonWorld(w *world) horizonPosts {
	var h horizonPosts
	h.a, h.b, h.c = w.user(true), w.user(true), w.user(true)
	w.clock = time.Now().Add(-6 * 24 * time.Hour).Truncate(time.Millisecond)
	h.old, h.oldGone = w.post(h.a), w.post(h.b)
	w.edit(h.a, h.old, "edited")
	w.like(h.b, h.old, h.a, true)
	h.oldRepost = w.repost(h.c, h.old, h.a)
	h.oldReply = w.reply(h.c, h.old, h.a)
	w.del(h.b, h.oldGone)
	w.clock = time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	h.recent = w.post(h.a)
	w.like(h.b, h.recent, h.a, true)
	h.recentRepostOfOld = w.repost(h.b, h.old, h.a)
	return h
}

// The posts projector writes nothing about a post past the horizon, at
// its first delivery or any redelivery (its body, edit, tombstone, counts,
// likes, reposts, and the parent's reply count), and every key it writes
// expires at the post's ms + H (buckets at the day's end + H); a recent
// repost of the old post keeps reposts:{O} alive with the repost, marked
// incomplete. Then `feed rebuild posts` writes the same horizon, with
// reposts:{O} whole (complete), and nothing without an expiry but names.
func TestPostsProjectorAndBuildWriteOnlyTheHorizon(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	h := horizonWorld(w)
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	live := readmodel.Keys{Prefix: rd.Prefix + "live:"}
	built := readmodel.Keys{Prefix: rd.Prefix + "built:"}
	hz := readmodel.Horizon{H: horizonH}
	lp := postsProjector(t, w, rd.Client, live)
	applyAll(t, []projections.Projector{lp}, w.envs)
	applyAll(t, []projections.Projector{lp}, w.envs) // every event redelivered

	check := func(keys readmodel.Keys, what string) {
		t.Helper()
		absent := []string{keys.Post(h.old), keys.Post(h.oldGone), keys.Post(h.oldRepost), keys.Post(h.oldReply),
			keys.Counts(h.old), keys.Liked(h.b, readmodel.DayOf(h.old)), keys.Reposted(h.c, readmodel.DayOf(h.old)),
			keys.Reposted(h.b, readmodel.DayOf(h.old))}
		for _, k := range absent {
			if rd.Client.Exists(ctx, k).Val() != 0 {
				t.Errorf("%s: %s written past the horizon", what, k)
			}
		}
		want := map[string]int64{
			keys.Post(h.recent): hz.ExpiryOf(h.recent), keys.Counts(h.recent): hz.ExpiryOf(h.recent),
			keys.Post(h.recentRepostOfOld):             hz.ExpiryOf(h.recentRepostOfOld),
			keys.Liked(h.b, readmodel.DayOf(h.recent)): hz.DayExpiry(readmodel.DayOf(h.recent)),
			keys.Reposts(h.old):                        hz.ExpiryOf(h.recentRepostOfOld),
		}
		for k, at := range want {
			if got := pexpireTime(t, rd.Client, k); got != at {
				t.Errorf("%s: %s expires at %d, want %d", what, k, got, at)
			}
		}
		all, err := testenv.Keys(ctx, rd.Client, keys.Prefix+"*")
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range all {
			// Names never change; the live streams' changes log is trimmed
			// by age (readmodel.ChangesKept), not expired.
			if !strings.Contains(k, "name:{") && !strings.HasSuffix(k, "changes") && pexpireTime(t, rd.Client, k) < 0 {
				t.Errorf("%s: %s has no expiry", what, k)
			}
		}
	}
	check(live, "projector")
	reposts := func(keys readmodel.Keys) ([]readmodel.Repost, bool) {
		pipe := rd.Client.Pipeline()
		pg := readmodel.NewEngagement(keys).QueueRepostsPage(ctx, pipe, h.old, 0, readmodel.Repost{}, 10)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		rs, _, err := pg.Result()
		if err != nil {
			t.Fatal(err)
		}
		return rs, pg.Incomplete()
	}
	if rs, inc := reposts(live); !slices.Equal(rs, []readmodel.Repost{{ID: h.recentRepostOfOld, Reposter: h.b}}) || !inc {
		t.Fatalf("projector: reposts:{old} %v, incomplete %v: want the recent repost alone, marked incomplete", rs, inc)
	}

	bp := postsProjector(t, w, rd.Client, built)
	if _, err := bp.BuildPosts(ctx, w.db.Pool, nil); err != nil {
		t.Fatal(err)
	}
	check(built, "build")
	if rs, inc := reposts(built); !slices.Equal(rs, []readmodel.Repost{{ID: h.oldRepost, Reposter: h.c}, {ID: h.recentRepostOfOld, Reposter: h.b}}) || inc {
		t.Fatalf("build: reposts:{old} %v, incomplete %v: want both reposts, complete", rs, inc)
	}
	// Beside reposts:{old}, the build is what the projector wrote.
	lst, bst := postsState(t, rd.Client, live.Prefix), postsState(t, rd.Client, built.Prefix)
	k := strings.TrimPrefix(live.Reposts(h.old), live.Prefix)
	delete(lst, k)
	delete(bst, k)
	if d := diff(lst, bst); d != "" {
		t.Fatalf("the build differs from the projector inside the horizon:\n%s", d)
	}
}

// A post whose keys expire while the projector runs is never brought
// back: its create, edit, like and reply redelivered after the expiry
// write nothing.
func TestRedeliveryAfterExpiryWritesNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, b := w.user(true), w.user(true)
	// Created H - 3 s ago: the keys expire three seconds from now.
	w.clock = time.Now().Add(-horizonH + 3*time.Second).Truncate(time.Millisecond)
	p := w.post(a)
	w.edit(a, p, "edited")
	w.like(b, p, a, true)
	w.reply(b, p, a)
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	keys := readmodel.Keys{Prefix: rd.Prefix}
	pp := postsProjector(t, w, rd.Client, keys)
	applyAll(t, []projections.Projector{pp}, w.envs)
	perPost := []string{keys.Post(p), keys.Counts(p)}
	if n := rd.Client.Exists(ctx, perPost...).Val(); n != 2 {
		t.Fatalf("%d of the post's keys written inside the horizon, want 2", n)
	}
	testenv.Eventually(t, 30*time.Second, "the post's keys expired", func() bool {
		return rd.Client.Exists(ctx, perPost...).Val() == 0
	})
	// The like's day bucket outlives the post's keys (to its day's end +
	// H); empty it, so that a write of the like would show.
	bucket := keys.Liked(b, readmodel.DayOf(p))
	if err := rd.Client.SRem(ctx, bucket, idstr(p)).Err(); err != nil {
		t.Fatal(err)
	}
	applyAll(t, []projections.Projector{pp}, w.envs) // the redelivery
	if n := rd.Client.Exists(ctx, perPost...).Val(); n != 0 {
		t.Fatalf("%d of the post's keys brought back by a redelivery past the horizon", n)
	}
	if rd.Client.SIsMember(ctx, bucket, idstr(p)).Val() {
		t.Fatal("the like written again past the horizon")
	}
}
