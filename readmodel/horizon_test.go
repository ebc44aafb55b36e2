package readmodel

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/testkit/testenv"
)

// idAt is a Snowflake id of the millisecond t (sequence seq).
func idAt(t time.Time, seq int64) int64 { return t.Sub(snowflake.Epoch).Milliseconds()<<22 | seq }

// expireTime is key's PEXPIRETIME (-1: none, -2: no key).
func expireTime(t *testing.T, rdb redis.UniversalClient, key string) int64 {
	t.Helper()
	v, err := rdb.Do(context.Background(), "PEXPIRETIME", key).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

const testH = 4 * 24 * time.Hour

// Every per-post key expires where the horizon says: a body (a post, an
// edit, a tombstone) and counts:{p} at the post's ms + H, a day bucket at
// its day's end + H, reposts:{O} at its newest repost's ms + H, never
// shortened by an older repost.
func TestHorizonExpiries(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	keys := Keys{Prefix: rd.Prefix}
	hz := Horizon{H: testH}
	pc, e := NewPostCache(keys).WithHorizon(hz), NewEngagement(keys).WithHorizon(hz)
	now := time.Now()
	post, edited, gone := idAt(now.Add(-time.Hour), 1), idAt(now.Add(-2*time.Hour), 1), idAt(now.Add(-3*time.Hour), 1)
	r1, r2 := idAt(now.Add(-30*time.Minute), 1), idAt(now.Add(-50*time.Minute), 1)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(pc.Create(ctx, rd.Client, Post{ID: post, AuthorID: 1, Content: "a"}))
	must(pc.Create(ctx, rd.Client, Post{ID: edited, AuthorID: 1, Content: "a"}))
	if ok, err := pc.Edit(ctx, rd.Client, Post{ID: edited, AuthorID: 1, Content: "b", Version: 2}); err != nil || !ok {
		t.Fatalf("edit: %v %v", ok, err)
	}
	must(pc.Set(ctx, rd.Client, Post{ID: gone, AuthorID: 1, Deleted: true}))
	exec(t, rd.Client, func(p redis.Pipeliner) {
		e.QueueSetCount(ctx, p, post, CountLikes, 1, 10)
		e.QueueLiked(ctx, p, 7, post, true)
		e.QueueReposted(ctx, p, 7, post, true)
		e.QueueAddRepost(ctx, p, post, Repost{ID: r1, Reposter: 7})
		e.QueueAddRepost(ctx, p, post, Repost{ID: r2, Reposter: 8}) // older: keeps r1's expiry
	})
	want := map[string]int64{
		keys.Post(post): hz.ExpiryOf(post), keys.Post(edited): hz.ExpiryOf(edited), keys.Post(gone): hz.ExpiryOf(gone),
		keys.Counts(post): hz.ExpiryOf(post), keys.Reposts(post): hz.ExpiryOf(r1),
		keys.Liked(7, DayOf(post)): hz.DayExpiry(DayOf(post)), keys.Reposted(7, DayOf(post)): hz.DayExpiry(DayOf(post)),
	}
	for k, at := range want {
		if got := expireTime(t, rd.Client, k); got != at {
			t.Errorf("%s expires at %d, want %d", k, got, at)
		}
	}
	if got := hz.ExpiryOf(post) - PostMs(post); got != testH.Milliseconds() {
		t.Fatalf("expiry %d ms after creation, want H", got)
	}
	if d := hz.DayExpiry(DayOf(post)) - hz.ExpiryOf(post); d <= 0 || d > dayMs {
		t.Fatalf("the bucket expires %d ms after its post's keys, want within a day after", d)
	}
	// A count written again moves nothing but keeps the expiry; a key
	// written before the horizon (no expiry) gets it at its next write.
	must(rd.Client.Persist(ctx, keys.Counts(post)).Err())
	exec(t, rd.Client, func(p redis.Pipeliner) { e.QueueSetCount(ctx, p, post, CountLikes, 1, 10) })
	if got := expireTime(t, rd.Client, keys.Counts(post)); got != hz.ExpiryOf(post) {
		t.Fatalf("a counts key without expiry: %d after a redelivery, want %d", got, hz.ExpiryOf(post))
	}
}

// A write about a post past the horizon writes nothing: a create, an
// edit, a tombstone, a count, a like, a repost (its own id past), a
// rebuild's counts and buckets.
func TestHorizonPastWritesNothing(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	keys := Keys{Prefix: rd.Prefix}
	hz := Horizon{H: testH}
	pc, e := NewPostCache(keys).WithHorizon(hz), NewEngagement(keys).WithHorizon(hz)
	old := idAt(time.Now().Add(-testH-time.Minute), 1)
	oldRepost := idAt(time.Now().Add(-testH-time.Second), 2)
	if err := pc.Create(ctx, rd.Client, Post{ID: old, AuthorID: 1, Content: "a"}); err != nil {
		t.Fatal(err)
	}
	if ok, err := pc.Edit(ctx, rd.Client, Post{ID: old, AuthorID: 1, Content: "b", Version: 2}); err != nil || ok {
		t.Fatalf("edit past the horizon: wrote %v, %v", ok, err)
	}
	if ok, err := e.SetCount(ctx, rd.Client, old, CountLikes, 3, 10); err != nil || ok {
		t.Fatalf("count past the horizon: wrote %v, %v", ok, err)
	}
	exec(t, rd.Client, func(p redis.Pipeliner) {
		if e.QueueSetCount(ctx, p, old, CountReplies, 1, 11) != nil {
			t.Error("a count past the horizon was queued")
		}
		if err := pc.QueueSet(ctx, p, Post{ID: oldRepost, AuthorID: 2, Deleted: true}); err != nil {
			t.Error(err)
		}
		_ = pc.QueueCreate(ctx, p, Post{ID: old, AuthorID: 1})
		_ = pc.QueueEdit(ctx, p, Post{ID: old, AuthorID: 1, Version: 3})
		e.QueueLiked(ctx, p, 7, old, true)
		e.QueueReposted(ctx, p, 7, old, true)
		e.QueueAddRepost(ctx, p, old, Repost{ID: oldRepost, Reposter: 7})
		e.QueueBuildCounts(ctx, p, old, Counts{Likes: 1}, 1)
		e.QueueBuildViewerState(ctx, p, 7, true, []int64{idAt(time.Now().Add(-testH-25*time.Hour), 1)})
		p.Ping(ctx) // a pipeline with nothing else queued is still valid
	})
	if ks, err := testenv.Keys(ctx, rd.Client, rd.Prefix+"*"); err != nil || len(ks) != 0 {
		t.Fatalf("keys written past the horizon: %v %v", ks, err)
	}
}

// A recent repost of an original past the horizon creates reposts:{O}
// expiring with the repost, marked incomplete (earlier reposts may have
// expired with an earlier set); a set of an original inside the horizon
// is not marked, nor one a rebuild writes whole.
func TestRecentRepostOfOldOriginal(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	keys := Keys{Prefix: rd.Prefix}
	hz := Horizon{H: testH}
	e := NewEngagement(keys).WithHorizon(hz)
	now := time.Now()
	old, recent := idAt(now.Add(-10*24*time.Hour), 1), idAt(now.Add(-time.Hour), 1)
	built := idAt(now.Add(-9*24*time.Hour), 1)
	r := Repost{ID: idAt(now.Add(-time.Minute), 1), Reposter: 9}
	r0 := Repost{ID: idAt(now.Add(-8*24*time.Hour), 1), Reposter: 8} // a repost older than the horizon
	exec(t, rd.Client, func(p redis.Pipeliner) {
		e.QueueAddRepost(ctx, p, old, r)
		e.QueueAddRepost(ctx, p, recent, r)
		e.QueueBuildRepost(ctx, p, built, r0, r.ID)
		e.QueueBuildRepost(ctx, p, built, r, r.ID)
	})
	for _, o := range []int64{old, recent, built} {
		if got := expireTime(t, rd.Client, keys.Reposts(o)); got != hz.ExpiryOf(r.ID) {
			t.Errorf("reposts:{%d} expires at %d, want the repost's %d", o, got, hz.ExpiryOf(r.ID))
		}
	}
	page := func(o int64) ([]Repost, bool) {
		pipe := rd.Client.Pipeline()
		pg := e.QueueRepostsPage(ctx, pipe, o, 0, Repost{}, 10)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		rs, _, err := pg.Result()
		if err != nil {
			t.Fatal(err)
		}
		return rs, pg.Incomplete()
	}
	if rs, inc := page(old); !slices.Equal(rs, []Repost{r}) || !inc {
		t.Fatalf("old original: %v, incomplete %v; want [%v], incomplete", rs, inc, r)
	}
	if rs, inc := page(recent); !slices.Equal(rs, []Repost{r}) || inc {
		t.Fatalf("recent original: %v, incomplete %v; want [%v], complete", rs, inc, r)
	}
	if rs, inc := page(built); !slices.Equal(rs, []Repost{r0, r}) || inc {
		t.Fatalf("built set: %v, incomplete %v; want [%v %v], complete", rs, inc, r0, r)
	}
	if all, err := e.EarlierReposts(ctx, rd.Client, old, 0, 1); err != nil || !slices.Equal(all, []Repost{r}) {
		t.Fatalf("EarlierReposts of the marked set: %v %v", all, err)
	}
}

// The viewer state of a page spanning days asks two commands per day,
// answers each post from its day's buckets, and answers a post past the
// horizon Unknown without asking.
func TestViewerStateDayBuckets(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	hz := Horizon{H: testH}
	e := NewEngagement(Keys{Prefix: rd.Prefix}).WithHorizon(hz)
	now := time.Now()
	day := func(d int) time.Time { return now.Add(-time.Duration(d) * 24 * time.Hour) }
	a, b, c := idAt(day(0).Add(-time.Minute), 1), idAt(day(1), 1), idAt(day(2), 1)
	b2 := idAt(day(1), 2)
	old := idAt(now.Add(-testH-time.Minute), 1)
	exec(t, rd.Client, func(p redis.Pipeliner) {
		e.QueueLiked(ctx, p, 1, a, true)
		e.QueueLiked(ctx, p, 1, c, true)
		e.QueueReposted(ctx, p, 1, b2, true)
		e.QueueBuildViewerState(ctx, p, 1, false, []int64{c})
		e.QueueLiked(ctx, p, 2, b, true) // another viewer
	})
	posts := []int64{a, b, b2, c, old}
	days := map[int64]bool{}
	for _, p := range posts[:4] {
		days[DayOf(p)] = true
	}
	pipe := rd.Client.Pipeline()
	r := e.QueueViewerState(ctx, pipe, 1, posts)
	if n := pipe.Len(); n != 2*len(days) {
		t.Fatalf("%d commands queued for %d days, want %d", n, len(days), 2*len(days))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := r.All()
	if err != nil {
		t.Fatal(err)
	}
	want := []ViewerState{{Liked: true}, {}, {Reposted: true}, {Liked: true, Reposted: true}, {Unknown: true}}
	if !slices.Equal(got, want) {
		t.Fatalf("viewer state %v, want %v", got, want)
	}
}

// The horizon's first id is the first millisecond whose keys live.
func TestHorizonFirstID(t *testing.T) {
	t.Parallel()
	hz := Horizon{H: testH}
	now := time.Now()
	first := hz.FirstID(now)
	if !hz.Within(first, now) || hz.Within(first-1, now) {
		t.Fatalf("first id %d: within %v, the one before within %v", first, hz.Within(first, now), hz.Within(first-1, now))
	}
	if (Horizon{}).FirstID(now) != 0 || !(Horizon{}).Within(1, now) {
		t.Fatal("no horizon: every id is within")
	}
}

// The policy's horizon defaults to 4 days and is validated.
func TestPostHorizonPolicy(t *testing.T) {
	t.Parallel()
	if h := DefaultPolicy().PostHorizon; h != 4*24*time.Hour {
		t.Fatalf("default post horizon %v, want 96h", h)
	}
	for _, h := range []time.Duration{time.Millisecond, 400 * 24 * time.Hour} {
		p := DefaultPolicy()
		p.PostHorizon = h
		if p.Validate() == nil {
			t.Errorf("post horizon %v accepted", h)
		}
	}
	if hz := DefaultPolicy().Horizon(nil); hz.H != 4*24*time.Hour || !hz.On() {
		t.Fatalf("the policy's horizon: %+v", hz)
	}
}
