package projections_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// sqlInboxRows is the inbox build this package had before the in-memory
// one (and the query side's cold rebuild's query, reading one more row):
// per owner, the newest $2 non-deleted posts of followees and self.
const sqlInboxRows = `
SELECT o.id, q.id, q.created_at
FROM unnest($1::bigint[]) AS o(id)
CROSS JOIN LATERAL (
    SELECT p.id, p.created_at
    FROM (SELECT f.followee_id AS author_id FROM follows f WHERE f.follower_id = o.id
          UNION ALL SELECT o.id) a
    CROSS JOIN LATERAL (
        SELECT id, created_at FROM posts
        WHERE posts.author_id = a.author_id AND NOT deleted
        ORDER BY created_at DESC, id DESC
        LIMIT $2) p
    ORDER BY p.created_at DESC, p.id DESC
    LIMIT $2) q`

// sqlInbox is one inbox as the SQL build wrote it: the posts kept (above
// the floor), the floor (NaN when none) and the TTL in milliseconds.
type sqlInbox struct {
	ids   []int64
	floor float64
	ttlMs int64
}

// sqlBuildInboxes is that SQL build, kept here as the reference: the same
// users, rows, floor rule and TTL it wrote, by owner.
func sqlBuildInboxes(t *testing.T, w *world, inboxMax int, ttl time.Duration) map[int64]sqlInbox {
	t.Helper()
	ctx := context.Background()
	rows, err := w.db.Pool.Query(ctx, `SELECT user_id, (extract(epoch FROM last_seen_at + $1::interval - now()) * 1000)::bigint
FROM user_activity WHERE last_seen_at > now() - $1::interval + interval '1 second' ORDER BY user_id`, ttl)
	if err != nil {
		t.Fatal(err)
	}
	ttls := map[int64]int64{}
	var owners []int64
	for rows.Next() {
		var id, ms int64
		if err := rows.Scan(&id, &ms); err != nil {
			t.Fatal(err)
		}
		owners, ttls[id] = append(owners, id), ms
	}
	rows.Close()
	type entry struct {
		score float64
		id    int64
	}
	byOwner := map[int64][]entry{}
	rows, err = w.db.Pool.Query(ctx, sqlInboxRows, owners, inboxMax+1)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var owner, id int64
		var at time.Time
		if err := rows.Scan(&owner, &id, &at); err != nil {
			t.Fatal(err)
		}
		byOwner[owner] = append(byOwner[owner], entry{float64(at.UnixMilli()), id})
	}
	rows.Close()
	out := map[int64]sqlInbox{}
	for _, o := range owners {
		es := byOwner[o]
		if len(es) == 0 {
			continue
		}
		in := sqlInbox{floor: math.NaN(), ttlMs: ttls[o]}
		if len(es) > inboxMax {
			in.floor = es[inboxMax].score
			es = es[:inboxMax]
		}
		for _, e := range es {
			if math.IsNaN(in.floor) || e.score > in.floor {
				in.ids = append(in.ids, e.id)
			}
		}
		slices.Sort(in.ids)
		out[o] = in
	}
	return out
}

// stages records what a build reports.
type stages struct {
	mu     sync.Mutex
	names  []string
	totals []int64
	added  []int64
}

func (s *stages) Stage(name, _ string, total int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names, s.totals, s.added = append(s.names, name), append(s.totals, total), append(s.added, 0)
}

func (s *stages) Add(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.added[len(s.added)-1] += int64(n)
}

// The in-memory build writes what the SQL build wrote: the same inboxes,
// each with the same posts (as a set: the packed layout orders by id), the
// same floor, ~built, and a TTL within seconds of the SQL build's. The data
// set is made to hit every rule: authors with more posts than the bound
// (floors, and a floor shared by kept posts of its millisecond), many posts
// in one millisecond, posts with the same created_at (ordered by id),
// deleted posts, users without followees or posts (no key), inactive users
// and users never seen (no key).
func TestBuildInboxesMatchesSQLBuild(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	const inboxMax = 15
	w.exec(`SELECT setseed(0.42)`)
	w.exec(`INSERT INTO users (id, name) SELECT u, 'u' || u FROM generate_series(1, 300) u`)
	// 1..250 seen recently, 251..280 seen 40 days ago, 281..300 never.
	w.exec(`INSERT INTO user_activity (user_id, last_seen_at)
SELECT u, CASE WHEN u <= 250 THEN now() - (u || ' minutes')::interval ELSE now() - interval '40 days' END
FROM generate_series(1, 280) u`)
	// Users 1..240 follow 0..11 others; 241..250 follow nobody (245..250
	// do not post either); everyone follows 7, a prolific author.
	w.exec(`INSERT INTO follows (follower_id, followee_id)
SELECT DISTINCT u, v FROM (
  SELECT u, 1 + floor(random() * 300)::int AS v
  FROM generate_series(1, 240) u, generate_series(1, 11) k WHERE random() < 0.8) e
WHERE u <> v`)
	w.exec(`INSERT INTO follows (follower_id, followee_id) SELECT u, 7 FROM generate_series(1, 240) u WHERE u <> 7 ON CONFLICT DO NOTHING`)
	// 6,000 posts over 150 ms: ~40 a millisecond. Half the ids are small
	// (1..3000, so "999" and "1000" meet in one millisecond), half are
	// Snowflake-sized; created_at is a whole millisecond, or 500 µs after it.
	w.exec(`INSERT INTO posts (id, author_id, content, created_at, deleted)
SELECT CASE WHEN g % 2 = 0 THEN g ELSE (g::bigint << 22) | 4096 END,
  CASE WHEN g % 10 = 0 THEN 7 ELSE 1 + floor(random() * 244)::int END,
  'p', timestamptz '2026-11-30 10:00:00+00' + (floor(random() * 150) || ' ms')::interval
       + (CASE WHEN random() < 0.5 THEN 0 ELSE 500 END || ' microseconds')::interval,
  random() < 0.05
FROM generate_series(1, 6000) g`)

	cfg := projections.Config{InboxMax: inboxMax, BackfillPosts: 5}
	ttl := 30*24*time.Hour - time.Hour // the defaults' inbox TTL
	want := sqlBuildInboxes(t, w, inboxMax, ttl)
	rd := testenv.NewRedis(t)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	cfg.Keys = keys
	p, err := projections.NewInbox(cfg, w.db.Pool, rd.Client, nil)
	if err != nil {
		t.Fatal(err)
	}
	var st stages
	n, err := p.BuildInboxes(ctx, w.db.Pool, &st)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	if n != 250 {
		t.Errorf("built for %d users, want the 250 active", n)
	}
	var posts int64
	if err := w.db.Pool.QueryRow(ctx, `SELECT count(*) FROM posts WHERE NOT deleted`).Scan(&posts); err != nil {
		t.Fatal(err)
	}
	wantStages := fmt.Sprint([]string{"read posts", "write inboxes"}, []int64{0, 250}, []int64{posts, 250})
	if got := fmt.Sprint(st.names, st.totals, st.added); got != wantStages {
		t.Errorf("progress %s, want %s", got, wantStages)
	}
	floors := 0
	for u := int64(1); u <= 300; u++ {
		wv, ok := want[u]
		if !ok {
			if inboxExists(t, rd.Client, keys, u) {
				t.Errorf("inbox of %d: built, the SQL build has none", u)
			}
			continue
		}
		ids, floor, built := inboxView(t, rd.Client, keys, u)
		got := make([]int64, len(ids))
		for i, id := range ids {
			got[i], _ = strconv.ParseInt(id, 10, 64)
		}
		slices.Sort(got)
		if !slices.Equal(got, wv.ids) || fmt.Sprint(floor) != fmt.Sprint(wv.floor) || !built {
			t.Errorf("inbox of %d: %v floor %v built %v, the SQL build's %v floor %v", u, got, floor, built, wv.ids, wv.floor)
		}
		if !math.IsNaN(wv.floor) {
			floors++
		}
		if ttl := inboxTTL(t, rd.Client, keys, u); ttl <= 0 || (ttl-time.Duration(wv.ttlMs)*time.Millisecond).Abs() > 10*time.Second {
			t.Errorf("inbox of %d: TTL %v, the SQL build's %v", u, ttl, time.Duration(wv.ttlMs)*time.Millisecond)
		}
	}
	t.Logf("%d inboxes, %d floors", len(want), floors)
	// The data set reached what it was made for.
	if floors < 200 || len(want) < 240 || len(want) >= 250 {
		t.Errorf("data set: %d floors, %d inboxes", floors, len(want))
	}
}

// The bulk build against a replay of the events through the inbox
// projector, on a history where the two must agree: follows before posts
// (a backfill copies at most BackfillPosts, and raises the floor when the
// followee had more, so the history has one follow only of an author with
// fewer), exact trims (InboxTrimEvery 1, no slack) over the bound, a
// deletion and an unfollow in an inbox that was never trimmed (after a
// trim, the projector cannot bring back what it cut; the build, reading
// the tables, can), no celebrities (the projector does not push their
// posts; the build, like the query side's cold rebuild, includes them), and
// readers who do not post (the projector does not push to the author; the
// build includes the user's own posts, as the cold rebuild does). Every
// inbox key then holds the same members and scores, with a floor where a
// trim raised one, and both have a TTL; the build adds ~built (the
// projector never writes it: a projector-made inbox is cold).
//
// With packed inboxes the same, as read (canonical): the projector's
// buffers are merged, and trimmed, only every PackedMergeAt pushes.
func TestBuildInboxesMatchesProjectorReplay(t *testing.T) {
	t.Parallel()
	testBuildInboxesMatchesProjectorReplay(t)
}

func testBuildInboxesMatchesProjectorReplay(t *testing.T) {
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
	// The projector reads PostgreSQL (followers, backfills): each event is
	// applied right after the world wrote it, as the live projector would.
	sync := func() {
		applyAll(t, ps, w.envs)
		w.envs = w.envs[:0]
	}

	var authors, readers []int64
	for range 4 {
		authors = append(authors, w.user(false))
	}
	for range 5 {
		readers = append(readers, w.user(true))
	}
	a1, a2, a3, a4 := authors[0], authors[1], authors[2], authors[3]
	r1, r2, r3, r5 := readers[0], readers[1], readers[2], readers[4] // readers[3] follows nobody
	sync()
	for _, f := range [][2]int64{{r1, a1}, {r1, a2}, {r2, a2}, {r2, a3}, {r3, a1}, {r3, a2}, {r3, a4}} {
		w.follow(f[0], f[1])
		sync()
	}
	var a3posts []int64
	for _, n := range []struct {
		author int64
		posts  int
	}{{a1, 12}, {a2, 3}, {a3, 5}, {a4, 2}} {
		for range n.posts {
			id := w.post(n.author)
			sync()
			if n.author == a3 {
				a3posts = append(a3posts, id)
			}
		}
	}
	w.follow(r5, a4) // a4 has 2 posts, fewer than BackfillPosts: all copied, no floor
	sync()
	w.post(a4)
	sync()
	w.post(a4)
	sync()
	w.del(a3, a3posts[2])
	sync()
	w.unfollow(r2, a3)
	sync()

	buildInboxesAt(t, w, rd.Client, cfg, built)
	comparePackedBuild(t, rd.Client, live, built, cfg.InboxMax, []int64{r1, r2, r3, r5})
	if ids, _, _ := inboxView(t, rd.Client, built, r2); len(ids) != 3 {
		t.Errorf("r2's inbox %v: want a2's 3 posts after the unfollow of a3", ids)
	}
	if ids, _, _ := inboxView(t, rd.Client, built, r1); len(ids) != cfg.InboxMax {
		t.Errorf("r1's inbox %v: want the bound, %d posts", ids, cfg.InboxMax)
	}
}

// comparePackedBuild compares, as read (canonical), the packed inboxes of
// users built under built with those the projector wrote under live: the
// same posts and floor, ~built on the built ones only, a TTL on both; no
// other inbox keys; floors where the bound was crossed.
func comparePackedBuild(t *testing.T, rdb redis.UniversalClient, live, built readmodel.Keys, max int, users []int64) {
	t.Helper()
	ctx := context.Background()
	got, want := canonical(t, rdb, built.Prefix, max), canonical(t, rdb, live.Prefix, max)
	if len(got) != len(users) || len(want) != len(users) {
		t.Errorf("built %d inbox keys, the projector %d, want %d", len(got), len(want), len(users))
	}
	floors := 0
	for _, u := range users {
		k := strings.TrimPrefix(homefeed.Key(built, u), built.Prefix)
		g, wv := got[k], want[k]
		if !strings.HasSuffix(g, " built=true") || !strings.HasSuffix(wv, " built=false") {
			t.Errorf("%s: built %q, projector %q: want ~built on the built one only", k, g, wv)
		}
		if a, b := strings.TrimSuffix(g, " built=true"), strings.TrimSuffix(wv, " built=false"); a != b {
			t.Errorf("%s differs:\n built     %s\n projector %s", k, a, b)
		}
		if !strings.Contains(wv, "floor=NaN") {
			floors++
		}
		if rdb.TTL(ctx, homefeed.Key(built, u)).Val() <= 0 {
			t.Errorf("%s: built inbox without a TTL", k)
		}
		lk := homefeed.Key(live, u)
		if rdb.TTL(ctx, lk).Val() <= 0 && rdb.TTL(ctx, lk+"+").Val() <= 0 {
			t.Errorf("%s: the projector's inbox without a TTL", k)
		}
	}
	if floors != 2 { // r1 and r3 went over the bound
		t.Errorf("%d inboxes with a floor, want 2", floors)
	}
}

// buildInboxesAt runs the inbox bulk build of cfg's policies into keys.
func buildInboxesAt(t *testing.T, w *world, rdb redis.UniversalClient, cfg projections.Config, keys readmodel.Keys) {
	t.Helper()
	cfg.Keys = keys
	p, err := projections.NewInbox(cfg, w.db.Pool, rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.BuildInboxes(context.Background(), w.db.Pool, nil); err != nil {
		t.Fatal(err)
	}
}
