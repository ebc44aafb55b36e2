package projections_test

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// sharesWorld writes a log of posts, a reply with media deleted and one
// kept, likes and an unlike, reposts and an undone one, and returns the
// users and posts.
func sharesWorld(t *testing.T, w *world) (users, posts []int64) {
	t.Helper()
	a, b, c, d := w.user(true), w.user(true), w.user(true), w.user(true)
	p1, p2 := w.post(a), w.post(b)
	r1 := w.reply(c, p1, a)
	w.reply(d, p1, a)
	w.delReply(c, r1, p1)
	w.like(b, p1, a, true)
	w.like(c, p1, a, true)
	w.like(c, p1, a, false)
	w.like(a, p2, b, true)
	w.repost(c, p1, a)
	w.repost(d, p1, a)
	w.unrepost(c, p1, a)
	w.repost(a, p2, b)
	w.repost(c, p1, a)
	w.del(b, p2) // a deleted original keeps its reposts and likes
	return []int64{a, b, c, d}, []int64{p1, p2}
}

// postsState is the posts projection's keys under prefix as compared
// between a build and the projector: bodies decoded (a body created by
// the projector has no version: 1), counts without their guards and
// without all-zero ones (absent is zero).
func postsState(t *testing.T, rdb redis.UniversalClient, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range dump(t, rdb, prefix) {
		switch {
		case strings.HasPrefix(k, "post:{"):
			var p readmodel.Post
			if err := json.Unmarshal([]byte(strings.TrimPrefix(v, "string:")), &p); err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			p.Version = p.ContentVersion()
			b, _ := json.Marshal(p)
			out[k] = string(b)
		case strings.HasPrefix(k, "counts:{"):
			var kept []string
			for _, f := range strings.Fields(strings.TrimPrefix(v, "hash:")) {
				if name, val, _ := strings.Cut(f, "="); !strings.HasSuffix(name, "v") && val != "0" {
					kept = append(kept, f)
				}
			}
			if len(kept) > 0 {
				out[k] = strings.Join(kept, " ")
			}
		case strings.HasPrefix(k, "liked:{"), strings.HasPrefix(k, "reposted:{"):
			if v != "set:" {
				out[k] = v
			}
		case k == "changes", strings.HasPrefix(k, "changes:seen{"):
			// The live streams' log of edits and deletions, which the
			// projector appends to and a build does not (docs/streams.md).
		default:
			out[k] = v
		}
	}
	return out
}

func postsProjector(t *testing.T, w *world, rdb redis.UniversalClient, keys readmodel.Keys) *projections.Posts {
	t.Helper()
	ps, err := projections.New(projections.Config{Keys: keys}, w.db.Pool, rdb, nil, projections.NamePosts)
	if err != nil {
		t.Fatal(err)
	}
	return ps[0].(*projections.Posts)
}

// `feed rebuild posts` from PostgreSQL writes what the projector wrote
// from the log: bodies of posts and reposts (tombstones of deleted posts
// and undone reposts), counts, liked:{u}, reposted:{u}, reposts:{O} and
// names; and a catch-up applying the whole log on top changes nothing.
func TestBuildPostsSharesMatchesProjector(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	live := readmodel.Keys{Prefix: rd.Prefix + "live:"}
	built := readmodel.Keys{Prefix: rd.Prefix + "built:"}
	users, posts := sharesWorld(t, w)
	lp := postsProjector(t, w, rd.Client, live)
	applyAll(t, []projections.Projector{lp}, w.envs)
	bp := postsProjector(t, w, rd.Client, built)
	if _, err := bp.BuildPosts(context.Background(), w.db.Pool, nil); err != nil {
		t.Fatal(err)
	}
	want := postsState(t, rd.Client, live.Prefix)
	if d := diff(want, postsState(t, rd.Client, built.Prefix)); d != "" {
		t.Fatalf("the build differs from the projector:\n%s", d)
	}
	for _, k := range []string{live.Counts(posts[0]), live.Reposts(posts[0]), live.Liked(users[1], readmodel.DayOf(posts[0])), live.Reposted(users[0], readmodel.DayOf(posts[1])), live.Name(users[3])} {
		if _, ok := want[strings.TrimPrefix(k, live.Prefix)]; !ok {
			t.Fatalf("the projector wrote no %s: the comparison would miss it", k)
		}
	}
	applyAll(t, []projections.Projector{bp}, w.envs) // the catch-up
	if d := diff(want, postsState(t, rd.Client, built.Prefix)); d != "" {
		t.Fatalf("the catch-up changed the build:\n%s", d)
	}
	if got := countsOf(t, rd.Client, built, posts[0]); got != pgCounts(t, w, posts[0]) {
		t.Fatalf("built counts %+v, PostgreSQL's %+v", got, pgCounts(t, w, posts[0]))
	}
}

// `feed rebuild timelines` takes the live reposts as the reposter's
// entries, as the projector does.
func TestBuildTimelinesWithReposts(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	live := readmodel.Keys{Prefix: rd.Prefix + "live:"}
	built := readmodel.Keys{Prefix: rd.Prefix + "built:"}
	users, _ := sharesWorld(t, w)
	newTimelines := func(keys readmodel.Keys) *projections.Timelines {
		ps, err := projections.New(projections.Config{Keys: keys}, w.db.Pool, rd.Client, nil, projections.NameTimelines)
		if err != nil {
			t.Fatal(err)
		}
		return ps[0].(*projections.Timelines)
	}
	applyAll(t, []projections.Projector{newTimelines(live)}, w.envs)
	if _, err := newTimelines(built).BuildTimelines(context.Background(), w.db.Pool, nil); err != nil {
		t.Fatal(err)
	}
	reposts := 0
	for _, u := range users {
		got, _, _ := zview(t, rd.Client, built.Timeline(u))
		want, _, _ := zview(t, rd.Client, live.Timeline(u))
		if !slices.Equal(got, want) {
			t.Fatalf("timeline of %d: built %v, projector %v", u, got, want)
		}
		for _, id := range got {
			var n int
			if err := w.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM reposts WHERE id = $1::bigint`, id).Scan(&n); err != nil {
				t.Fatal(err)
			}
			reposts += n
		}
	}
	if reposts != 3 {
		t.Fatalf("%d reposts in the timelines, want the 3 live ones", reposts)
	}
}

// `feed rebuild inbox` takes a followee's live reposts as its entries, as
// the projector pushes them (to followers who do not follow the original's
// author: the filter leaves the build and the projector alike here).
func TestBuildInboxesWithReposts(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	live := readmodel.Keys{Prefix: rd.Prefix + "live:"}
	built := readmodel.Keys{Prefix: rd.Prefix + "built:"}
	cfg := projections.Config{InboxMax: 8, InboxTrimSlack: 0, InboxTrimEvery: 1, BackfillPosts: 3}
	lc := cfg
	lc.Keys = live
	ps, err := projections.New(lc, w.db.Pool, rd.Client, nil, projections.NameInbox)
	if err != nil {
		t.Fatal(err)
	}
	sync := func() {
		applyAll(t, ps, w.envs)
		w.envs = w.envs[:0]
	}
	a1, a2, q := w.user(false), w.user(false), w.user(false)
	r1, r2 := w.user(true), w.user(true)
	sync()
	w.follow(r1, q)
	w.follow(r2, q)
	w.follow(r2, a2)
	sync()
	p1 := w.post(a1)
	w.post(a2)
	sync()
	w.repost(q, p1, a1)
	sync()
	w.unrepost(q, p1, a1)
	sync()
	again := w.repost(q, p1, a1)
	sync()
	buildInboxesAt(t, w, rd.Client, cfg, built)
	for _, r := range []int64{r1, r2} {
		got, _, _ := inboxView(t, rd.Client, built, r)
		want, _, _ := inboxView(t, rd.Client, live, r)
		if !slices.Equal(got, want) {
			t.Fatalf("inbox of %d: built %v, projector %v", r, got, want)
		}
	}
	if ids, _, _ := inboxView(t, rd.Client, built, r1); !slices.Equal(ids, []string{idstr(again)}) {
		t.Fatalf("r1's built inbox %v, want the live repost %d alone", ids, again)
	}
}

// `feed rebuild followers` writes the block fields of both accounts at
// each block pair's newest version, as the projector does; and the query
// side's rebuild of one user's following state (RebuildFollowing) writes
// them too.
func TestBuildFollowersBlockFields(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	rd := testenv.NewRedis(t)
	live := readmodel.Keys{Prefix: rd.Prefix + "live:"}
	built := readmodel.Keys{Prefix: rd.Prefix + "built:"}
	one := readmodel.Keys{Prefix: rd.Prefix + "one:"}
	u, v, x, y := w.user(true), w.user(true), w.user(true), w.user(true)
	w.follow(u, x)
	w.block(u, v, true)
	w.block(x, u, true)
	w.block(y, u, true)
	w.block(y, u, false)
	w.mute(u, x, true)
	newFollowers := func(keys readmodel.Keys) *projections.Followers {
		ps, err := projections.New(projections.Config{Keys: keys}, w.db.Pool, rd.Client, nil, projections.NameFollowers)
		if err != nil {
			t.Fatal(err)
		}
		return ps[0].(*projections.Followers)
	}
	applyAll(t, []projections.Projector{newFollowers(live)}, w.envs)
	if _, err := newFollowers(built).BuildFollowers(ctx, w.db.Pool, snapshotXmax(t, w), nil); err != nil {
		t.Fatal(err)
	}
	if err := readmodel.NewFollows(one).RebuildFollowing(ctx, w.db.Pool, rd.Client, u); err != nil {
		t.Fatal(err)
	}
	blockFields := func(keys readmodel.Keys, user int64) map[string]string {
		out := map[string]string{}
		for f, val := range rd.Client.HGetAll(ctx, keys.FollowingVersions(user)).Val() {
			if strings.HasPrefix(f, "b:") || strings.HasPrefix(f, "x:") {
				out[f] = val
			}
		}
		return out
	}
	for _, user := range []int64{u, v, x, y} {
		want := blockFields(live, user)
		if got := blockFields(built, user); !maps.Equal(got, want) {
			t.Fatalf("block fields of %d: built %v, projector %v", user, got, want)
		}
	}
	wantU := map[string]string{"b:" + idstr(v): "1", "x:" + idstr(x): "1", "x:" + idstr(y): "2"}
	if got := blockFields(live, u); !maps.Equal(got, wantU) {
		t.Fatalf("block fields of u %v, want %v", got, wantU)
	}
	// The one-user rebuild reads PostgreSQL's blocks: the standing ones
	// (the lifted block by y has no row, and its field is the projector's
	// to write).
	delete(wantU, "x:"+idstr(y))
	if got := blockFields(one, u); !maps.Equal(got, wantU) {
		t.Fatalf("rebuilt block fields of u %v, want %v", got, wantU)
	}
	pipe := rd.Client.Pipeline()
	rel := readmodel.NewFollows(one).QueueRelations(ctx, pipe, u, []int64{v, x, y})
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	rs, err := rel.All()
	if err != nil {
		t.Fatal(err)
	}
	if want := []readmodel.Relation{{Blocks: true}, {Muted: true, BlockedBy: true}, {}}; !slices.Equal(rs, want) {
		t.Fatalf("relations after the rebuild %+v, want %+v", rs, want)
	}
}
