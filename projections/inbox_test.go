package projections_test

import (
	"context"
	"slices"
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

// Inboxes the projector creates get a TTL: the buffer at its creation
// (at once when the follower is past the inbox TTL, InactiveAfter minus
// the margin) and the sealed string at its first merge. A TTL already set
// (by the query side) is kept.
func TestProjectorInboxTTL(t *testing.T) {
	t.Parallel()
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
	rd.Client.Set(ctx, homefeed.Key(keys, kept), string(make([]byte, 8)), 100*time.Second) // an empty sealed string
	setup := len(w.envs)
	cfg := projections.Config{Keys: keys, InactiveAfter: inactive, InboxTTLMargin: margin, InboxTrimEvery: 8}
	ps := newProjectors(t, w, rd.Client, cfg)
	applyAll(t, ps, w.envs[:setup])
	// Follows of a non-celebrity backfill nothing here (no posts yet).
	first := w.post(author)
	applyAll(t, ps, w.envs[setup:])
	if ttl := inboxTTL(t, rd.Client, keys, expiring); ttl <= 0 || ttl > inactive-margin {
		t.Errorf("expiring follower's inbox TTL after one push: %v, want in (0, %v]", ttl, inactive-margin)
	}
	// 150 more posts: the inbox merges twice.
	n := len(w.envs)
	for i := 0; i < 150; i++ {
		w.post(author)
	}
	applyAll(t, ps, w.envs[n:])
	if ttl := inboxTTL(t, rd.Client, keys, plain); ttl <= inactive-margin-time.Minute || ttl > inactive-margin {
		t.Errorf("projector-created inbox TTL: %v, want about %v", ttl, inactive-margin)
	}
	if ttl := inboxTTL(t, rd.Client, keys, kept); ttl <= 0 || ttl > 100*time.Second {
		t.Errorf("an existing TTL was changed to %v, want at most 100s", ttl)
	}
	if ids, _, _ := inboxView(t, rd.Client, keys, plain); !slices.Contains(ids, idstr(first)) {
		t.Errorf("the first post is missing from the plain follower's inbox")
	}
}

// pipeGauge is a go-redis hook that records the most pipelines holding a
// push (an APPEND) in flight at once.
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
func TestFanoutInflightBound(t *testing.T) {
	t.Parallel()
	testFanoutInflightBound(t)
}

func testFanoutInflightBound(t *testing.T) {
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
	cfg := projections.Config{Keys: keys, FanoutBatch: 8, FanoutParallel: 4, FanoutInflight: inflight}
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
		ids, _, _ := inboxView(t, rd.Client, keys, f)
		if len(ids) != len(posts) {
			t.Fatalf("follower %d has %d posts, want %d", f, len(ids), len(posts))
		}
	}
}
