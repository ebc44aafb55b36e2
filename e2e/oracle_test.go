package e2e

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/verify"
)

var (
	flagSeed  = flag.Uint64("oracle.seed", 0, "workload seed (0: $FEED_ORACLE_SEED, else 1; see docs/testing.md)")
	flagLarge = flag.Bool("oracle.large", false, "run the large oracle (500+ users, thousands of operations)")
	flagUsers = flag.Int("oracle.users", 0, "override the number of users")
	flagOps   = flag.Int("oracle.ops", 0, "override the number of operations")
)

// seed is -oracle.seed, else $FEED_ORACLE_SEED ("random": from the clock),
// else 1, so `make test` is repeatable and any seed can be replayed.
func seed(t *testing.T) uint64 {
	if *flagSeed != 0 {
		return *flagSeed
	}
	switch v := os.Getenv("FEED_ORACLE_SEED"); v {
	case "":
		return 1
	case "random":
		return uint64(time.Now().UnixNano())%1_000_000 + 1
	default:
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil || s == 0 {
			t.Fatalf("FEED_ORACLE_SEED=%q: want a positive integer or \"random\"", v)
		}
		return s
	}
}

// TestOracle is the convergence oracle: after a seeded concurrent workload
// through the HTTP API has gone all the way through CDC, Kafka and the
// projectors, every user's feed, read page by page to the end through the
// HTTP API, equals the newest-first non-deleted posts of the accounts they
// follow plus their own, computed by SQL from the source of truth. The small
// run is part of `go test ./...`; -oracle.large runs a big one.
func TestOracle(t *testing.T) {
	t.Parallel()
	testOracle(t, false)
}

// TestOracleCluster is TestOracle with the read models on a 3-node Redis
// Cluster (scripts/redis-cluster.sh, which `make test` starts; skipped
// when it is not running, failed in CI): every script, pipeline and
// multi-key command must touch one slot, SCANs must see every master.
// After the checks, the read models' keys must be spread over the nodes
// (keysBalanced).
func TestOracleCluster(t *testing.T) {
	t.Parallel()
	testOracle(t, true)
}

func testOracle(t *testing.T, cluster bool) {
	pol := policies{
		RedisCluster:       cluster,
		CelebrityThreshold: 8,
		InboxMax:           15,
		InboxTrimSlack:     3,
		TimelineMax:        10,
		BackfillPosts:      3,
		FanoutBatch:        4,
		CacheTTL:           time.Second,
	}
	w := workload{Seed: seed(t), Users: 60, Ops: 700, Workers: 8, ReaderShare: 0.4, ZipfS: 1.1, Bursts: 3}
	if *flagLarge {
		pol.CelebrityThreshold, pol.FanoutBatch = 20, 50
		w.Users, w.Ops, w.Workers, w.Bursts = 600, 8000, 16, 8
	}
	w.Users = cmpOr(*flagUsers, w.Users)
	w.Ops = cmpOr(*flagOps, w.Ops)
	t.Logf("oracle: %v; %v", w, pol)
	defer func() {
		if t.Failed() {
			t.Logf("REPRODUCE: go test ./e2e -run '%s$' -count=1 -v -oracle.seed=%d%s", map[bool]string{false: "TestOracle", true: "TestOracleCluster"}[cluster],
				w.Seed, map[bool]string{true: " -oracle.large"}[*flagLarge])
		}
	}()

	start := time.Now()
	s := startSystem(t, pol)
	up := time.Since(start)
	wd := runWorkload(t, s, w)
	played := time.Since(start) - up
	t.Logf("workload (%v): %v", played.Round(time.Millisecond), &wd.st)
	s.quiesce(t, 2*time.Minute)

	o := &oracle{t: t, s: s, wd: wd}
	o.load()
	o.coverageBefore()
	o.feeds([]int{7, 50})
	o.authorPosts([]int{7, 50})
	o.users()
	o.readModels()
	if n := s.Poisoned(t); n != 0 {
		t.Errorf("seed %d: %d messages went to the poison topic (a projector gave up on them)", w.Seed, n)
	}
	o.coverageAfter()
	if cluster {
		keysBalanced(t, s.Redis, s.Prefix)
	}
	t.Logf("oracle: up %v, workload %v, total %v", up.Round(time.Millisecond), played.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

func cmpOr(v, d int) int {
	if v != 0 {
		return v
	}
	return d
}

// oracle compares what the API serves with the source of truth.
type oracle struct {
	t  *testing.T
	s  *system
	wd *world

	// Truth is PostgreSQL's posts and follows, read by load.
	*verify.Truth
}

func (o *oracle) ctx() context.Context { return context.Background() }

func (o *oracle) fatalf(format string, args ...any) {
	o.t.Helper()
	o.t.Fatalf("seed %d: "+format, append([]any{o.wd.w.Seed}, args...)...)
}

func (o *oracle) errorf(format string, args ...any) {
	o.t.Helper()
	o.t.Errorf("seed %d: "+format, append([]any{o.wd.w.Seed}, args...)...)
}

// load reads posts and follows from PostgreSQL.
func (o *oracle) load() {
	var err error
	if o.Truth, err = verify.LoadTruth(o.ctx(), o.s.DB.Pool); err != nil {
		o.fatalf("%v", err)
	}
}

// mismatch is one user's (or author's) differences.
type mismatch struct {
	who   string
	user  int64
	diffs []string
}

func (o *oracle) report(what string, checked int, bad []mismatch) {
	o.t.Helper()
	if len(bad) == 0 {
		o.t.Logf("%s: %d checked, zero differences", what, checked)
		return
	}
	slices.SortFunc(bad, func(a, b mismatch) int { return strings.Compare(a.who, b.who) })
	var b strings.Builder
	counts := map[string]int{}
	for _, m := range bad {
		for _, d := range m.diffs {
			counts[strings.SplitN(d, ":", 2)[0]]++
		}
	}
	fmt.Fprintf(&b, "%s: %d of %d differ (difference kinds: %v); the first ones:", what, len(bad), checked, counts)
	for _, m := range bad[:min(len(bad), 5)] {
		fmt.Fprintf(&b, "\n  %s: %d differences", m.who, len(m.diffs))
		for _, d := range m.diffs[:min(len(m.diffs), 6)] {
			fmt.Fprintf(&b, "\n    %s", d)
		}
	}
	o.errorf("%s", b.String())
}

// feeds reads every user's feed to its end with each page size and
// compares it with the truth.
func (o *oracle) feeds(limits []int) {
	explained := false
	for _, limit := range limits {
		start := time.Now()
		var mu sync.Mutex
		var bad []mismatch
		var items, requests int
		users := o.wd.users
		parallel(8, len(users), func(i int) {
			u := users[i]
			ctx := o.ctx()
			want, err := verify.TruthFeed(ctx, o.s.DB.Pool, u)
			if err != nil {
				mu.Lock()
				bad = append(bad, mismatch{who: fmt.Sprint("user ", u), diffs: []string{"error: " + err.Error()}})
				mu.Unlock()
				return
			}
			got, err := o.s.readAll(ctx, "/api/feed", o.wd.tokens[u], limit, len(want)/limit+10)
			d := o.Diff(u, got, want)
			if err != nil {
				d = append([]string{"error: " + err.Error()}, d...)
			}
			mu.Lock()
			defer mu.Unlock()
			items += len(got)
			requests += len(got)/limit + 1
			if len(d) > 0 {
				bad = append(bad, mismatch{who: fmt.Sprintf("user %d (follows %d, reader %v, %d posts expected)", u, len(o.Following[u]), slices.Contains(o.wd.readers, u), len(want)), user: u, diffs: d})
			}
		})
		o.t.Logf("feeds, page size %d: %d items in about %d pages in %v", limit, items, requests, time.Since(start).Round(time.Millisecond))
		o.report(fmt.Sprintf("home feeds (page size %d)", limit), len(users), bad)
		if len(bad) > 0 && !explained {
			explained = true
			slices.SortFunc(bad, func(a, b mismatch) int { return strings.Compare(a.who, b.who) })
			for _, m := range bad[:min(3, len(bad))] {
				o.t.Logf("state of %s:\n%s", m.who, o.explain(m.user))
			}
		}
	}
}

// explain dumps what the read side and the source of truth hold for user
// u, to diagnose a difference: the inbox with its sentinels, the following
// set and its versions, activity, and u's follow history from the log.
func (o *oracle) explain(u int64) string {
	ctx, rdb, k := o.ctx(), o.s.Redis, o.s.Keys
	var b strings.Builder
	sk := homefeed.Key(k, u)
	sealed, serr := rdb.Get(ctx, sk).Result()
	buf, berr := rdb.Get(ctx, sk+"+").Result()
	fmt.Fprintf(&b, "  pfeed:{%d} (%d bytes, err %v; buffer %d bytes, err %v):", u, len(sealed), serr, len(buf), berr)
	if len(sealed) >= 8 {
		fmt.Fprintf(&b, " header %x, sealed", sealed[len(sealed)-8:])
		o.explainIDs(&b, sealed[:len(sealed)-8])
	}
	fmt.Fprintf(&b, "; buffer")
	o.explainIDs(&b, buf)
	fol, _ := rdb.SMembers(ctx, k.Following(u)).Result()
	folv, _ := rdb.HGetAll(ctx, k.FollowingVersions(u)).Result()
	fmt.Fprintf(&b, "\n  following:{%d} %v; following_v %v; SQL follows %v", u, fol, folv, o.Following[u])
	var seen *time.Time
	_ = o.s.DB.Pool.QueryRow(ctx, `SELECT last_seen_at FROM user_activity WHERE user_id = $1`, u).Scan(&seen)
	fmt.Fprintf(&b, "\n  last_seen_at %v", seen)
	rows, err := o.s.DB.Pool.Query(ctx, `SELECT type, payload->>'followeeId', stream_version, payload->>'followeeFollowers', recorded_at
		FROM events WHERE type IN ('user.followed.v1', 'user.unfollowed.v1') AND payload->>'followerId' = $1 ORDER BY recorded_at, position`, itoa(u))
	if err != nil {
		fmt.Fprintf(&b, "\n  follow history: %v", err)
		return b.String()
	}
	defer rows.Close()
	for rows.Next() {
		var typ, followee, count string
		var version int64
		var at time.Time
		if err := rows.Scan(&typ, &followee, &version, &count, &at); err == nil {
			fmt.Fprintf(&b, "\n  %s %s %s v%d (followee now has %s followers)", at.UTC().Format("15:04:05.000"), typ, followee, version, count)
		}
	}
	return b.String()
}

// authorPosts checks GET /api/users/{id}/posts for the most prolific
// authors (past the timeline bound), the most followed, and a few others.
func (o *oracle) authorPosts(limits []int) {
	authors := slices.Clone(o.wd.users)
	slices.SortFunc(authors, func(a, b int64) int { return len(o.ByAuthor[b]) - len(o.ByAuthor[a]) })
	pick := slices.Clone(authors[:min(4, len(authors))])
	pick = append(pick, o.wd.users[:min(4, len(o.wd.users))]...) // most followed ranks
	rng := rand.New(rand.NewPCG(o.wd.w.Seed, 99))
	for range 4 {
		pick = append(pick, o.wd.users[rng.IntN(len(o.wd.users))])
	}
	slices.Sort(pick)
	pick = slices.Compact(pick)
	viewer := o.wd.users[len(o.wd.users)-1]
	token := o.wd.tokens[viewer]
	var bad []mismatch
	for _, limit := range limits {
		for _, a := range pick {
			want := o.AuthorPage(viewer, a)
			got, err := o.s.readAll(o.ctx(), "/api/users/"+itoa(a)+"/posts", token, limit, len(want)/limit+10)
			d := o.Diff(viewer, got, want)
			if err != nil {
				d = append([]string{"error: " + err.Error()}, d...)
			}
			if len(d) > 0 {
				bad = append(bad, mismatch{who: fmt.Sprintf("author %d (%d posts, page size %d)", a, len(want), limit), diffs: d})
			}
		}
	}
	o.report("author posts", len(pick)*len(limits), bad)
}

// users checks follower and following counts of GET /api/users/{id}.
func (o *oracle) users() {
	var mu sync.Mutex
	var bad []mismatch
	token := o.wd.tokens[o.wd.users[0]]
	parallel(8, len(o.wd.users), func(i int) {
		u := o.wd.users[i]
		var got apiUser
		err := o.s.call(o.ctx(), http.MethodGet, "/api/users/"+itoa(u), token, "", nil, &got, http.StatusOK, nil)
		var d []string
		switch {
		case err != nil:
			d = append(d, "error: "+err.Error())
		case got.ID != itoa(u) || got.FollowerCount != o.Followers[u] || got.FollowingCount != int64(len(o.Following[u])):
			d = append(d, fmt.Sprintf("counts: served id %s, %d followers, %d following; SQL says %d, %d",
				got.ID, got.FollowerCount, got.FollowingCount, o.Followers[u], len(o.Following[u])))
		}
		if len(d) > 0 {
			mu.Lock()
			bad = append(bad, mismatch{who: fmt.Sprint("user ", u), diffs: d})
			mu.Unlock()
		}
	})
	o.report("user counts", len(o.wd.users), bad)
}

// readModels checks the followers projection against SQL: each count, the
// following sets, and the celebrity set.
func (o *oracle) readModels() {
	ctx, rdb, k := o.ctx(), o.s.Redis, o.s.Keys
	var bad []mismatch
	for _, u := range o.wd.users {
		var d []string
		n, err := rdb.HGet(ctx, k.Followers(u), "count").Int64()
		if err != nil && err != redis.Nil {
			o.fatalf("read followers count: %v", err)
		}
		if n != o.Followers[u] {
			d = append(d, fmt.Sprintf("follower count: followers:{%d} says %d, SQL %d", u, n, o.Followers[u]))
		}
		members, err := rdb.SMembers(ctx, k.Following(u)).Result()
		if err != nil {
			o.fatalf("read following set: %v", err)
		}
		var ids []int64
		for _, m := range members {
			id, _ := strconv.ParseInt(m, 10, 64)
			ids = append(ids, id)
		}
		slices.Sort(ids)
		if want := o.Shown(u); !slices.Equal(ids, want) {
			d = append(d, fmt.Sprintf("following: following:{%d} is %v, SQL (follows less mutes) %v", u, ids, want))
		}
		if len(d) > 0 {
			bad = append(bad, mismatch{who: fmt.Sprint("user ", u), diffs: d})
		}
	}
	celebs, err := rdb.SMembers(ctx, k.Celebrities()).Result()
	if err != nil {
		o.fatalf("read celebrities: %v", err)
	}
	var got, want []int64
	for _, m := range celebs {
		if readmodel.IsSentinel(m) {
			continue
		}
		id, _ := strconv.ParseInt(m, 10, 64)
		got = append(got, id)
	}
	for u, n := range o.Followers {
		if n >= o.s.pol.CelebrityThreshold {
			want = append(want, u)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		bad = append(bad, mismatch{who: "celebrity set", diffs: []string{fmt.Sprintf("celebrities: Redis %v, SQL %v", got, want)}})
	}
	o.report("followers read model", len(o.wd.users)+1, bad)
}

// coverageBefore checks, before the oracle reads anything, that the
// workload reached the paths it exists to exercise.
func (o *oracle) coverageBefore() {
	ctx, thr := o.ctx(), o.s.pol.CelebrityThreshold
	// there are inboxes
	var packed int64
	for _, u := range o.wd.users {
		packed += o.s.Redis.Exists(ctx, homefeed.Key(o.s.Keys, u), homefeed.Key(o.s.Keys, u)+"+").Val()
	}
	if packed == 0 {
		o.errorf("no inbox keys")
	}
	var celebs, up, down, pulled int64
	for _, n := range o.Followers {
		if n >= thr {
			celebs++
		}
	}
	err := o.s.DB.Pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE type = 'user.followed.v1' AND (payload->>'followeeFollowers')::bigint = $1),
		count(*) FILTER (WHERE type = 'user.unfollowed.v1' AND (payload->>'followeeFollowers')::bigint = $1 - 1),
		count(*) FILTER (WHERE type LIKE 'post.created.%' AND (payload->>'authorFollowers')::bigint >= $1)
		FROM events`, thr).Scan(&up, &down, &pulled)
	if err != nil {
		o.fatalf("count crossings: %v", err)
	}
	// Authors that crossed down and stayed below: their posts from the
	// celebrity time must have been backfilled into their followers' inboxes.
	var stayedDown int64
	err = o.s.DB.Pool.QueryRow(ctx, `SELECT count(DISTINCT (payload->>'followeeId')::bigint) FROM events e
		JOIN users u ON u.id = (e.payload->>'followeeId')::bigint
		WHERE e.type = 'user.unfollowed.v1' AND (e.payload->>'followeeFollowers')::bigint = $1 - 1 AND u.follower_count < $1`, thr).Scan(&stayedDown)
	if err != nil {
		o.fatalf("count crossings: %v", err)
	}
	floors, built := o.inboxSentinels(o.wd.users)
	var timelineFloors int
	for _, u := range o.wd.users {
		if _, err := o.s.Redis.ZScore(ctx, o.s.Keys.Timeline(u), readmodel.SentinelFloor).Result(); err == nil {
			timelineFloors++
		}
	}
	var mutes, unmutes, blocks, unblocks, mutedFollowed int64
	err = o.s.DB.Pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE type = 'user.muted.v1'),
		count(*) FILTER (WHERE type = 'user.unmuted.v1'),
		count(*) FILTER (WHERE type = 'user.blocked.v1'),
		count(*) FILTER (WHERE type = 'user.unblocked.v1'),
		(SELECT count(*) FROM mutes m JOIN follows f ON f.follower_id = m.muter_id AND f.followee_id = m.muted_id)
		FROM events`).Scan(&mutes, &unmutes, &blocks, &unblocks, &mutedFollowed)
	if err != nil {
		o.fatalf("count mutes and blocks: %v", err)
	}
	o.t.Logf("coverage: %d mutes, %d unmutes, %d blocks, %d unblocks; %d followed accounts muted at the end", mutes, unmutes, blocks, unblocks, mutedFollowed)
	// Edits: posts edited more than once (reordered or redelivered edits
	// would show an older version), and edited posts that are live and in
	// someone's feed at the end (so the feeds' "fields" check covers them).
	var edits, editedTwice, editedShown int64
	err = o.s.DB.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM events WHERE type = 'post.edited.v1'),
		(SELECT count(*) FROM posts WHERE version > 2),
		(SELECT count(*) FROM posts p WHERE p.version > 1 AND NOT p.deleted
		   AND EXISTS (SELECT 1 FROM follows f WHERE f.followee_id = p.author_id))`).Scan(&edits, &editedTwice, &editedShown)
	if err != nil {
		o.fatalf("count edits: %v", err)
	}
	o.t.Logf("coverage: %d edits, %d posts edited more than once, %d edited live posts of followed authors", edits, editedTwice, editedShown)
	for _, c := range []struct {
		what string
		n    int64
	}{{"mutes", mutes}, {"unmutes", unmutes}, {"blocks", blocks}, {"unblocks", unblocks}, {"followed accounts muted at the end", mutedFollowed},
		{"edits", edits}, {"posts edited more than once", editedTwice}, {"edited live posts of followed authors", editedShown}} {
		if c.n == 0 {
			o.errorf("coverage: the run produced no %s", c.what)
		}
	}
	// Shares: reposts (by celebrities too, pulled), their undo, an
	// original reposted by two accounts, reposts of deleted originals,
	// likes and unlikes, replies (to oneself and to others), quotes of
	// posts deleted later.
	var share struct{ reposts, celebReposts, unreposts, twice, ofDeleted, likes, unlikes, replies, selfReplies, quotes, quotesOfDeleted int64 }
	err = o.s.DB.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM events WHERE type = 'post.reposted.v1'),
		(SELECT count(*) FROM events WHERE type = 'post.reposted.v1' AND (payload->>'reposterFollowers')::bigint >= $1),
		(SELECT count(*) FROM events WHERE type = 'post.unreposted.v1'),
		(SELECT count(*) FROM (SELECT post_id FROM reposts GROUP BY post_id HAVING count(*) > 1) x),
		(SELECT count(*) FROM reposts r JOIN posts p ON p.id = r.post_id WHERE p.deleted),
		(SELECT count(*) FROM events WHERE type = 'post.liked.v1'),
		(SELECT count(*) FROM events WHERE type = 'post.unliked.v1'),
		(SELECT count(*) FROM posts WHERE reply_to IS NOT NULL AND reply_to_author <> author_id),
		(SELECT count(*) FROM posts WHERE reply_to IS NOT NULL AND reply_to_author = author_id),
		(SELECT count(*) FROM posts WHERE quote_of IS NOT NULL),
		(SELECT count(*) FROM posts q JOIN posts p ON p.id = q.quote_of WHERE p.deleted AND NOT q.deleted)`, thr).Scan(
		&share.reposts, &share.celebReposts, &share.unreposts, &share.twice, &share.ofDeleted, &share.likes, &share.unlikes,
		&share.replies, &share.selfReplies, &share.quotes, &share.quotesOfDeleted)
	if err != nil {
		o.fatalf("count shares: %v", err)
	}
	o.t.Logf("coverage: %+v", share)
	for _, c := range []struct {
		what string
		n    int64
	}{{"reposts", share.reposts}, {"reposts by celebrities", share.celebReposts}, {"undone reposts", share.unreposts},
		{"originals reposted twice", share.twice}, {"reposts of deleted originals", share.ofDeleted}, {"likes", share.likes},
		{"unlikes", share.unlikes}, {"replies to others", share.replies}, {"self-replies", share.selfReplies},
		{"quotes", share.quotes}, {"quotes of deleted posts", share.quotesOfDeleted}} {
		if c.n == 0 {
			o.errorf("coverage: the run produced no %s", c.what)
		}
	}
	o.t.Logf("coverage: %d celebrities at the end, %d upward and %d downward crossings (%d authors stayed below), %d posts by celebrities (pulled); before the oracle's reads: %d built inboxes, %d inboxes with a floor, %d timelines with a floor",
		celebs, up, down, stayedDown, pulled, built, floors, timelineFloors)
	for _, c := range []struct {
		what string
		n    int64
	}{
		{"celebrities at the end", celebs}, {"upward crossings", up}, {"downward crossings", down}, {"authors below the threshold after a downward crossing", stayedDown},
		{"posts by celebrities", pulled}, {"built (warm) inboxes", int64(built)},
		{"inboxes trimmed below a floor", int64(floors)}, {"timelines trimmed below a floor", int64(timelineFloors)},
	} {
		if c.n == 0 {
			o.errorf("the workload exercised no %s: make it bigger or more skewed", c.what)
		}
	}
	if int64(built) == int64(len(o.wd.users)) {
		o.errorf("every inbox was warm before the oracle read: the cold path at the end was not exercised")
	}
}

// explainIDs writes the packed ids of s (8 bytes big-endian each).
func (o *oracle) explainIDs(b *strings.Builder, s string) {
	for i := 0; i+8 <= len(s); i += 8 {
		id := int64(binary.BigEndian.Uint64([]byte(s[i : i+8])))
		if tp, known := o.Posts[id]; known {
			fmt.Fprintf(b, " %d(a%d%s)", id, tp.Author, map[bool]string{true: ",deleted"}[tp.Deleted])
		} else {
			fmt.Fprintf(b, " %d(unknown)", id)
		}
	}
}

func (o *oracle) inboxSentinels(users []int64) (floors, built int) {
	ctx := o.ctx()
	// the header, the sealed string's last 8 bytes: built, has floor
	pipe := o.s.Redis.Pipeline()
	hs := make([]*redis.StringCmd, len(users))
	for i, u := range users {
		hs[i] = pipe.GetRange(ctx, homefeed.Key(o.s.Keys, u), -8, -1)
	}
	_, _ = pipe.Exec(ctx)
	for _, h := range hs {
		if v := h.Val(); len(v) == 8 {
			if v[1] == 1 {
				floors++
			}
			if v[0] == 1 {
				built++
			}
		}
	}
	return floors, built
}

// coverageAfter checks that the oracle's reads went through the read
// side's sources: Redis, PostgreSQL below a floor, and cold inboxes.
func (o *oracle) coverageAfter() {
	m := o.s.Feed.Metrics()
	get := func(query, source string) float64 {
		var d dto.Metric
		_ = m.Sources.WithLabelValues(query, source).Write(&d)
		return d.GetCounter().GetValue()
	}
	rebuilds := func(result string) (sum float64) {
		for _, model := range []string{"inbox", "following", "timeline", "celebrities"} {
			var d dto.Metric
			_ = m.Rebuilds.WithLabelValues(model, result).Write(&d)
			sum += d.GetCounter().GetValue()
		}
		return sum
	}
	o.t.Logf("read side: home pages by source redis %.0f, pg %.0f, cold %.0f; author pages redis %.0f, pg %.0f, cold %.0f; rebuilds ok %.0f, error %.0f, deferred %.0f",
		get("home", "redis"), get("home", "pg"), get("home", "cold"), get("author", "redis"), get("author", "pg"), get("author", "cold"),
		rebuilds("ok"), rebuilds("error"), rebuilds("deferred"))
	for _, src := range []string{"redis", "pg", "cold"} {
		if get("home", src) == 0 {
			o.errorf("no home page was served from source %q: that path is untested", src)
		}
	}
	if v := rebuilds("error"); v > 0 {
		o.errorf("%.0f rebuilds failed", v)
	}
}

// keysBalanced checks that the read models' keys under prefix are on
// every master of the cluster, each node within ±50% of the mean: hash
// tags of one account per key family spread the accounts over the slots
// (a tag shared by every key would put them all on one node). The band is
// wide because the small run has a few hundred keys; `feed status` shows
// the same counts on a live system.
func keysBalanced(t *testing.T, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	nodes, err := readmodel.CountKeys(context.Background(), rdb, prefix)
	if err != nil {
		t.Fatalf("count keys per node: %v", err)
	}
	var total int64
	for _, n := range nodes {
		total += n.Keys
	}
	t.Logf("keys per node: %v (total %d)", nodes, total)
	if len(nodes) < 2 || total == 0 {
		t.Fatalf("keys per node %v: want a cluster of several masters holding the read models", nodes)
	}
	mean := float64(total) / float64(len(nodes))
	for _, n := range nodes {
		if d := float64(n.Keys)/mean - 1; d > 0.5 || d < -0.5 {
			t.Errorf("node %s holds %d of %d keys (%.0f%% off the mean %.0f)", n.Addr, n.Keys, total, 100*d, mean)
		}
	}
}
