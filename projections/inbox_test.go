package projections_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// With sampled trims (plain ZADDs, the script for one push in every few),
// an inbox that receives many posts stays between InboxMax - slack (what a
// trim keeps) and InboxMax - slack + band (where trims start; InboxMax
// when the band is the slack) plus the sampling overshoot, is trimmed only
// when over that, keeps exactly the newest posts, and its floor lies below
// them.
func TestSampledTrimsBoundInbox(t *testing.T) {
	t.Parallel()
	for _, band := range []int{0, 4} {
		t.Run(fmt.Sprintf("band-%d", band), func(t *testing.T) {
			t.Parallel()
			testSampledTrimsBoundInbox(t, band)
		})
	}
}

func testSampledTrimsBoundInbox(t *testing.T, band int) {
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	author, fan := w.user(true), w.user(true)
	w.follow(fan, author)
	const max, slack, every = 20, 8, 4
	// The sampled trims are the sorted set's (the packed layout trims at its merges).
	cfg := projections.Config{Keys: keys, InboxMax: max, InboxTrimSlack: slack, InboxTrimEvery: every, InboxTrimBand: band, BackfillPosts: 3,
		InboxLayout: readmodel.InboxLayoutZset}
	over := max - slack + band // where trims start
	if band == 0 {
		over = max
	}
	ps := newProjectors(t, w, rd.Client, cfg)
	applyAll(t, ps, w.envs) // the follow first: a later one would backfill and raise the floor
	w.envs = nil
	var posts []int64
	for i := 0; i < 300; i++ {
		posts = append(posts, w.post(author))
	}
	// One post at a time, to see every size the inbox passes through.
	lo, hi, trims := 1<<30, 0, 0
	last, lastCard := 0, 0
	for i, env := range w.envs {
		applyAll(t, ps, w.envs[i:i+1])
		ids, floor, built := zview(t, rd.Client, keys.Inbox(fan))
		n := len(ids)
		if n < last {
			trims++
			if n != max-slack {
				t.Fatalf("post %d (%v): a trim left %d posts, want %d: %s", i, env.Type, n, max-slack, fmtView(ids, floor, false))
			}
		}
		// A push trims exactly when it is sampled and finds the inbox
		// over where trims start (its ZCARD counted against the start
		// plus both sentinels, present or not: never early).
		if trim := projections.Sampled(posts[i], fan, every) && lastCard+1 > over+2; trim != (n < last) {
			t.Fatalf("post %d: %d posts before the push, %d after; want a trim: %v (start over %d)", i, last, n, trim, over)
		}
		lastCard = n
		if !math.IsNaN(floor) {
			lastCard++
		}
		if built {
			lastCard++
		}
		if trims > 0 && n < lo {
			lo = n
		}
		if n > hi {
			hi = n
		}
		last = n
	}
	// Between two sampled scripts an inbox grows by a geometric number of
	// pushes (mean every); 40 more than where trims start has odds of
	// (3/4)^40.
	if trims == 0 || lo < max-slack || hi > over+40 {
		t.Fatalf("%d trims; after the first the inbox held %d..%d posts, want %d..%d", trims, lo, hi, max-slack, over+40)
	}
	ids, floor, _ := zview(t, rd.Client, keys.Inbox(fan))
	for i := range ids {
		if want := idstr(posts[len(posts)-1-i]); ids[i] != want {
			t.Fatalf("entry %d is %s, want %s (the newest posts)", i, ids[i], want)
		}
	}
	if math.IsNaN(floor) {
		t.Fatal("no ~floor after trims")
	}
	// The floor is the score of the newest post cut: the one after the kept.
	if want := rd.Client.ZScore(context.Background(), keys.Inbox(fan), ids[len(ids)-1]).Val() - 1; floor > want {
		t.Errorf("floor %v above the next older post's score %v", floor, want)
	}
	// In-order pushes are never late: nothing lies at or below the floor.
	lowest := rd.Client.ZScore(context.Background(), keys.Inbox(fan), ids[len(ids)-1]).Val()
	if lowest <= floor {
		t.Errorf("lowest entry %v at or below the floor %v", lowest, floor)
	}
}

// The exact path (InboxTrimEvery 1: the bounded-add script on every push)
// and follow backfills trim by the same rule as the hot path: when an
// inbox goes over InboxMax - slack + band (InboxMax when the band is the
// slack), back to its newest InboxMax - slack posts.
func TestScriptTrimsFollowTheBoundRule(t *testing.T) {
	t.Parallel()
	for _, band := range []int{0, 2} {
		t.Run(fmt.Sprintf("band-%d", band), func(t *testing.T) {
			t.Parallel()
			testScriptTrimsFollowTheBoundRule(t, band)
		})
	}
}

func testScriptTrimsFollowTheBoundRule(t *testing.T, band int) {
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	keys := readmodel.Keys{Prefix: rd.Prefix}
	author, other, fan := w.user(true), w.user(true), w.user(true)
	w.follow(fan, author)
	const max, slack = 10, 4
	exact := projections.Config{Keys: keys, InboxMax: max, InboxTrimSlack: slack, InboxTrimEvery: 1, InboxTrimBand: band, BackfillPosts: 3,
		InboxLayout: readmodel.InboxLayoutZset}
	over := max - slack + band
	if band == 0 {
		over = max
	}
	ps := newProjectors(t, w, rd.Client, exact)
	applyAll(t, ps, w.envs)
	w.envs = nil
	var posts []int64
	for i := 0; i < 23; i++ {
		posts = append(posts, w.post(author))
	}
	k := keys.Inbox(fan)
	for i := range w.envs {
		applyAll(t, ps, w.envs[i:i+1])
		// Band 0 (the slack): pushes 1..10 fit; push 11 trims to 6; then
		// 7..10, 6, ... Band 2: 1..8 fit, push 9 trims to 6, then 7, 8, 6, ...
		want := i + 1
		if want > over {
			want = max - slack + (want-over-1)%(over-(max-slack)+1)
		}
		ids, floor, _ := zview(t, rd.Client, k)
		if len(ids) != want {
			t.Fatalf("after push %d: %d posts, want %d", i+1, len(ids), want)
		}
		if ids[0] != idstr(posts[i]) || ids[len(ids)-1] != idstr(posts[i+1-want]) {
			t.Fatalf("after push %d: not the newest %d posts: %s", i+1, want, fmtView(ids, floor, false))
		}
	}
	// The inbox holds 8 posts (band 0: push 21 trimmed it to 6, then 22 and
	// 23; band 2: push 21 did, too). A follow of another author with 3
	// posts backfills them: 11 is over the start, so back to the newest 6.
	w.envs = nil
	for i := 0; i < 3; i++ {
		w.post(other)
	}
	// Sampled pushes, but the follow's backfill goes through the script.
	sampled := exact
	sampled.InboxTrimEvery = 16
	ps = newProjectors(t, w, rd.Client, sampled)
	applyAll(t, ps, w.envs) // posts by other: fan does not follow yet
	w.envs = nil
	w.follow(fan, other)
	applyAll(t, ps, w.envs)
	ids, floor, _ := zview(t, rd.Client, k)
	if len(ids) != max-slack {
		t.Fatalf("after the backfill: %s, want the newest %d", fmtView(ids, floor, false), max-slack)
	}
	for _, id := range ids {
		if sc := rd.Client.ZScore(ctx, k, id).Val(); sc <= floor {
			t.Fatalf("%s at %v, not above the floor %v", id, sc, floor)
		}
	}
}

// A plain ZADD does not check the floor: a late push lands at or below it,
// where readers never look, and the next script run removes it.
func TestLatePushBelowFloorIsRemovedByNextScript(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	keys := readmodel.Keys{Prefix: rd.Prefix}
	author, fan := w.user(true), w.user(true)
	w.follow(fan, author)
	w.envs = w.envs[:0]
	late := w.post(author)
	lateEnvs := w.envs
	w.envs = nil
	k := keys.Inbox(fan)
	floor := float64(w.clock.UnixMilli() + 1000)
	rd.Client.ZAdd(ctx, k, redis.Z{Score: floor, Member: readmodel.SentinelFloor}, redis.Z{Score: math.Inf(1), Member: readmodel.SentinelBuilt})

	// Sampling practically never: the push is a plain ZADD.
	// The sorted set's plain ZADD (a packed push is an APPEND, and
	// packedMergeScript drops what lies at or below the floor).
	never := projections.Config{Keys: keys, InboxTrimEvery: math.MaxInt32, InboxLayout: readmodel.InboxLayoutZset}
	applyAll(t, newProjectors(t, w, rd.Client, never), lateEnvs)
	if rd.Client.ZScore(ctx, k, idstr(late)).Err() != nil {
		t.Fatalf("the plain ZADD did not land (test premise)")
	}
	// The next script run (here: every push runs it) removes it.
	w.clock = w.clock.Add(2 * time.Second)
	fresh := w.post(author)
	applyAll(t, newProjectors(t, w, rd.Client, projections.Config{Keys: keys, InboxTrimEvery: 1, InboxLayout: readmodel.InboxLayoutZset}), w.envs)
	ids, f, built := zview(t, rd.Client, k)
	if want := []string{idstr(fresh)}; len(ids) != 1 || ids[0] != want[0] || f != floor || !built {
		t.Errorf("inbox %s, want %v floor=%v built=true", fmtView(ids, f, built), want, floor)
	}
}

// Inboxes the projector creates get a TTL: in the sorted set at the
// first push when the follower is past the inbox TTL (InactiveAfter minus
// the margin), else at the first sampled push; in the packed layout the
// buffer at its creation and the sealed string at its first merge. A TTL
// already set (by the query side) is kept.
func TestProjectorInboxTTL(t *testing.T) { eachLayout(t, testProjectorInboxTTL) }

func testProjectorInboxTTL(t *testing.T, layout string) {
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	keys := readmodel.Keys{Prefix: rd.Prefix}
	author, plain, expiring, kept := w.user(true), w.user(true), w.user(true), w.user(true)
	for _, u := range []int64{plain, expiring, kept} {
		w.follow(u, author)
	}
	const inactive, margin = 48 * time.Hour, 2 * time.Hour
	// Seen 47 h ago: still active (pushed), but past the 46 h inbox TTL.
	w.exec(`UPDATE user_activity SET last_seen_at = now() - interval '47 hours' WHERE user_id = $1`, expiring)
	if layout == readmodel.InboxLayoutPacked {
		rd.Client.Set(ctx, keys.PackedInbox(kept), string(make([]byte, 8)), 100*time.Second) // an empty sealed string
	} else {
		rd.Client.ZAdd(ctx, keys.Inbox(kept), redis.Z{Score: 1, Member: "1"})
		rd.Client.Expire(ctx, keys.Inbox(kept), 100*time.Second)
	}
	setup := len(w.envs)
	cfg := projections.Config{Keys: keys, InactiveAfter: inactive, InboxTTLMargin: margin, InboxTrimEvery: 8, InboxLayout: layout}
	ps := newProjectors(t, w, rd.Client, cfg)
	applyAll(t, ps, w.envs[:setup])
	// Follows of a non-celebrity backfill nothing here (no posts yet).
	first := w.post(author)
	applyAll(t, ps, w.envs[setup:])
	if ttl := inboxTTL(t, rd.Client, keys, layout, expiring); ttl <= 0 || ttl > inactive-margin {
		t.Errorf("expiring follower's inbox TTL after one push: %v, want in (0, %v]", ttl, inactive-margin)
	}
	// 150 more posts: the odds that none of them is sampled for plain are
	// (7/8)^150; a packed inbox merges twice.
	n := len(w.envs)
	for i := 0; i < 150; i++ {
		w.post(author)
	}
	applyAll(t, ps, w.envs[n:])
	if ttl := inboxTTL(t, rd.Client, keys, layout, plain); ttl <= inactive-margin-time.Minute || ttl > inactive-margin {
		t.Errorf("projector-created inbox TTL: %v, want about %v", ttl, inactive-margin)
	}
	if ttl := inboxTTL(t, rd.Client, keys, layout, kept); ttl <= 0 || ttl > 100*time.Second {
		t.Errorf("an existing TTL was changed to %v, want at most 100s", ttl)
	}
	if ids, _, _ := inboxView(t, rd.Client, keys, layout, plain); !slices.Contains(ids, idstr(first)) {
		t.Errorf("the first post is missing from the plain follower's inbox")
	}
}

// pipeGauge is a go-redis hook that records the most pipelines holding a
// push (a sorted set's ZADD, a packed inbox's APPEND) in flight at once.
type pipeGauge struct {
	mu       sync.Mutex
	cur, max int
}

func (*pipeGauge) DialHook(next redis.DialHook) redis.DialHook { return next }
func (*pipeGauge) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (g *pipeGauge) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		fanout := false
		for _, c := range cmds {
			if strings.EqualFold(c.Name(), "zadd") || strings.EqualFold(c.Name(), "append") {
				fanout = true
				break
			}
		}
		if !fanout {
			return next(ctx, cmds)
		}
		g.mu.Lock()
		g.cur++
		g.max = max(g.max, g.cur)
		g.mu.Unlock()
		time.Sleep(2 * time.Millisecond) // widen the window in which pipelines overlap
		err := next(ctx, cmds)
		g.mu.Lock()
		g.cur--
		g.mu.Unlock()
		return err
	}
}

// TestFanoutInflightBound: posts of several authors applied at once (as
// partitions are), each fanned out in several pages with FanoutParallel
// pages at a time, never have more than FanoutInflight fan-out pipelines
// in flight together, and every follower still gets every post.
func TestFanoutInflightBound(t *testing.T) { eachLayout(t, testFanoutInflightBound) }

func testFanoutInflightBound(t *testing.T, layout string) {
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	const authors, fans, inflight = 6, 40, 2
	var as, fs []int64
	for range authors {
		as = append(as, w.user(true))
	}
	for range fans {
		f := w.user(true)
		fs = append(fs, f)
		for _, a := range as {
			w.follow(f, a)
		}
	}
	cfg := projections.Config{Keys: keys, FanoutBatch: 8, FanoutParallel: 4, FanoutInflight: inflight, InboxLayout: layout}
	g := &pipeGauge{}
	rdb, err := testenv.OpenRedis()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(g)
	ps := newProjectors(t, w, rdb, cfg)
	applyAll(t, ps, w.envs)
	w.envs = nil
	var posts []int64
	for _, a := range as {
		posts = append(posts, w.post(a))
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(w.envs))
	for _, env := range w.envs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- projections.Apply(context.Background(), ps, env)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if g.max > inflight {
		t.Errorf("%d fan-out pipelines in flight at once, want at most %d", g.max, inflight)
	}
	if g.max == 0 {
		t.Fatal("no fan-out pipeline seen")
	}
	for _, f := range fs {
		ids, _, _ := inboxView(t, rd.Client, keys, layout, f)
		if len(ids) != len(posts) {
			t.Fatalf("follower %d has %d posts, want %d", f, len(ids), len(posts))
		}
	}
}
