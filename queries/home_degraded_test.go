package queries

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Degraded pages (inbox and own posts only) mixed at random with full
// ones, every user paged to the end with several page sizes: the posts
// shown, over all pages, are the SQL truth once each (none skipped, none
// repeated), though a degraded page leaves out the celebrities' posts and
// what only PostgreSQL holds, which the pages after it show. A post pushed
// into the range of a degraded page after it was read is shown by a later
// page too. Small inbox and timeline bounds put ~floors in the way.
func TestHomeDegradedResumesTheFullMerge(t *testing.T) {
	t.Parallel()
	testHomeDegradedResumesTheFullMerge(t)
}

func testHomeDegradedResumesTheFullMerge(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	b := setup(t, Config{})
	var users []int64
	for range 10 {
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
	ms := base
	for i := range 160 {
		if rng.IntN(3) > 0 {
			ms += 2
		}
		k := b.postSeq(users[rng.IntN(len(users))], ms, int64(i+1))
		if rng.IntN(12) == 0 {
			b.exec(`UPDATE posts SET deleted = true WHERE id = $1`, k.id)
		}
	}
	b.projectAll(celebs, users, 20, 12)
	partial, reordered, late := 0, 0, 0
	seq := int64(100_000)
	for _, limit := range []int{3, 7, 50} {
		for _, u := range users[2:] {
			var got []key
			var trace []string
			cursor := ""
			for pages := 0; ; pages++ {
				if pages > 1000 {
					t.Fatal("paging does not end")
				}
				read := b.feed.Home
				degrade := rng.IntN(2) == 0
				if degrade {
					read = b.feed.HomeDegraded
				}
				p, err := read(b.ctx, u, cursor, limit)
				if err != nil {
					t.Fatalf("user %d limit %d page %d: %v", u, limit, pages, err)
				}
				if p.Partial {
					partial++
					if !degrade || !p.Degraded || p.NextCursor == nil || len(p.Items) == 0 || len(p.Items) > limit {
						t.Fatalf("a partial page: %+v (degraded read %v)", p, degrade)
					}
				}
				var ks []key
				for _, it := range p.Items {
					got = append(got, itemKey(t, it))
					ks = append(ks, itemKey(t, it))
				}
				trace = append(trace, fmt.Sprintf("cursor %q partial %v items %v", cursor, p.Partial, ks))
				if p.Partial && len(p.Items) > 1 && rng.IntN(2) == 0 {
					// A late push: a post of a followed, pushed author just
					// below the page's newest item, in its range.
					top := itemKey(t, p.Items[0])
					for _, v := range users {
						if v != u && !slices.Contains(celebs, v) && b.follows(u, v) {
							seq++
							k := b.postSeq(v, top.ms-1, seq)
							b.cachePost(k)
							// The author's timeline and every follower's inbox,
							// as the projectors write them.
							if err := b.rdb.ZAdd(b.ctx, b.keys.Timeline(v), zs([]key{k})...).Err(); err != nil {
								t.Fatal(err)
							}
							for _, w := range users {
								if b.follows(w, v) {
									b.pushInbox(w, k)
								}
							}
							late++
							trace = append(trace, fmt.Sprintf("late %v", k))
							break
						}
					}
				}
				if p.NextCursor == nil {
					break
				}
				cursor = *p.NextCursor
			}
			want := b.truth(u)
			if !slices.Equal(got, want) {
				reordered++
			}
			sortNewestFirst(got)
			if !slices.Equal(got, want) {
				for _, l := range trace {
					t.Log(l)
				}
			}
			sameFeed(t, fmt.Sprintf("user %d limit %d, degraded pages mixed in", u, limit), got, want)
		}
	}
	t.Logf("%d partial pages, %d feeds shown out of order (a degraded page's omissions shown after it), %d late pushes", partial, reordered, late)
	if partial == 0 || reordered == 0 || late == 0 {
		t.Fatal("the run exercised no partial page, no omission or no late push")
	}
}

// A degraded read falls back to the full merge when it cannot help: a
// cold inbox (served from PostgreSQL and rebuilt), and a resume cursor
// (never degraded twice in a row, so its exclusions stay one page).
func TestHomeDegradedFallsBackToTheFullMerge(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	u, a := b.user(), b.user()
	b.follow(u, a)
	for i := range 6 {
		b.post(a, base+int64(i))
	}
	p, err := b.feed.HomeDegraded(b.ctx, u, "", 2) // nothing projected: cold
	if err != nil {
		t.Fatal(err)
	}
	if p.Partial || p.Degraded || len(p.Items) != 2 {
		t.Fatalf("a cold degraded read: %+v, want the full page", p)
	}
	b.projectAll(nil, []int64{u}, 500, 500)
	p, err = b.feed.HomeDegraded(b.ctx, u, "", 2)
	if err != nil || !p.Partial {
		t.Fatalf("a warm degraded read: %+v %v", p, err)
	}
	q, err := b.feed.HomeDegraded(b.ctx, u, *p.NextCursor, 2)
	if err != nil || q.Partial || q.Degraded {
		t.Fatalf("a degraded read from a resume cursor: %+v %v, want the full merge", q, err)
	}
	got := []key{}
	for _, it := range append(p.Items, q.Items...) {
		got = append(got, itemKey(t, it))
	}
	sameFeed(t, "two pages", got, b.truth(u)[:4])
	if _, err := b.feed.AuthorPosts(b.ctx, a, a, *p.NextCursor, 2); !isBadCursor(err) {
		t.Fatalf("author posts with a resume cursor: %v, want a bad cursor", err)
	}
}

func isBadCursor(err error) bool {
	bc, ok := err.(interface{ BadCursor() bool })
	return ok && bc.BadCursor()
}

// follows reports whether follower follows followee in the database.
func (b *bundle) follows(follower, followee int64) bool {
	b.t.Helper()
	var ok bool
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT EXISTS (SELECT 1 FROM follows WHERE follower_id = $1 AND followee_id = $2)`, follower, followee).Scan(&ok); err != nil {
		b.t.Fatal(err)
	}
	return ok
}
