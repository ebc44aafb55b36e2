package projections_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/kafkatest"
	"github.com/feedco/feed/testkit/testenv"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// runProjectors runs every projector over Kafka until the test ends.
func runProjectors(t *testing.T, brokers []string, topic string, ps []projections.Projector) {
	t.Helper()
	r, err := projections.NewRunner(projections.RunnerConfig{Brokers: brokers, Topic: topic, GroupPrefix: topic + ".",
		Logger: quietLogger(), LagInterval: -1, RetryInitial: 10 * time.Millisecond}, ps...)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Go(t, "runner", r.Run)
}

// The rules of every read model, end to end through Kafka: backfill on
// follow, removal on unfollow, no push for a celebrity, crossing the
// threshold both ways, no push (and no inbox) for an inactive follower,
// deletion, counts and the post cache.
func TestProjectorsEndToEnd(t *testing.T) {
	t.Parallel()
	testProjectorsEndToEnd(t)
}

func testProjectorsEndToEnd(t *testing.T) {
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	b := kafkatest.Start(t)
	topic := b.Topic(t, 4)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	cfg := projections.Config{Keys: keys, CelebrityThreshold: 3}
	ps := newProjectors(t, w, rd.Client, cfg)
	runProjectors(t, b.Addrs(), topic, ps)
	var groups []string
	for _, p := range ps {
		groups = append(groups, topic+"."+p.Group())
	}

	ctx := context.Background()
	// A step publishes what the world wrote since the last one and waits
	// until every projector has handled all of it (committed offsets at the
	// end): the next step writes PostgreSQL rows that backfills read, so a
	// projector still behind would see them early.
	step := func(what string, cond func() bool) {
		t.Helper()
		b.PublishEvents(t, topic, w.envs...)
		w.envs = w.envs[:0]
		testenv.Eventually(t, 60*time.Second, what+": every projector caught up", func() bool {
			lags, err := projections.ConsumerLag(ctx, b.Conn(), topic, groups)
			if err != nil {
				return false
			}
			for _, l := range lags {
				if l != 0 {
					return false
				}
			}
			return true
		})
		testenv.Eventually(t, 60*time.Second, what, cond)
	}

	a, bob, cat, dan, idle, star := w.user(true), w.user(true), w.user(true), w.user(true), w.user(false), w.user(true)
	p1 := w.post(a)
	w.follow(bob, a) // after p1: backfill
	w.follow(cat, a)
	p2 := w.post(a)
	w.follow(idle, a) // inactive: no inbox at all
	p3 := w.post(a)
	w.unfollow(cat, a) // cat's inbox loses a's posts
	w.follow(bob, star)
	w.follow(cat, star)
	w.follow(dan, star) // star reaches 3 = threshold: celebrity
	step("celebrity set", func() bool {
		ids, _, _ := inboxView(t, rd.Client, keys, bob)
		return rd.Client.SIsMember(ctx, keys.Celebrities(), idstr(star)).Val() && slices.Equal(ids, []string{idstr(p3), idstr(p2), idstr(p1)})
	})
	s1 := w.post(star) // authorFollowers 3: not pushed
	w.del(a, p2)
	step("post cache and inboxes", func() bool {
		ids, _, _ := inboxView(t, rd.Client, keys, bob)
		return rd.Client.Exists(ctx, keys.Post(s1)).Val() == 1 &&
			len(rd.Client.ZRange(ctx, keys.Timeline(a), 0, -1).Val()) == 2 && // p1, p3
			slices.Equal(ids, []string{idstr(p3), idstr(p1)})
	})
	if ids, _, _ := inboxView(t, rd.Client, keys, cat); len(ids) != 0 {
		t.Errorf("cat unfollowed a: inbox %v, want empty", ids)
	}
	if inboxExists(t, rd.Client, keys, idle) {
		t.Errorf("inactive follower got an inbox")
	}
	for _, u := range []int64{bob, cat, dan} {
		if ids, _, _ := inboxView(t, rd.Client, keys, u); slices.Contains(ids, idstr(s1)) {
			t.Errorf("celebrity post pushed to %d", u)
		}
	}
	var post readmodel.Post
	if err := jsonGet(rd.Client, keys.Post(p2), &post); err != nil || !post.Deleted || post.Content != "" {
		t.Errorf("deleted post cache: %+v %v", post, err)
	}
	if err := jsonGet(rd.Client, keys.Post(p1), &post); err != nil || post.Deleted || post.Content != "hello" || post.AuthorID != a {
		t.Errorf("post cache: %+v %v", post, err)
	}
	if got := rd.Client.HGet(ctx, keys.Followers(a), "count").Val(); got != "2" {
		t.Errorf("followers of a: %s, want 2 (bob, idle)", got)
	}
	if got := rd.Client.SMembers(ctx, keys.Following(cat)).Val(); !slices.Equal(got, []string{idstr(star)}) {
		t.Errorf("cat follows %v, want [star]", got)
	}
	// Only a build marks a timeline complete: the projector's adds, which
	// would recreate a timeline lost with Redis from its next post, never do.
	if _, _, built := zview(t, rd.Client, keys.Timeline(a)); built {
		t.Errorf("timeline with ~built from the projector's adds alone")
	}

	// Downward crossing: dan leaves, star has 2 < 3 followers; star's posts
	// were never pushed, so bob and cat get them now.
	w.unfollow(dan, star)
	s2 := w.post(star) // authorFollowers 2: pushed
	step("backfill after the downward crossing", func() bool {
		ids, _, _ := inboxView(t, rd.Client, keys, cat)
		return slices.Equal(ids, []string{idstr(s2), idstr(s1)}) && !rd.Client.SIsMember(ctx, keys.Celebrities(), idstr(star)).Val()
	})
	if ids, _, _ := inboxView(t, rd.Client, keys, dan); len(ids) != 0 {
		t.Errorf("dan unfollowed star: inbox %v", ids)
	}
}

// scenario builds a random but reproducible history over several authors
// (so several partitions): posts, follows, unfollows, deletes, celebrity
// crossings. With removals false it only posts and follows.
func scenario(t *testing.T, w *world, seed uint64, removals bool) {
	rng := rand.New(rand.NewPCG(seed, 1))
	var users []int64
	for i := 0; i < 14; i++ {
		users = append(users, w.user(i%5 != 4))
	}
	following := map[[2]int64]bool{}
	var posts [][2]int64
	for step := 0; step < 220; step++ {
		a := users[rng.IntN(5)] // five authors
		u := users[rng.IntN(len(users))]
		switch r := rng.IntN(10); {
		case r < 4:
			posts = append(posts, [2]int64{a, w.post(a)})
		case r < 8 || !removals:
			if u != a && !following[[2]int64{u, a}] {
				w.follow(u, a)
				following[[2]int64{u, a}] = true
			}
		case r < 9:
			if u != a && following[[2]int64{u, a}] {
				w.unfollow(u, a)
				following[[2]int64{u, a}] = false
			}
		default:
			if len(posts) > 0 {
				i := rng.IntN(len(posts))
				w.del(posts[i][0], posts[i][1])
				posts = slices.Delete(posts, i, i+1)
			}
		}
	}
}

// interleave returns the envelopes with each audience key's (partition's)
// order kept and the partitions merged at random.
func interleave(envs []events.Envelope, seed uint64) []events.Envelope {
	rng := rand.New(rand.NewPCG(seed, 2))
	byKey := map[int64][]events.Envelope{}
	var order []int64
	for _, e := range envs {
		if _, ok := byKey[e.AudienceKey]; !ok {
			order = append(order, e.AudienceKey)
		}
		byKey[e.AudienceKey] = append(byKey[e.AudienceKey], e)
	}
	var out []events.Envelope
	for len(out) < len(envs) {
		k := order[rng.IntN(len(order))]
		if q := byKey[k]; len(q) > 0 {
			out = append(out, q[0])
			byKey[k] = q[1:]
		}
	}
	return out
}

// twice delivers every message twice, and replays a stretch of the stream
// after a simulated crash (what an uncommitted second of offsets does).
func twice(envs []events.Envelope) []events.Envelope {
	var out []events.Envelope
	for i, e := range envs {
		out = append(out, e, e)
		if i == len(envs)/2 {
			out = append(out, envs[len(envs)/3:i+1]...)
		}
	}
	return out
}

// Applying every message twice, replaying a stretch, or interleaving the
// partitions differently gives the same Redis contents: byte-identical with
// exact trims (the script on every push, no slack); with the default
// sampled trims, identical except for inboxes, which read the same (a late
// plain ZADD may sit at or below the floor until the next sampled script,
// see docs/projections.md).
func TestIdempotentAndOrderIndependent(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		removals bool
		max      int
		slack    int
		every    int
	}{
		// Inboxes within their bound: every operation, removals included;
		// the default sampling, compared as readers see inboxes.
		{"all-events", true, 500, 50, 0},
		// Inboxes trimmed on every push over the bound, with floors raised
		// by trims and backfills: byte-identical.
		{"exact-trims", false, 6, 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			func() {
				w := newWorld(t)
				scenario(t, w, 7, c.removals)
				var ref map[string]string
				variants := map[string][]events.Envelope{
					"in-order":     w.envs,
					"twice":        twice(w.envs),
					"interleave-1": interleave(w.envs, 1),
					"interleave-2": twice(interleave(w.envs, 2)),
					"interleave-3": interleave(w.envs, 3),
				}
				for _, name := range []string{"in-order", "twice", "interleave-1", "interleave-2", "interleave-3"} {
					rd := testenv.NewRedis(t)
					cfg := projections.Config{Keys: readmodel.Keys{Prefix: rd.Prefix}, CelebrityThreshold: 4,
						InboxMax: c.max, InboxTrimSlack: c.slack, InboxTrimEvery: c.every, TimelineMax: c.max, BackfillPosts: min(3, c.max)}
					applyAll(t, newProjectors(t, w, rd.Client, cfg), variants[name])
					var got map[string]string
					// A packed inbox's buffer depends on when merges ran and
					// holds a redelivery's duplicates: compared as read.
					got = canonical(t, rd.Client, rd.Prefix, c.max-c.slack) // what every trim keeps
					if ref == nil {
						ref = got
						if len(ref) < 20 {
							t.Fatalf("scenario too small: %d keys", len(ref))
						}
						continue
					}
					if d := diff(ref, got); d != "" {
						t.Errorf("%s differs from in-order:\n%s", name, d)
					}
				}
			}()
		})
	}
}

// With trim slack, an inbox's raw contents depend on when trims ran (see
// docs/projections.md), but what a reader sees does not: the newest
// InboxMax - slack entries above the floor (what every trim keeps), and
// the floor that implies; whether trims start over InboxMax (band 0: the
// slack) or below it (band 2: over 4).
func TestChunkedTrimsReadTheSame(t *testing.T) {
	t.Parallel()
	for _, band := range []int{0, 2} {
		t.Run(fmt.Sprintf("band-%d", band), func(t *testing.T) {
			t.Parallel()
			testChunkedTrimsReadTheSame(t, band)
		})
	}
}

func testChunkedTrimsReadTheSame(t *testing.T, band int) {
	w := newWorld(t)
	scenario(t, w, 11, false)
	const max = 6
	var ref map[string]string
	for i, envs := range [][]events.Envelope{w.envs, interleave(w.envs, 5), twice(interleave(w.envs, 6))} {
		rd := testenv.NewRedis(t)
		cfg := projections.Config{Keys: readmodel.Keys{Prefix: rd.Prefix}, CelebrityThreshold: 4,
			InboxMax: max, InboxTrimSlack: 4, InboxTrimEvery: 3, InboxTrimBand: band, TimelineMax: max, BackfillPosts: 3}
		applyAll(t, newProjectors(t, w, rd.Client, cfg), envs)
		got := canonical(t, rd.Client, rd.Prefix, max-4) // a trim keeps InboxMax - slack
		if i == 0 {
			ref = got
			continue
		}
		if d := diff(ref, got); d != "" {
			t.Errorf("order %d reads differently:\n%s", i, d)
		}
	}
}

// canonical renders each inbox as a reader sees it: the newest max entries
// strictly above the floor, then the floor raised to the first entry not
// kept. Entries at or below the floor (late plain ZADDs) are left out. A
// packed inbox's two keys become one entry under the sealed key's name
// (its buffer's contents depend on when merges ran, and hold duplicates
// after redeliveries).
func canonical(t *testing.T, rdb redis.UniversalClient, prefix string, max int) map[string]string {
	out := dump(t, rdb, prefix)
	render := func(k string, all []string, scores []float64, floor float64, built bool) {
		var ids []string
		var kept []float64
		for i, id := range all {
			if math.IsNaN(floor) || scores[i] > floor {
				ids, kept = append(ids, id), append(kept, scores[i])
			}
		}
		if len(ids) > max {
			if math.IsNaN(floor) || kept[max] > floor {
				floor = kept[max]
			}
			n := max
			for n > 0 && kept[n-1] <= floor {
				n--
			}
			ids = ids[:n]
		}
		out[k] = fmtView(ids, floor, built)
	}
	for k := range out {
		switch {
		case strings.HasPrefix(k, "pfeed:"):
			sk := strings.TrimSuffix(k, "+")
			delete(out, k)
			ctx := context.Background()
			ids, floor, built := packedView(rdb.Get(ctx, prefix+sk).Val(), rdb.Get(ctx, prefix+sk+"+").Val())
			all := make([]string, len(ids))
			scores := make([]float64, len(ids))
			for i, id := range ids {
				all[i], scores[i] = idstr(id), float64(snowflake.Time(id).UnixMilli())
			}
			render(sk, all, scores, floor, built)
		}
	}
	return out
}
