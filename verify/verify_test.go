package verify_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/systest"
	"github.com/feedco/feed/testkit/testenv"
	"github.com/feedco/feed/verify"
)

// policies are low so a small world has a celebrity (pulled), trimmed
// inboxes and pushes.
var policies = projections.Config{
	CelebrityThreshold: 5,
	InboxMax:           20,
	InboxTrimSlack:     2,
	TimelineMax:        30,
	BackfillPosts:      5,
	FanoutBatch:        7,
}

type world struct {
	*systest.System
	t     *testing.T
	pol   readmodel.Policy
	users []int64
	celeb int64
}

// newWorld starts the pipeline and writes a small world: 16 users, the
// first followed by everyone (a celebrity), each following three others,
// posts before and after every user read their feed (so every inbox is
// built, active and pushed to), all consumed.
func newWorld(t *testing.T, cluster bool) *world {
	t.Helper()
	pcfg := policies
	w := &world{t: t, System: systest.Start(t, systest.Config{Name: "vf", Partitions: 4, Projections: pcfg,
		CacheTTL: 200 * time.Millisecond, RedisCluster: cluster})}
	w.pol = pcfg.Policy().WithDefaults()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(19, 1))
	for i := range 16 {
		u, err := w.Commands.RegisterUser.Handle(ctx, commands.RegisterUser{Name: "v" + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		w.users = append(w.users, u.ID)
	}
	w.celeb = w.users[0]
	for _, u := range w.users[1:] {
		w.follow(u, w.celeb)
		for range 3 {
			if v := w.users[1+rng.IntN(len(w.users)-1)]; v != u {
				w.follow(u, v)
			}
		}
	}
	posts := func(n int) {
		for range n {
			a := w.users[rng.IntN(len(w.users))]
			if _, err := w.Commands.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: a, Content: "post " + strconv.Itoa(rng.IntN(1e6))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	posts(60)
	w.quiesce()
	// Every reader reads until their read models are built (the first
	// read is cold and rebuilds them in the background).
	for _, u := range w.users {
		testenv.Eventually(t, 20*time.Second, fmt.Sprintf("the read models of %d are built", u), func() bool {
			p, err := w.Feed.Home(ctx, u, "", 10)
			return err == nil && !p.Cold
		})
	}
	posts(60)
	w.quiesce()
	return w
}

func (w *world) follow(u, v int64) {
	w.t.Helper()
	if _, err := w.Commands.Follow.Handle(context.Background(), commands.Follow{FollowerID: u, FolloweeID: v}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) quiesce() {
	w.t.Helper()
	w.WaitCDC(w.t, time.Minute)
	w.WaitConsumed(w.t, time.Minute)
}

// config is verify's configuration for this system.
func (w *world) config() verify.Config {
	return verify.Config{Prefix: w.Prefix, Policy: w.pol, Users: 100, Depth: 200, PageSize: 7,
		Slot: w.Slot, Kafka: w.Broker.Conn(), Topic: w.Topic, GroupPrefix: w.GroupPrefix, Seed: 1, Logger: w.Log}
}

func (w *world) run(cfg verify.Config) verify.Report {
	w.t.Helper()
	rep, err := verify.Run(context.Background(), cfg, w.DB.Pool, w.Redis)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Logf("verify: %s", rep.Summary())
	return rep
}

// head returns the author's newest non-deleted post and its ms.
func (w *world) head(author int64) (id, ms int64) {
	w.t.Helper()
	err := w.DB.Pool.QueryRow(context.Background(), `SELECT id, (extract(epoch FROM created_at) * 1000)::bigint FROM posts
		WHERE author_id = $1 AND NOT deleted ORDER BY created_at DESC, id DESC LIMIT 1`, author).Scan(&id, &ms)
	if err != nil {
		w.t.Fatalf("newest post of %d: %v", author, err)
	}
	return id, ms
}

// pushed finds a reader and a post of a non-celebrity they follow that
// their inbox holds, skipping the readers in skip.
func (w *world) pushed(skip ...int64) (reader, author, post int64) {
	w.t.Helper()
	ctx := context.Background()
	for _, u := range w.users[1:] {
		if slices.Contains(skip, u) {
			continue
		}
		rows, err := w.DB.Pool.Query(ctx, `SELECT followee_id FROM follows WHERE follower_id = $1 AND followee_id <> $2 ORDER BY 1`, u, w.celeb)
		if err != nil {
			w.t.Fatal(err)
		}
		var fs []int64
		for rows.Next() {
			var f int64
			_ = rows.Scan(&f)
			fs = append(fs, f)
		}
		rows.Close()
		for _, f := range fs {
			var n int
			_ = w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM posts WHERE author_id = $1 AND NOT deleted`, f).Scan(&n)
			if n == 0 {
				continue
			}
			p, _ := w.head(f)
			h, err := homefeed.Inspect(ctx, w.Redis, homefeed.NewInboxes(w.Keys, w.pol), u, p)
			if err != nil {
				w.t.Fatal(err)
			}
			if h.Holds && h.Built {
				return u, f, p
			}
		}
	}
	w.t.Fatal("no inbox holds a pushed post")
	return 0, 0, 0
}

// find returns the differences of kind for user.
func find(rep verify.Report, user int64, kind string) []verify.Difference {
	var out []verify.Difference
	for _, d := range rep.Differences {
		if d.User == user && d.Kind == kind {
			out = append(out, d)
		}
	}
	return out
}

// TestVerifyFindsCorruptions: on a converged system verify finds nothing,
// every sampled user compared from built read models; then three
// corruptions of the read models, each of another user, and verify names
// each with where the read models hold the post: an inbox missing a post,
// a foreign post served from an inbox (a lost unfollow: the following set
// and the inbox kept the author), and a stale following set that lost the
// celebrity (its pulled posts go missing). Only those users differ, each
// difference survives the re-check after a second barrier, and a fourth
// user, untouched, verifies clean alone. Single-node Redis.
func TestVerifyFindsCorruptions(t *testing.T) {
	t.Parallel()
	testCorruptions(t, false)
}

// TestVerifyFindsCorruptionsCluster is TestVerifyFindsCorruptions with the
// read models on the 3-node Redis Cluster.
func TestVerifyFindsCorruptionsCluster(t *testing.T) {
	t.Parallel()
	testCorruptions(t, true)
}

func testCorruptions(t *testing.T, cluster bool) {
	w := newWorld(t, cluster)
	ctx := context.Background()

	clean := w.run(w.config())
	if !clean.OK() {
		t.Fatalf("a converged system: %d differences:\n%v", len(clean.Differences), clean.Differences)
	}
	if clean.Users < 5 || clean.Cold != 0 || clean.Posts == 0 {
		t.Fatalf("sampled %d users (%d cold), %d posts: want several users, all from built read models", clean.Users, clean.Cold, clean.Posts)
	}
	if !strings.Contains(clean.Lag, "CDC confirmed WAL") || !strings.Contains(clean.Lag, "committed the end offsets") {
		t.Errorf("the report does not say how it accounted for lag: %q", clean.Lag)
	}

	// 1. An inbox missing a post.
	a, aAuthor, aPost := w.pushed()
	store := homefeed.NewInboxes(w.Keys, w.pol)
	if err := store.Remove(ctx, w.Redis, a, []int64{aPost}); err != nil {
		t.Fatal(err)
	}

	// 2. A foreign post: b unfollowed the author of a post its inbox
	// holds, and the read models lost the unfollow (the following set
	// still holds the author, the inbox the post).
	b, bAuthor, bPost := w.pushed(a)
	_, bMs := w.head(bAuthor)
	if _, err := w.Commands.Unfollow.Handle(ctx, commands.Unfollow{FollowerID: b, FolloweeID: bAuthor}); err != nil {
		t.Fatal(err)
	}
	w.quiesce()
	bSet, _ := readmodel.NewFollows(w.Keys).FollowingKeys(b)
	if err := w.Redis.SAdd(ctx, bSet, strconv.FormatInt(bAuthor, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := store.WriteRebuilt(ctx, w.Redis, b, []readmodel.Entry{{ID: bPost, Ms: bMs}}); err != nil {
		t.Fatal(err)
	}

	// 3. A stale following set: c's lost the celebrity.
	var c int64
	for _, u := range w.users[1:] {
		if u != a && u != b {
			c = u
			break
		}
	}
	set, _ := readmodel.NewFollows(w.Keys).FollowingKeys(c)
	if err := w.Redis.SRem(ctx, set, strconv.FormatInt(w.celeb, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	celebPost, _ := w.head(w.celeb)

	rep := w.run(w.config())
	if rep.OK() {
		t.Fatal("verify found no difference in corrupted read models")
	}
	for _, d := range rep.Differences {
		t.Logf("%s", d)
		if d.User != a && d.User != b && d.User != c {
			t.Errorf("a difference of an untouched user: %s", d)
		}
	}
	check := func(what string, ds []verify.Difference, post, author int64, where ...string) {
		t.Helper()
		for _, d := range ds {
			if (post == 0 || d.Post == post) && d.Author == author {
				for _, want := range where {
					if !strings.Contains(d.Where, want) {
						t.Errorf("%s: where %q lacks %q", what, d.Where, want)
					}
				}
				return
			}
		}
		t.Errorf("%s: not found (post %d, author %d) in %v", what, post, author, ds)
	}
	check("inbox missing a post", find(rep, a, "missing"), aPost, aAuthor,
		fmt.Sprintf("inbox of %d (v1): does not hold it, built", a), fmt.Sprintf("timeline of %d: holds it", aAuthor))
	check("foreign post", find(rep, b, "foreign"), bPost, bAuthor,
		fmt.Sprintf("inbox of %d (v1): holds it", b), fmt.Sprintf("SQL: %d follows %d: false", b, bAuthor))
	check("foreign post (the set)", find(rep, b, "following"), 0, bAuthor, fmt.Sprintf("following set of %d, author %d: holds it", b, bAuthor))
	check("stale following set (the set)", find(rep, c, "following"), 0, w.celeb,
		fmt.Sprintf("following set of %d, author %d: does not hold it", c, w.celeb), fmt.Sprintf("SQL: %d follows %d: true", c, w.celeb))
	check("stale following set (the celebrity's post)", find(rep, c, "missing"), celebPost, w.celeb,
		fmt.Sprintf("celebrity set, author %d: holds it", w.celeb), fmt.Sprintf("following set of %d, author %d: does not hold it", c, w.celeb))
	if len(find(rep, a, "following")) > 0 {
		t.Errorf("a following difference where the sets are right: %v", rep.Differences)
	}
	if !strings.Contains(rep.Lag, "re-checked after a second barrier") || !strings.Contains(rep.Lag, "3 still differ") {
		t.Errorf("lag account %q: want the re-check of the 3 users", rep.Lag)
	}

	// One user alone: an untouched one verifies clean.
	var d int64
	for _, u := range w.users[1:] {
		if u != a && u != b && u != c {
			d = u
			break
		}
	}
	cfg := w.config()
	cfg.User = d
	if one := w.run(cfg); !one.OK() || one.Users != 1 {
		t.Errorf("user %d alone: %d users, differences %v", d, one.Users, one.Differences)
	}
	cfg.User = a
	if one := w.run(cfg); len(find(one, a, "missing")) == 0 {
		t.Errorf("user %d alone: the missing post is not found: %v", a, one.Differences)
	}
}
