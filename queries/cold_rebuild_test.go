package queries

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// After Redis loses everything (a FLUSHDB, a restart without persistence)
// while the projectors go on writing (a follow recreates a following set
// with one pair, a post a timeline with one post, a follow-count move the
// celebrity set with one member), no read model is read as an empty or
// partial truth: every page equals the truth from the first read after
// the loss (served from PostgreSQL), the read models are rebuilt by the
// reads themselves, at most RebuildConcurrency at a time, and then serve
// the pages from Redis again.
func TestHomeHealsAfterRedisLosesEverything(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{CelebrityThreshold: 3, RebuildConcurrency: 1})
	r1, r2, r3, a1, a2, c := b.user(), b.user(), b.user(), b.user(), b.user(), b.user()
	for _, f := range [][2]int64{{r1, a1}, {r1, a2}, {r1, c}, {r2, a1}, {r2, c}, {r3, a2}, {a1, c}} {
		b.follow(f[0], f[1])
	}
	b.exec(`UPDATE users SET follower_count = 3 WHERE id = $1`, c)
	ms := base
	for range 5 {
		for _, a := range []int64{a1, a2, c, r1} {
			ms++
			b.post(a, ms)
		}
	}
	readers, authors := []int64{r1, r2, r3}, []int64{a1, a2, c, r1}
	b.projectAll([]int64{c}, readers, 500, 500)
	check := func(when string) {
		t.Helper()
		for _, u := range readers {
			sameFeed(t, when+": home", b.readHome(u, 4), b.truth(u))
		}
		for _, a := range authors {
			got := b.readAll(func(cur string) (Page, error) { return b.feed.AuthorPosts(b.ctx, a, a, cur, 3) }, 3)
			sameFeed(t, when+": author posts", got, b.authorTruth(a))
		}
	}
	check("before the loss")

	testenv.DeletePrefix(b.ctx, b.rdb, b.keys.Prefix)
	// The projectors go on over the empty Redis.
	b.follow(r3, a1)
	ms++
	p := b.post(a2, ms)
	b.cachePost(p)
	if err := b.feed.tl.Add(b.ctx, b.rdb, a2, p.id, p.ms); err != nil {
		t.Fatal(err)
	}
	cs := readmodel.NewCelebrities(b.keys)
	if err := readmodel.Exec(b.ctx, b.rdb, func(pipe redis.Pipeliner) { cs.QueueSet(b.ctx, pipe, c, true) }); err != nil {
		t.Fatal(err)
	}
	b.feed.celebs.snap.Store(nil) // the in-process celebrity cache's TTL is over

	check("right after the loss")
	testenv.Eventually(t, 10*time.Second, "read models rebuilt by the reads", func() bool {
		check("while healing")
		built := true
		for _, u := range readers {
			pipe := b.rdb.Pipeline()
			fb := b.feed.follows.QueueFollowingBuilt(b.ctx, pipe, u)
			if err := readmodel.ExecReads(b.ctx, pipe); err != nil {
				t.Fatal(err)
			}
			_, _, inBuilt := b.inboxState(u)
			built = built && fb.Val() && inBuilt
		}
		for _, a := range authors {
			pipe := b.rdb.Pipeline()
			tr := b.feed.tl.QueueRange(b.ctx, pipe, a, readmodel.MaxScoreMs, 1)
			if err := readmodel.ExecReads(b.ctx, pipe); err != nil {
				t.Fatal(err)
			}
			tp, err := tr.Result()
			if err != nil {
				t.Fatal(err)
			}
			built = built && tp.Built
		}
		_, cb, err := cs.Members(b.ctx, b.rdb)
		if err != nil {
			t.Fatal(err)
		}
		return built && cb
	})
	waitIdle(b.feed)
	following := []int64{}
	for _, m := range b.rdb.SMembers(b.ctx, b.keys.Following(r3)).Val() {
		var id int64
		for _, ch := range m {
			id = id*10 + int64(ch-'0')
		}
		following = append(following, id)
	}
	if len(following) != 2 {
		t.Errorf("r3's rebuilt following set is %v, want a1 and a2", following)
	}
	redisPages := counter(b.feed.metrics.Sources.WithLabelValues("home", "redis"))
	check("after the rebuilds")
	if counter(b.feed.metrics.Sources.WithLabelValues("home", "redis")) == redisPages {
		t.Error("home pages after the rebuilds were not served from Redis")
	}
	for _, model := range []string{"inbox", "following", "timeline", "celebrities"} {
		if counter(b.feed.metrics.Rebuilds.WithLabelValues(model, "ok")) == 0 {
			t.Errorf("no %s rebuild counted", model)
		}
	}
}
