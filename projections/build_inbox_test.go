package projections_test

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// sqlBuildInboxes is that SQL build, kept here as the reference: the same
// users, rows, floor rule, ZADD (newest first, then ~floor, ~built) and
// PEXPIRE it wrote.
func sqlBuildInboxes(t *testing.T, w *world, rdb redis.UniversalClient, keys readmodel.Keys, inboxMax int, ttl time.Duration) {
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
	pipe := rdb.Pipeline()
	for _, o := range owners {
		es := byOwner[o]
		if len(es) == 0 {
			continue
		}
		floor := math.Inf(-1)
		if len(es) > inboxMax {
			floor = es[inboxMax].score
			es = es[:inboxMax]
		}
		var zs []redis.Z
		for _, e := range es {
			if e.score > floor {
				zs = append(zs, redis.Z{Score: e.score, Member: idstr(e.id)})
			}
		}
		if !math.IsInf(floor, -1) {
			zs = append(zs, redis.Z{Score: floor, Member: readmodel.SentinelFloor})
		}
		zs = append(zs, redis.Z{Score: math.Inf(1), Member: readmodel.SentinelBuilt})
		pipe.ZAdd(ctx, keys.Inbox(o), zs...)
		pipe.PExpire(ctx, keys.Inbox(o), time.Duration(ttls[o])*time.Millisecond)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
}

// inboxKey is one inbox as compared: every member with its score, the
// server's DUMP (the serialized encoding: equal DUMPs are byte-identical
// sets), the TTL and the expiry time it gives (the TTL's read time plus
// the TTL: builds read at different times compare by expiry).
type inboxKey struct {
	zs      []redis.Z
	dump    string
	ttl     time.Duration
	expires time.Time
}

// inboxes reads every inbox key under keys' prefix, by user.
func inboxes(t *testing.T, rdb redis.UniversalClient, keys readmodel.Keys) map[string]inboxKey {
	t.Helper()
	ctx := context.Background()
	out := map[string]inboxKey{}
	all, err := testenv.Keys(ctx, rdb, keys.Prefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range all {
		p, _, ok := keys.Classify(k)
		if !ok || p != readmodel.ProjectionInbox {
			continue
		}
		ik := inboxKey{
			zs:   rdb.ZRangeWithScores(ctx, k, 0, -1).Val(),
			dump: rdb.Dump(ctx, k).Val(),
		}
		at := time.Now()
		ik.ttl = rdb.PTTL(ctx, k).Val()
		ik.expires = at.Add(ik.ttl)
		out[strings.TrimPrefix(k, keys.Prefix)] = ik
	}
	return out
}

func fmtZ(zs []redis.Z) string {
	var b strings.Builder
	for _, z := range zs {
		fmt.Fprintf(&b, "%v=%v ", z.Member, z.Score)
	}
	return b.String()
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

// The in-memory build writes exactly what the SQL build wrote, byte for
// byte: the same keys, members and scores, equal DUMPs (so the same
// encoding too), and a TTL on every key within seconds of the SQL build's.
// Both of its write paths (RESTORE, and the ZADD fallback) are checked. The
// data set is made to hit every rule: authors with more posts than the
// bound (floors, and a floor shared by kept posts of its millisecond), many
// posts in one millisecond with ids of different lengths (the member order
// within a score is by bytes), posts with the same created_at (ordered by
// id), deleted posts, users without followees or posts (no key), inactive
// users and users never seen (no key), and keys that exist before the
// build (RESTORE refuses them; ZADD adds to them as the SQL build did).
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

	// The sorted set's two writers (the packed build: TestBuildInboxesMatchesProjectorReplay).
	cfg := projections.Config{InboxMax: inboxMax, BackfillPosts: 5, InboxLayout: readmodel.InboxLayoutZset}
	ttl := 30*24*time.Hour - time.Hour // the defaults' inbox TTL
	rd := testenv.NewRedis(t)
	ref := readmodel.Keys{Prefix: rd.Prefix + "sql:"}
	// Two keys exist before the builds, with a member the build would not
	// write: RESTORE refuses them, ZADD adds to them, as it did.
	for _, prefix := range []string{"sql:", "restore:", "zadd:"} {
		k := readmodel.Keys{Prefix: rd.Prefix + prefix}
		for _, u := range []int64{3, 4} {
			rd.Client.ZAdd(ctx, k.Inbox(u), redis.Z{Score: 1, Member: "1"})
		}
	}
	sqlBuildInboxes(t, w, rd.Client, ref, inboxMax, ttl)
	want := inboxes(t, rd.Client, ref)

	// "refused": a client whose RESTOREs carry a wrong checksum, so the
	// server refuses every one and the build falls back to ZADD.
	corrupt := &corruptRestores{}
	var refusing redis.UniversalClient
	switch c := rd.Client.(type) {
	case *redis.ClusterClient:
		cc := redis.NewClusterClient(c.Options())
		cc.AddHook(corrupt)
		refusing = cc
	case *redis.Client:
		sc := redis.NewClient(c.Options())
		sc.AddHook(corrupt)
		refusing = sc
	}
	t.Cleanup(func() { _ = refusing.Close() })

	for _, mode := range []string{"restore", "zadd", "refused"} {
		keys := readmodel.Keys{Prefix: rd.Prefix + mode + ":"}
		c := cfg
		c.Keys = keys
		client := rd.Client
		if mode == "refused" {
			client = refusing
			for _, u := range []int64{3, 4} {
				rd.Client.ZAdd(ctx, keys.Inbox(u), redis.Z{Score: 1, Member: "1"})
			}
		}
		p, err := projections.NewInbox(c, w.db.Pool, client, nil)
		if err != nil {
			t.Fatal(err)
		}
		var st stages
		build := p.BuildInboxes
		if mode == "zadd" {
			build = p.BuildInboxesWithZADD
		}
		n, err := build(ctx, w.db.Pool, &st)
		if err != nil {
			t.Fatalf("%s: build: %v", mode, err)
		}
		if n != 250 {
			t.Errorf("%s: built for %d users, want the 250 active", mode, n)
		}
		var posts int64
		if err := w.db.Pool.QueryRow(ctx, `SELECT count(*) FROM posts WHERE NOT deleted`).Scan(&posts); err != nil {
			t.Fatal(err)
		}
		wantStages := fmt.Sprint([]string{"read posts", "write inboxes"}, []int64{0, 250}, []int64{posts, 250})
		if got := fmt.Sprint(st.names, st.totals, st.added); got != wantStages {
			t.Errorf("%s: progress %s, want %s", mode, got, wantStages)
		}

		got := inboxes(t, rd.Client, keys)
		if len(got) != len(want) {
			t.Errorf("%s: %d inbox keys, the SQL build has %d", mode, len(got), len(want))
		}
		var floors, sameMs int
		for k, wv := range want {
			gv, ok := got[k]
			if !ok {
				t.Errorf("%s: %s missing", mode, k)
				continue
			}
			if fmtZ(gv.zs) != fmtZ(wv.zs) {
				t.Errorf("%s: %s differs:\n got  %s\n want %s", mode, k, fmtZ(gv.zs), fmtZ(wv.zs))
			}
			if gv.dump != wv.dump {
				t.Errorf("%s: %s: DUMP differs from the SQL build's", mode, k)
			}
			if gv.ttl <= 0 || wv.ttl <= 0 || gv.expires.Sub(wv.expires).Abs() > 10*time.Second {
				t.Errorf("%s: %s: expires %v (TTL %v), the SQL build's %v (TTL %v)", mode, k, gv.expires, gv.ttl, wv.expires, wv.ttl)
			}
			for i, z := range wv.zs {
				if z.Member == readmodel.SentinelFloor {
					floors++
				}
				if i > 0 && z.Score == wv.zs[i-1].Score {
					sameMs++
				}
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("%s: %s is not in the SQL build", mode, k)
			}
		}
		t.Logf("%s: %d keys, %d floors, %d same-millisecond neighbours", mode, len(want), floors, sameMs)
		// The data set reached what it was made for.
		if floors < 200 || sameMs < 1000 || len(want) < 240 || len(want) >= 250 {
			t.Errorf("data set: %d floors, %d same-millisecond neighbours, %d keys", floors, sameMs, len(want))
		}
		for _, u := range []int64{3, 4} {
			if rd.Client.ZScore(ctx, keys.Inbox(u), "1").Err() != nil {
				t.Errorf("%s: the existing member of inbox %d was not kept", mode, u)
			}
		}
	}
	if n := corrupt.refused.Load(); n == 0 {
		t.Error("no RESTORE was refused in the refused mode (test premise)")
	}
}

// corruptRestores flips a byte of every RESTORE payload's checksum, and
// counts the RESTOREs the server refused.
type corruptRestores struct{ refused atomic.Int64 }

func (*corruptRestores) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*corruptRestores) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (c *corruptRestores) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if args := cmd.Args(); cmd.Name() == "restore" && len(args) == 4 {
				if b, ok := args[3].([]byte); ok {
					b = append([]byte(nil), b...)
					b[len(b)-1] ^= 0xFF
					args[3] = b
				}
			}
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if cmd.Name() == "restore" && cmd.Err() != nil {
				c.refused.Add(1)
			}
		}
		return err
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
	eachLayout(t, testBuildInboxesMatchesProjectorReplay)
}

func testBuildInboxesMatchesProjectorReplay(t *testing.T, layout string) {
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	live := readmodel.Keys{Prefix: rd.Prefix + "live:"}
	built := readmodel.Keys{Prefix: rd.Prefix + "built:"}
	cfg := projections.Config{InboxMax: 8, InboxTrimSlack: 0, InboxTrimEvery: 1, BackfillPosts: 3, InboxLayout: layout}

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
	if layout == readmodel.InboxLayoutPacked {
		comparePackedBuild(t, rd.Client, live, built, cfg.InboxMax, []int64{r1, r2, r3, r5})
		if ids, _, _ := inboxView(t, rd.Client, built, layout, r2); len(ids) != 3 {
			t.Errorf("r2's inbox %v: want a2's 3 posts after the unfollow of a3", ids)
		}
		return
	}

	got, want := inboxes(t, rd.Client, built), inboxes(t, rd.Client, live)
	var names []string
	for k := range want {
		names = append(names, k)
	}
	sort.Strings(names)
	if len(got) != len(want) || len(want) != 4 {
		t.Errorf("built %d inbox keys, the projector %d, want 4 (r1, r2, r3, r5)", len(got), len(want))
	}
	floors := 0
	for _, k := range names {
		g, wv := got[k], want[k]
		if len(g.zs) == 0 || g.zs[len(g.zs)-1].Member != readmodel.SentinelBuilt {
			t.Errorf("%s: built inbox without ~built: %s", k, fmtZ(g.zs))
			continue
		}
		if a, b := fmtZ(g.zs[:len(g.zs)-1]), fmtZ(wv.zs); a != b {
			t.Errorf("%s differs:\n built     %s\n projector %s", k, a, b)
		}
		if g.ttl <= 0 || wv.ttl <= 0 {
			t.Errorf("%s: TTLs %v (built), %v (projector): want both set", k, g.ttl, wv.ttl)
		}
		if strings.Contains(fmtZ(wv.zs), readmodel.SentinelFloor) {
			floors++
		}
	}
	if floors != 2 { // r1 and r3 went over the bound
		t.Errorf("%d inboxes with a floor, want 2", floors)
	}
	if ids, _, _ := zview(t, rd.Client, built.Inbox(r2)); len(ids) != 3 {
		t.Errorf("r2's inbox %v: want a2's 3 posts after the unfollow of a3", ids)
	}
	if ids, _, _ := zview(t, rd.Client, built.Inbox(r1)); len(ids) != cfg.InboxMax {
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
		k := strings.TrimPrefix(built.PackedInbox(u), built.Prefix)
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
		if rdb.TTL(ctx, built.PackedInbox(u)).Val() <= 0 {
			t.Errorf("%s: built inbox without a TTL", k)
		}
		lk := live.PackedInbox(u)
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
