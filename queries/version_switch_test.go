package queries

import (
	"strconv"
	"testing"
	"time"

	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// TestPullSideFollowsVersionSwitch: the celebrity set and the celebrities'
// timeline heads are cached per process for CelebrityCacheTTL (5 s here).
// After `feed rebuild` switches followers and timelines to version 2 (a
// new celebrity, and posts only version 2's timelines hold), the reads
// that follow the switch pull from version 2 at once, not when the cached
// version 1 entries expire: the page equals the truth within the
// versions' refresh (about a second), from Redis (not cold).
func TestPullSideFollowsVersionSwitch(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{CelebrityCacheTTL: 5 * time.Second})
	u, c, d := b.user(), b.user(), b.user()
	b.follow(u, c)
	b.follow(u, d)
	p1 := b.post(c, base)
	b.cachePost(p1)
	b.setInbox(u, nil, true, -1)
	b.setZ(b.keys.Timeline(u), nil, true, -1)
	b.setZ(b.keys.Timeline(c), []key{p1}, true, -1)
	if err := b.rdb.SAdd(b.ctx, b.keys.Celebrities(), strconv.FormatInt(c, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	sameFeed(t, "version 1", b.readHome(u, 10), []key{p1})

	// Version 2, as a rebuild leaves it: d is a celebrity now, and c and
	// d posted (into version 2's timelines only).
	v2 := readmodel.Keys{Prefix: b.keys.Prefix, Versions: readmodel.DefaultVersions().
		With(readmodel.ProjectionFollowers, 2).With(readmodel.ProjectionTimelines, 2)}
	p2, p3 := b.post(c, base+1), b.post(d, base+2)
	b.cachePost(p2)
	b.cachePost(p3)
	b.setZ(v2.Timeline(u), nil, true, -1)
	b.setZ(v2.Timeline(c), []key{p2, p1}, true, -1)
	b.setZ(v2.Timeline(d), []key{p3}, true, -1)
	pipe := b.rdb.TxPipeline()
	pipe.SAdd(b.ctx, v2.Celebrities(), strconv.FormatInt(c, 10), strconv.FormatInt(d, 10), readmodel.SentinelBuilt)
	pipe.SAdd(b.ctx, v2.Following(u), strconv.FormatInt(c, 10), strconv.FormatInt(d, 10))
	pipe.HSet(b.ctx, v2.FollowingVersions(u), readmodel.SentinelBuilt, 1, strconv.FormatInt(c, 10), 1, strconv.FormatInt(d, 10), 1)
	if _, err := pipe.Exec(b.ctx); err != nil {
		t.Fatal(err)
	}
	switched := time.Now()
	for _, p := range []string{readmodel.ProjectionFollowers, readmodel.ProjectionTimelines} {
		if err := readmodel.ActivateVersion(b.ctx, b.db.Pool, p, 1, 2, readmodel.Policy{}); err != nil {
			t.Fatal(err)
		}
		if err := readmodel.NewRegistry(b.keys.Prefix).Activate(b.ctx, b.rdb, p, 2); err != nil {
			t.Fatal(err)
		}
	}
	want := b.truth(u)
	if len(want) != 3 {
		t.Fatalf("truth %v, want 3 posts", want)
	}
	testenv.Eventually(t, 3*time.Second, "the pull side reads version 2", func() bool {
		p, err := b.feed.Home(b.ctx, u, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		if p.Cold {
			t.Fatal("the page after the switch was cold")
		}
		got := make([]key, len(p.Items))
		for i, it := range p.Items {
			got[i] = itemKey(t, it)
		}
		if len(got) == len(want) {
			sameFeed(t, "version 2", got, want)
			return true
		}
		return false
	})
	t.Logf("version 2 pulled %v after the switch", time.Since(switched).Round(time.Millisecond))
}

// TestCelebrityRebuildUsesVersionThreshold: a celebrity set found without
// ~built is rebuilt from PostgreSQL by the threshold recorded with the
// active followers version, not the one the process was configured with.
func TestCelebrityRebuildUsesVersionThreshold(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{}) // the default threshold, 10,000
	u, c := b.user(), b.user()
	b.follow(u, c)
	b.exec(`UPDATE users SET follower_count = 3 WHERE id = $1`, c)
	p1 := b.post(c, base)
	b.cachePost(p1)
	v2 := readmodel.Keys{Prefix: b.keys.Prefix, Versions: readmodel.DefaultVersions().
		With(readmodel.ProjectionFollowers, 2)}
	b.setInbox(u, nil, true, -1)
	b.setZ(b.keys.Timeline(u), nil, true, -1)
	b.setZ(b.keys.Timeline(c), []key{p1}, true, -1)
	pipe := b.rdb.TxPipeline()
	pipe.SAdd(b.ctx, v2.Following(u), strconv.FormatInt(c, 10))
	pipe.HSet(b.ctx, v2.FollowingVersions(u), readmodel.SentinelBuilt, 1, strconv.FormatInt(c, 10), 1)
	if _, err := pipe.Exec(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := readmodel.ActivateVersion(b.ctx, b.db.Pool, readmodel.ProjectionFollowers, 1, 2, readmodel.Policy{CelebrityThreshold: 3}); err != nil {
		t.Fatal(err)
	}
	if err := readmodel.NewRegistry(b.keys.Prefix).Activate(b.ctx, b.rdb, readmodel.ProjectionFollowers, 2); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the query side reads followers version 2", func() bool {
		b.readHome(u, 10)
		return b.feed.cfg.Keys.Version(readmodel.ProjectionFollowers) == 2 && b.rdb.Exists(b.ctx, v2.Celebrities()).Val() == 1
	})
	time.Sleep(b.feed.cfg.CelebrityCacheTTL) // the scenario: the cache's TTL passes, past any snapshot read before the switch
	sameFeed(t, "celebrity set rebuilt at threshold 3", b.readHome(u, 10), []key{p1})
	if ok, _ := b.rdb.SIsMember(b.ctx, v2.Celebrities(), strconv.FormatInt(c, 10)).Result(); !ok {
		t.Errorf("the rebuilt celebrity set of version 2 lacks %d", c)
	}
}
