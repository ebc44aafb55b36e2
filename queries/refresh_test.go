package queries

import (
	"errors"
	"testing"
	"time"

	"github.com/feedco/feed/testkit/testenv"
)

// refreshed follows prevCursor from cursor with after=, page after page,
// until a page comes back empty, and returns what the pages showed, oldest
// first. Every page must be newest first, strictly above the cursor it was
// asked with, no longer than limit, with no next cursor and with
// prevCursor its newest item's (nil when empty).
func refreshed(t *testing.T, read func(after string) (Page, error), cursor string, limit int) (out []key, last string) {
	t.Helper()
	for pages := 0; ; pages++ {
		if pages > 10_000 {
			t.Fatal("refreshing does not end")
		}
		p, err := read(cursor)
		if err != nil {
			t.Fatalf("refresh page %d: %v", pages, err)
		}
		if p.Items == nil || len(p.Items) > limit || p.NextCursor != nil {
			t.Fatalf("refresh page %d: %d items (nil %v), limit %d, next cursor %v", pages, len(p.Items), p.Items == nil, limit, p.NextCursor)
		}
		if len(p.Items) == 0 {
			if p.PrevCursor != nil {
				t.Fatalf("empty refresh page with prevCursor %q", *p.PrevCursor)
			}
			return out, cursor
		}
		from, err := parseCursor(cursor)
		if err != nil {
			t.Fatal(err)
		}
		var keys []key
		for _, it := range p.Items {
			keys = append(keys, itemKey(t, it))
		}
		for i, k := range keys {
			if !from.less(k) || i > 0 && !k.less(keys[i-1]) {
				t.Fatalf("refresh page %d is not newest first strictly above its cursor: %v (cursor %v)", pages, keys, from)
			}
		}
		if p.PrevCursor == nil || *p.PrevCursor != encodeCursor(keys[0]) {
			t.Fatalf("refresh page %d: prevCursor %v is not its newest item's", pages, p.PrevCursor)
		}
		for i := len(keys) - 1; i >= 0; i-- {
			out = append(out, keys[i])
		}
		cursor = *p.PrevCursor
	}
}

// A client that refreshes with after=prevCursor while posts keep arriving
// sees every visible post above its first page exactly once, in order: on
// both inbox layouts, with a warm inbox and with one that starts cold
// (PostgreSQL, then the background rebuild), with a followed celebrity's
// posts pulled, posts of several authors in one millisecond, the reader's
// own posts, a deleted post and a post of an unfollowed author hidden, and
// the read cache on. The posts are created at the clock's time, as the
// write side creates them, and projected right after (the projectors'
// lag, here none); the loop ends once the settled horizon has passed the
// last post and a page comes back empty.
func TestRefreshSeesEveryPostAboveFirstPageOnce(t *testing.T) {
	t.Parallel()
	for _, cold := range []bool{false, true} {
		name := "warm"
		if cold {
			name = "cold"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testRefreshSeesEveryPostOnce(t, cold)
		})
	}
}

func testRefreshSeesEveryPostOnce(t *testing.T, cold bool) {
	const settle = 1500 * time.Millisecond
	b := setup(t, Config{CelebrityCacheTTL: 100 * time.Millisecond, RefreshSettle: settle})
	u, a, c, star, gone, stranger := b.user(), b.user(), b.user(), b.user(), b.user(), b.user()
	for _, f := range []int64{a, c, star, gone} {
		b.follow(u, f)
	}
	old := time.Now().Add(-time.Minute).UnixMilli()
	for i := range 12 {
		b.post(a, old+int64(i/2))
		b.post(c, old+int64(i/2))
		b.post(star, old+int64(i))
	}
	var inboxFor []int64
	if !cold {
		inboxFor = []int64{u}
	}
	b.projectAll([]int64{star}, inboxFor, 500, 500)
	first, err := b.feed.Home(b.ctx, u, "", 5)
	if err != nil || first.PrevCursor == nil {
		t.Fatalf("first page: %v (prevCursor %v)", err, first.PrevCursor)
	}
	if got := itemKey(t, first.Items[0]); *first.PrevCursor != encodeCursor(got) {
		t.Fatalf("first page's prevCursor is not its newest item's")
	}

	// project writes a new post where the projectors would: the post
	// cache, its author's timeline, and u's inbox unless it is the
	// celebrity's or u's own (a cold inbox gets the pushes too: a rebuild
	// adds to what is there).
	project := func(author int64, k key) {
		b.cachePost(k)
		if err := b.rdb.ZAdd(b.ctx, b.keys.Timeline(author), zs([]key{k})...).Err(); err != nil {
			t.Fatal(err)
		}
		if author != star && author != u && author != stranger {
			b.pushInbox(u, k)
		}
	}
	read := func(after string) (Page, error) { return b.feed.HomeAfter(b.ctx, u, after, 3) }
	var want, got []key
	cursor := *first.PrevCursor
	var lastMs int64
	for round := range 40 {
		ms := time.Now().UnixMilli()
		// two authors in one millisecond
		for _, author := range []int64{a, c} {
			k := b.post(author, ms)
			project(author, k)
			want = append(want, k)
		}
		switch round % 4 {
		case 0:
			k := b.post(star, ms)
			project(star, k)
			want = append(want, k)
		case 1:
			k := b.post(u, ms)
			b.created(u, k)
			want = append(want, k)
		case 2:
			k := b.post(a, ms) // deleted before it settles: never shown
			project(a, k)
			b.deletePost(k)
			project(stranger, b.post(stranger, ms)) // not followed
		case 3:
			if round == 3 {
				b.unfollow(u, gone) // unfollowed: hidden though still in the inbox
			}
			project(gone, b.post(gone, ms))
		}
		lastMs = ms
		if round%3 == 0 { // refresh while posts keep arriving
			var seen []key
			seen, cursor = refreshed(t, read, cursor, 3)
			got = append(got, seen...)
		}
	}
	// The clock moves the horizon: refresh until it passed the last post.
	testenv.Eventually(t, time.Minute, "the settled horizon passes the last post", func() bool {
		settled := b.feed.settled().ms > lastMs
		seen, next := refreshed(t, read, cursor, 3)
		got, cursor = append(got, seen...), next
		return settled
	})
	sortNewestFirst(want)
	for i, j := 0, len(want)-1; i < j; i, j = i+1, j-1 {
		want[i], want[j] = want[j], want[i]
	}
	sameFeed(t, "refreshed above the first page", got, want)
}

// A refresh that finds more posts above its cursor than it walks in Redis
// asks PostgreSQL upwards, and shows the same page.
func TestRefreshPastScanFromPostgres(t *testing.T) {
	t.Parallel()
	func() {
		b := setup(t, Config{})
		u, a := b.user(), b.user()
		b.follow(u, a)
		for i := range 30 {
			b.post(a, base+int64(i/3))
		}
		b.projectAll(nil, []int64{u}, 500, 500)
		truth := b.truth(u) // newest first
		from := truth[len(truth)-1]
		want := truth[len(truth)-5 : len(truth)-1]
		pg := b.feed.metrics.Sources.WithLabelValues("home_after", "pg")
		for _, scan := range []int{refreshScan, 5} {
			b.feed.refreshScan = scan
			before := counter(pg)
			p, err := b.feed.HomeAfter(b.ctx, u, encodeCursor(from), 4)
			if err != nil {
				t.Fatal(err)
			}
			var got []key
			for _, it := range p.Items {
				got = append(got, itemKey(t, it))
			}
			sameFeed(t, "refresh page", got, want)
			if fromPG := counter(pg) > before; fromPG != (scan < len(truth)) {
				t.Errorf("scan %d over %d posts: page read upwards from PostgreSQL %v", scan, len(truth), fromPG)
			}
		}
	}()
}

// The author's posts refresh the same way, from the timeline and from
// PostgreSQL below its floor.
func TestAuthorPostsRefresh(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	a := b.user()
	for i := range 20 {
		b.post(a, base+int64(i/2))
	}
	b.projectAll(nil, nil, 500, 6) // a timeline of the newest 6, ~floor below
	truth := b.authorTruth(a)
	oldest := truth[len(truth)-1]
	got, _ := refreshed(t, func(after string) (Page, error) { return b.feed.AuthorPostsAfter(b.ctx, a, a, after, 3) }, encodeCursor(oldest), 3)
	want := append([]key(nil), truth[:len(truth)-1]...)
	for i, j := 0, len(want)-1; i < j; i, j = i+1, j-1 {
		want[i], want[j] = want[j], want[i]
	}
	sameFeed(t, "author refreshed", got, want)
}

// A refresh cursor must be one: empty and malformed ones are bad cursors,
// and a cursor above the settled horizon is an empty page.
func TestRefreshRejectsBadAfter(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	u := b.user()
	for _, after := range []string{"", "x", "AQ", encodeCursor(startKey)} {
		_, err := b.feed.HomeAfter(b.ctx, u, after, 5)
		var ce *CursorError
		if !errors.As(err, &ce) {
			t.Errorf("after %q: %v, want a CursorError", after, err)
		}
		if _, err := b.feed.AuthorPostsAfter(b.ctx, u, u, after, 5); !errors.As(err, &ce) {
			t.Errorf("author after %q: %v, want a CursorError", after, err)
		}
	}
	p, err := b.feed.HomeAfter(b.ctx, u, encodeCursor(key{ms: time.Now().UnixMilli(), id: 1}), 5)
	if err != nil || p.Items == nil || len(p.Items) != 0 || p.PrevCursor != nil || p.NextCursor != nil {
		t.Fatalf("refresh above the horizon: %+v, %v; want an empty page with null cursors", p, err)
	}
}
