package queries

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/feedco/feed/readmodel"
)

// A page whose items are older than the post horizon hydrates them from
// PostgreSQL, never from Redis: their bodies, counts and the viewer's
// state come from the tables even where Redis still holds other values
// (written here as a deployment before the horizon left them), and the
// earlier-repost question of an original older than the horizon whose set
// of reposts is marked incomplete is asked of PostgreSQL; an item inside
// the horizon is read from Redis.
func TestPageOlderThanTheHorizonFromPostgreSQL(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{PostHorizon: time.Hour})
	v, a, c, d, e := b.user(), b.user(), b.user(), b.user(), b.user()
	b.follow(v, a)
	b.follow(v, c)
	b.follow(v, e)
	now := time.Now()
	tOld, tNew := now.Add(-3*time.Hour).UnixMilli(), now.Add(-10*time.Minute).UnixMilli()
	old := b.post(a, tOld)               // a's post, past the horizon
	oldD := b.post(d, tOld+1)            // d's (not followed), past it too
	early := b.repostAt(e, oldD, tOld+2) // e's repost of it, past the horizon: d's post shows there
	b.like(v, old)
	b.like(c, old)
	b.like(v, oldD)
	late := b.repostAt(c, oldD, tNew) // c's recent repost of it: hidden, e's is earlier
	recent := b.post(a, tNew+1)
	b.like(c, recent)
	b.projectAll(nil, []int64{v}, 500, 500)
	b.projectShares([]int64{v})
	// What Redis holds of the old posts is not what PostgreSQL says: a
	// stale body and count, no like, and a set of reposts of oldD with
	// c's alone, marked incomplete, as the projector leaves it when the
	// earlier set expired.
	stale, _ := json.Marshal(readmodel.Post{ID: old.id, AuthorID: a, Content: "stale", CreatedAt: formatTime(old.ms)})
	eng := readmodel.NewEngagement(b.keys)
	pipe := b.rdb.Pipeline()
	pipe.Set(b.ctx, b.keys.Post(old.id), stale, 0)
	pipe.HSet(b.ctx, b.keys.Counts(old.id), "l", 99, "lv", 1)
	pipe.Del(b.ctx, b.keys.Liked(v, readmodel.DayOf(old.id)), b.keys.Reposts(oldD.id))
	eng.WithHorizon(readmodel.Horizon{H: time.Hour}).QueueAddRepost(b.ctx, pipe, oldD.id, readmodel.Repost{ID: late.id, Reposter: c})
	if _, err := pipe.Exec(b.ctx); err != nil {
		t.Fatal(err)
	}

	p, err := b.feed.Home(b.ctx, v, "", 20)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{recent.s(), early.s() + "<-" + oldD.s(), old.s()}
	if got := shown(p); !slices.Equal(got, want) {
		t.Fatalf("home of v: %v, want %v (c's late repost hidden by e's earlier one)", got, want)
	}
	for _, it := range p.Items {
		switch it.ID {
		case old.s():
			if it.Content != fmt.Sprint("post ", old.id) || it.Counts.Likes != 2 || !it.Viewer.Liked {
				t.Errorf("old post: content %q, counts %+v, viewer %+v: want PostgreSQL's (2 likes, liked)", it.Content, *it.Counts, *it.Viewer)
			}
		case early.s():
			o := it.RepostOf
			if o == nil || o.Counts.Likes != 1 || o.Counts.Reposts != 2 || !o.Viewer.Liked {
				t.Errorf("old original: %+v: want 1 like, 2 reposts, liked", o)
			}
		case recent.s():
			if it.Counts.Likes != 1 || it.Viewer.Liked {
				t.Errorf("recent post: counts %+v, viewer %+v", *it.Counts, *it.Viewer)
			}
		}
	}
	// The same page from PostgreSQL alone is the same JSON.
	items, err := b.feed.pgPull(b.ctx, v, key{ms: maxCursorMs}, 21)
	if err != nil {
		t.Fatal(err)
	}
	if r, g := string(p.AppendJSON(nil)), string(makePage(items, 20).AppendJSON(nil)); r != g {
		t.Fatalf("Redis\n%s\nPostgreSQL\n%s", r, g)
	}
}
