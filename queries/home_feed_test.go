package queries

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// base is a millisecond two hours ago: the tests' posts are old enough
// for any refresh to show.
var base = time.Now().Add(-2 * time.Hour).UnixMilli()

// projectedFollow registers a reader u following an author a who has n
// posts, one millisecond apart from base, oldest first, and projects them
// all (a built inbox for u), as the tests of one followed author start.
func (b *bundle) projectedFollow(n int) (u, a int64, posts []key) {
	b.t.Helper()
	u, a = b.user(), b.user()
	b.follow(u, a)
	for i := range n {
		posts = append(posts, b.post(a, base+int64(i)))
	}
	b.projectAll(nil, []int64{u}, 500, 500)
	return u, a, posts
}

// projectAll writes every read model from the database, as caught-up
// projectors would: post:{p} for every post (deleted flag included), each
// author's timeline (newest timelineMax, ~floor when cut), the celebrity set,
// and a built inbox for each user in inboxFor holding the newest inboxMax
// posts of their non-celebrity followees (deleted ones too: deletion is
// lazy), with ~floor when cut.
func (b *bundle) projectAll(celebs []int64, inboxFor []int64, inboxMax, timelineMax int) {
	b.t.Helper()
	rows, err := b.db.Pool.Query(b.ctx, `SELECT id, author_id, content, deleted, created_at FROM posts ORDER BY created_at DESC, id DESC`)
	if err != nil {
		b.t.Fatal(err)
	}
	var all []authored
	byAuthor := map[int64][]key{}
	pipe := b.rdb.Pipeline()
	for rows.Next() {
		var a authored
		var content string
		var deleted bool
		var at time.Time
		if err := rows.Scan(&a.key.id, &a.author, &content, &deleted, &at); err != nil {
			b.t.Fatal(err)
		}
		a.key.ms = at.UnixMilli()
		all = append(all, a)
		byAuthor[a.author] = append(byAuthor[a.author], a.key)
		raw, _ := json.Marshal(readmodel.Post{ID: a.key.id, AuthorID: a.author, Content: content, CreatedAt: formatTime(a.key.ms), Deleted: deleted})
		pipe.Set(b.ctx, b.keys.Post(a.key.id), raw, 0)
	}
	rows.Close()
	if _, err := pipe.Exec(b.ctx); err != nil && len(all) > 0 {
		b.t.Fatal(err)
	}
	for author, keys := range byAuthor {
		b.setZ(b.keys.Timeline(author), head(keys, timelineMax), true, floorOf(keys, timelineMax))
	}
	// An author without posts has a built, empty timeline, as after a build.
	var ids []int64
	urows, err := b.db.Pool.Query(b.ctx, `SELECT id FROM users`)
	if err == nil {
		ids, err = pgx.CollectRows(urows, pgx.RowTo[int64])
	}
	if err != nil {
		b.t.Fatal(err)
	}
	for _, id := range ids {
		if _, ok := byAuthor[id]; !ok {
			b.setZ(b.keys.Timeline(id), nil, true, -1)
		}
	}
	isCeleb := map[int64]bool{}
	for _, c := range celebs {
		isCeleb[c] = true
		b.rdb.SAdd(b.ctx, b.keys.Celebrities(), strconv.FormatInt(c, 10))
	}
	for _, u := range inboxFor {
		follows := map[int64]bool{}
		frows, err := b.db.Pool.Query(b.ctx, `SELECT followee_id FROM follows WHERE follower_id = $1`, u)
		if err != nil {
			b.t.Fatal(err)
		}
		for frows.Next() {
			var f int64
			_ = frows.Scan(&f)
			follows[f] = true
		}
		frows.Close()
		var inbox []key
		for _, a := range all {
			if follows[a.author] && !isCeleb[a.author] {
				inbox = append(inbox, a.key)
			}
		}
		b.setInbox(u, head(inbox, inboxMax), true, floorOf(inbox, inboxMax))
	}
}

func head(keys []key, n int) []key { return keys[:min(n, len(keys))] }

// floorOf is the ~floor after trimming newest-first keys to n: the highest
// score removed, or -1 (none) when nothing was removed.
func floorOf(keys []key, n int) int64 {
	if len(keys) <= n {
		return -1
	}
	return keys[n].ms
}

// Paging every user's feed to the end, with many page sizes and bounds,
// equals the SQL truth: no duplicate, no gap, no foreign post. The data has
// same-millisecond runs, deleted posts, celebrities (pulled) and small
// inbox/timeline bounds so pages cross ~floor into PostgreSQL.
func TestHomePagingEqualsTruth(t *testing.T) {
	t.Parallel()
	testHomePagingEqualsTruth(t)
}

func testHomePagingEqualsTruth(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	b := setup(t, Config{})
	var users []int64
	for range 12 {
		users = append(users, b.user())
	}
	celebs := users[:2]
	for _, u := range users {
		for _, v := range users {
			if u != v && (slices.Contains(celebs, v) || rng.IntN(3) == 0) {
				b.follow(u, v)
			}
		}
	}
	var posts []key
	ms := base
	for range 200 {
		if rng.IntN(3) > 0 {
			ms++ // about a third of posts share a millisecond with the previous one
		}
		posts = append(posts, b.post(users[rng.IntN(len(users))], ms))
	}
	for _, p := range posts {
		if rng.IntN(10) == 0 {
			b.exec(`UPDATE posts SET deleted = true WHERE id = $1`, p.id)
		}
	}
	for _, bounds := range []struct{ inbox, timeline int }{{1000, 1000}, {40, 15}, {7, 3}} {
		b.projectAll(celebs, users, bounds.inbox, bounds.timeline)
		for _, limit := range []int{2, 7, 50} {
			for _, u := range users[:5] {
				sameFeed(t, fmt.Sprintf("user %d inbox %d timeline %d limit %d", u, bounds.inbox, bounds.timeline, limit),
					b.readHome(u, limit), b.truth(u))
			}
		}
	}
	if counter(b.feed.metrics.Sources.WithLabelValues("home", "pg")) == 0 {
		t.Error("no page continued from PostgreSQL below a ~floor")
	}
}

func TestHomeHidesDeletedPostsAndKeepsPagesFull(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	u, a := b.user(), b.user()
	b.follow(u, a)
	var keep []key
	for i := range 12 {
		k := b.post(a, base+int64(i))
		if i >= 4 && i < 10 {
			b.deletePost(k) // six deleted in a row, newest side of the feed
		} else {
			keep = append(keep, k)
		}
	}
	b.projectAll(nil, []int64{u}, 500, 500)
	p, err := b.feed.Home(b.ctx, u, "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 2 || p.NextCursor == nil {
		t.Fatalf("first page %+v: want 2 items despite the deleted ones", p)
	}
	slices.Reverse(keep)
	sameFeed(t, "deleted hidden", b.readHome(u, 2), keep)
}

// Posts of an author the reader unfollowed are hidden while the inbox still
// holds them, whether the follow question is answered by the read cache's
// whole following set or (without the cache) asked of Redis, early for the
// authors hinted by the reader's previous page.
func TestHomeHidesUnfollowedAuthorBeforeInboxCleanup(t *testing.T) {
	t.Parallel()
	for _, cache := range []int{0, -1} {
		t.Run(fmt.Sprintf("read cache keys %d", cache), func(t *testing.T) {
			t.Parallel()
			hidesUnfollowedAuthor(t, Config{ReadCacheKeys: cache})
		})
	}
}

func hidesUnfollowedAuthor(t *testing.T, cfg Config) {
	b := setup(t, cfg)
	u, a, c := b.user(), b.user(), b.user()
	b.follow(u, a)
	b.follow(u, c)
	for i := range 6 {
		b.post(a, base+int64(2*i))
		b.post(c, base+int64(2*i+1))
	}
	b.projectAll(nil, []int64{u}, 500, 500)
	t.Run("not hinted", func(t *testing.T) {
		b.unfollow(u, a) // following:{u} updated; the inbox still holds a's posts
		got := b.readHome(u, 4)
		if len(got) != 6 {
			t.Fatalf("got %d posts, want c's 6", len(got))
		}
		sameFeed(t, "unfollowed hidden", got, b.truth(u))
	})
	t.Run("hinted", func(t *testing.T) {
		// The first page's authors are asked in the next read's first
		// pipeline: an unfollow since then must show in that answer.
		b.follow(u, a)
		sameFeed(t, "followed again", b.readHome(u, 4), b.truth(u))
		if b.feed.cache == nil && !slices.Contains(b.feed.hints.get(u), a) {
			t.Fatalf("hint %v lacks author %d", b.feed.hints.get(u), a)
		}
		b.unfollow(u, a)
		sameFeed(t, "hinted author unfollowed", b.readHome(u, 4), b.truth(u))
	})
}

// Unfollowing one's last account removes following:{u} altogether (Redis
// drops empty sets); the reader must still hide that author's posts left in
// the inbox, e.g. by a cold rebuild that raced the unfollow cleanup.
func TestHomeHidesLastUnfollowedAuthor(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	u, a, _ := b.projectedFollow(4)
	b.unfollow(u, a)
	if n, _ := b.rdb.Exists(b.ctx, b.keys.Following(u)).Result(); n != 0 {
		t.Fatalf("following:{u} still exists (%d); the test needs it gone", n)
	}
	got := b.readHome(u, 3)
	if len(got) != 0 {
		t.Fatalf("got %d posts of an unfollowed author, want none", len(got))
	}
	sameFeed(t, "last unfollow hidden", got, b.truth(u))
}

func TestHomePullsFollowedCelebrities(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	u, star, other, friend := b.user(), b.user(), b.user(), b.user()
	b.follow(u, star)
	b.follow(u, friend)
	for i := range 5 {
		b.post(star, base+int64(3*i))
		b.post(other, base+int64(3*i+1)) // a celebrity u does not follow
		b.post(friend, base+int64(3*i+2))
	}
	b.projectAll([]int64{star, other}, []int64{u}, 500, 500)
	if inbox, _, built := b.inboxState(u); len(inbox) != 5 || !built { // friend's 5 posts: the celebrity was not pushed
		t.Fatalf("inbox holds %d posts (built %v), want friend's 5", len(inbox), built)
	}
	got := b.readHome(u, 3)
	if len(got) != 10 {
		t.Fatalf("got %d posts, want 10 (5 pulled from the celebrity)", len(got))
	}
	sameFeed(t, "celebrity pulled", got, b.truth(u))
	// The second read of the celebrity's timeline comes from the process cache.
	hits := counter(b.feed.metrics.CacheLookups.WithLabelValues("timeline", "hit"))
	if _, err := b.feed.Home(b.ctx, u, "", 3); err != nil {
		t.Fatal(err)
	}
	if counter(b.feed.metrics.CacheLookups.WithLabelValues("timeline", "hit")) <= hits {
		t.Error("celebrity timeline was not served from the in-process cache")
	}
}

func TestHomeColdInboxServedFromPostgresAndRebuilt(t *testing.T) {
	t.Parallel()
	testHomeColdInboxServedFromPostgresAndRebuilt(t)
}

func testHomeColdInboxServedFromPostgresAndRebuilt(t *testing.T) {
	b := setup(t, Config{InboxMax: 8})
	u, a, c := b.user(), b.user(), b.user()
	b.follow(u, a)
	b.follow(u, c)
	for i := range 10 {
		b.post(a, base+int64(i))
		b.post(c, base+int64(i)) // same milliseconds as a's
	}
	b.post(u, base+20)
	b.projectAll(nil, nil, 0, 500) // post cache and timelines only: no inbox
	p, err := b.feed.Home(b.ctx, u, "", 5)
	if err != nil {
		t.Fatal(err)
	}
	truth := b.truth(u)
	var first []key
	for _, it := range p.Items {
		first = append(first, itemKey(t, it))
	}
	sameFeed(t, "cold first page", first, truth[:5])
	if counter(b.feed.metrics.Sources.WithLabelValues("home", "cold")) != 1 {
		t.Error("first page not counted as cold")
	}
	testenv.Eventually(t, 10*time.Second, "inbox rebuilt", func() bool {
		_, _, built := b.inboxState(u)
		return built
	})
	if err := b.svc.Stop(); err != nil { // the rebuild's bookkeeping is done
		t.Fatal(err)
	}
	// ~built and ~floor (the rebuild was cut at InboxMax); of the 8 posts
	// the inbox keeps only those strictly above the floor.
	ids, floor, _ := b.inboxState(u)
	want := 0
	for _, k := range truth[:8] {
		if k.ms > truth[7].ms {
			want++
		}
	}
	if len(ids) != want {
		t.Fatalf("rebuilt inbox has %d posts, want %d: %v", len(ids), want, ids)
	}
	if floor == nil || *floor != truth[7].ms {
		t.Fatalf("~floor = %v, want the oldest kept score %d", floor, truth[7].ms)
	}
	var seen time.Time
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT last_seen_at FROM user_activity WHERE user_id = $1`, u).Scan(&seen); err != nil {
		t.Fatalf("reading did not mark the user active: %v", err)
	}
	sameFeed(t, "warm after rebuild", b.readHome(u, 5), truth)
	if counter(b.feed.metrics.Sources.WithLabelValues("home", "redis")) == 0 {
		t.Error("reads after the rebuild did not use the inbox")
	}
}

// A page whose boundary is the inbox's ~floor continues from PostgreSQL with
// no gap and no duplicate, including posts in the floor's own millisecond.
func TestHomeFloorBoundaryContinuesFromPostgres(t *testing.T) {
	testHomeFloorBoundaryContinuesFromPostgres(t)
}

func testHomeFloorBoundaryContinuesFromPostgres(t *testing.T) {
	b := setup(t, Config{})
	u, a := b.user(), b.user()
	b.follow(u, a)
	var all []key
	for i := range 6 {
		all = append(all, b.postSeq(a, base+int64(i), 900+int64(i)))
	}
	// Three posts in one millisecond, in the sorted set with ids of
	// different lengths: Redis orders them "99" > "1000" > "10001" as
	// bytes; the feed orders them as numbers.
	tie := base + 10
	all = append(all, b.postSeq(a, tie, 99), b.postSeq(a, tie, 1000), b.postSeq(a, tie, 10001))
	for i := range 4 {
		all = append(all, b.postSeq(a, tie+1+int64(i), 2000+int64(i)))
	}
	b.projectAll(nil, nil, 0, 500)
	// The inbox holds the 4 newest and two of the tie; ~floor at the tie:
	// complete only above it.
	truth := b.truth(u)
	b.setInbox(u, truth[:6], true, tie)
	for _, limit := range []int{1, 2, 3, 4, 5, 7} {
		sameFeed(t, fmt.Sprint("limit ", limit), b.readHome(u, limit), truth)
	}
	if counter(b.feed.metrics.Sources.WithLabelValues("home", "pg")) == 0 {
		t.Error("no page continued from PostgreSQL")
	}
}

// Posts that arrive between pages (newer ones, and one in the cursor's own
// millisecond) cause no repeat and no skip of the older part.
func TestHomePostsArrivingBetweenPages(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	u, a := b.user(), b.user()
	b.follow(u, a)
	for i := range 10 {
		b.post(a, base+int64(i/2))
	}
	b.projectAll(nil, []int64{u}, 500, 500)
	before := b.truth(u)
	p1, err := b.feed.Home(b.ctx, u, "", 4)
	if err != nil {
		t.Fatal(err)
	}
	last := itemKey(t, p1.Items[3])
	// New posts: newer ones, and one in the cursor's millisecond with a
	// larger id (it sorts above the cursor), all pushed to the inbox.
	fresh := []key{b.post(a, base+100), b.post(a, base+101), b.postID(a, last.ms, last.id+1<<20)}
	for _, k := range fresh {
		b.cachePost(k)
		b.pushInbox(u, k)
	}
	var got []key
	for _, it := range p1.Items {
		got = append(got, itemKey(t, it))
	}
	rest := b.readAll(func(c string) (Page, error) {
		if c == "" {
			c = *p1.NextCursor
		}
		return b.feed.Home(b.ctx, u, c, 4)
	}, 4)
	sameFeed(t, "pages across new arrivals", append(got, rest...), before)
}

// The caller's own post shows on their next read even though no projector
// has seen it: the api's AfterPostCreated hook calls PostCreated, which
// marks it as the caller's newest post (and caches its body in process);
// the read fetches the marker in its one pipeline, finds the caller's
// timeline behind it, and reads the caller's newer posts from PostgreSQL.
// The post itself is not in Redis: the projectors write it, once.
func TestHomeOwnPostVisibleBeforeProjectors(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	// A frozen clock: every cached body is within PostCacheTTL, whatever
	// the deletion feed's timing, so the round trips below are exact.
	b.useClock(newClock(time.Now()))
	u, _, _ := b.projectedFollow(3)
	if _, err := b.feed.Home(b.ctx, u, "", 20); err != nil { // warms the process caches
		t.Fatal(err)
	}
	// Its activity write (an EXPIRE, in the background) must not land in
	// the measured read's round trips.
	waitIdle(b.feed)
	mine := b.post(u, time.Now().UnixMilli())
	b.created(u, mine)
	// A read that a generation's end disturbed is measured again, from
	// the flushed cache.
	var rt *roundTrips
	var p Page
	inOneGeneration(b, u, func() {
		rt = countRoundTrips(b)
		var err error
		if p, err = b.feed.Home(b.ctx, u, "", 20); err != nil {
			t.Fatal(err)
		}
	})
	if len(p.Items) != 4 || itemKey(t, p.Items[0]) != mine {
		t.Fatalf("page %+v: want the fresh own post first", p.Items)
	}
	if p.Items[0].AuthorID != strconv.FormatInt(u, 10) {
		t.Fatalf("author %s", p.Items[0].AuthorID)
	}
	if got := counter(b.feed.metrics.Hydrations.WithLabelValues("pg")); got != 0 {
		t.Errorf("%v posts hydrated from PostgreSQL, want 0", got)
	}
	// One pipeline for the entries: the inbox, the own timeline, EXISTS
	// following:{u}, and SMISMEMBER of the celebrities and the authors the
	// previous page showed (the follow hint); bodies come from process
	// memory. One more for the items: counts and the viewer's state.
	if n := rt.n.Load(); n != 2 {
		t.Errorf("warm first page took %d Redis round trips (%s), want 2", n, rt)
	}
	// Redis holds the marker, not the post: that is the projectors' to write.
	if got, err := b.rdb.Get(b.ctx, b.keys.Newest(u)).Int64(); err != nil || got != mine.id {
		t.Fatalf("newest-post marker %v %v, want %d", got, err, mine.id)
	}
	if n := b.rdb.Exists(b.ctx, b.keys.Post(mine.id)).Val(); n != 0 {
		t.Error("PostCreated wrote the post's body to Redis")
	}
	if err := b.rdb.ZScore(b.ctx, b.keys.Timeline(u), strconv.FormatInt(mine.id, 10)).Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("PostCreated wrote the post into the timeline (%v)", err)
	}
	sameFeed(t, "own post", b.readHome(u, 2), b.truth(u))
}

// Read-your-writes by the newest-post marker: while the caller's own
// timeline is behind the marker (the timelines projector has not written
// the post yet), their reads take their newer posts from PostgreSQL, one
// query a read; once the timeline holds the post, or for a reader without
// a marker, nothing is asked. A marker of a post below the page's cursor's
// range (an older page) changes nothing either.
func TestHomeOwnPostByMarker(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	u, _, _ := b.projectedFollow(3)
	b.setZ(b.keys.Timeline(u), nil, true, -1) // built, without the post: only the marker shows it
	mine := b.post(u, time.Now().UnixMilli())
	b.created(u, mine)
	q := countQueries(b)
	p, err := b.feed.Home(b.ctx, u, "", 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 4 || itemKey(t, p.Items[0]) != mine {
		t.Fatalf("page %+v: want the fresh own post first", p.Items)
	}
	if n := q.n.Load(); n != 1 {
		t.Errorf("%d PostgreSQL queries while the timeline is behind, want 1 (the author's newer posts)", n)
	}
	sameFeed(t, "own post by the marker", b.readHome(u, 2), b.truth(u))
	// The projector caught up: nothing is asked.
	b.setZ(b.keys.Timeline(u), []key{mine}, true, -1)
	q = countQueries(b)
	if p, err := b.feed.Home(b.ctx, u, "", 20); err != nil || len(p.Items) != 4 || itemKey(t, p.Items[0]) != mine {
		t.Fatalf("page %+v %v after the projector: want the own post first", p.Items, err)
	}
	if n := q.n.Load(); n != 0 {
		t.Errorf("%d PostgreSQL queries with the timeline caught up, want 0", n)
	}
	// Another user without a marker is not probed: their fresh post,
	// unprojected and unmarked, is not shown yet.
	v := b.user()
	b.setInbox(v, nil, true, -1)
	b.setZ(b.keys.Timeline(v), nil, true, -1)
	b.post(v, time.Now().UnixMilli())
	if p, err := b.feed.Home(b.ctx, v, "", 20); err != nil || len(p.Items) != 0 {
		t.Fatalf("page %+v %v: a user without a marker was probed", p.Items, err)
	}
}

func TestHomeRejectsBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	u := b.user()
	for _, tc := range []struct {
		name   string
		user   int64
		cursor string
		limit  int
	}{
		{"limit zero", u, "", 0},
		{"limit over max", u, "", MaxLimit + 1},
		{"bad user", 0, "", 5},
		{"bad cursor", u, "not a cursor", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := b.feed.Home(b.ctx, tc.user, tc.cursor, tc.limit); err == nil {
				t.Fatal("no error")
			}
			if _, err := b.feed.AuthorPosts(b.ctx, 1, tc.user, tc.cursor, tc.limit); err == nil {
				t.Fatal("no error")
			}
		})
	}
}
