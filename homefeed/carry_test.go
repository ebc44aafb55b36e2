package homefeed

import (
	"context"
	"github.com/feedco/feed/readmodel"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/testkit/testenv"
)

// pipelineCounter counts the pipelines a client sends, but for the set-up
// of its connections (HELLO, CLIENT SETINFO, ...).
type pipelineCounter struct{ n atomic.Int64 }

func (*pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (*pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (c *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		switch cmds[0].Name() {
		case "hello", "client", "auth", "select":
		default:
			c.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// ownClient is a client of its own on the test's Redis (hooks added to it
// do not reach other tests); nil on a cluster.
func ownClient(t *testing.T, rd *testenv.Redis) *redis.Client {
	t.Helper()
	c, ok := rd.Client.(*redis.Client)
	if !ok {
		t.Skip("counts the pipelines of a single-node client")
	}
	own := redis.NewClient(c.Options())
	t.Cleanup(func() { _ = own.Close() })
	return own
}

// newTestFollowUps is a carrier whose timer does not fire within a test:
// what it carries runs on the next push or the test's FlushFollowUps.
func newTestFollowUps() *FollowUps {
	c := NewFollowUps()
	c.after = time.Hour
	return c
}

// bufferState reports, for every user, the buffer's length in ids and
// whether it has a TTL (true when there is no buffer).
func bufferState(t *testing.T, ctx context.Context, rdb redis.UniversalClient, m Inboxes, users []int64) (maxIDs int64, allTTL bool) {
	t.Helper()
	allTTL = true
	for _, u := range users {
		_, b := m.Keys(u)
		n := rdb.StrLen(ctx, b).Val() / 8
		maxIDs = max(maxIDs, n)
		if n > 0 && rdb.TTL(ctx, b).Val() <= 0 {
			allTTL = false
		}
	}
	return maxIDs, allTTL
}

// A run of pushes through PushCarried, redeliveries and out-of-order ids
// included, ends (once flushed) in the inboxes PushAll's three pipelines a
// push give: the same posts, every buffer under MergeAt ids and with
// its TTL. And each push is one pipeline.
func TestPackedPushCarriedMatchesPushAll(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	own := ownClient(t, rd)
	var count pipelineCounter
	own.AddHook(&count)
	all := NewInboxes(readmodel.Keys{Prefix: rd.Prefix + "all:"}, readmodel.Policy{InboxMax: 200})
	car := NewInboxes(readmodel.Keys{Prefix: rd.Prefix + "car:"}, readmodel.Policy{InboxMax: 200})
	c := newTestFollowUps() // every pipeline counted is a push's
	if err := loadScripts(ctx, rd.Client); err != nil {
		t.Fatal(err) // (a NOSCRIPT would make a push two pipelines)
	}
	users := []int64{1, 2, 3, 4, 5, 6, 7, 8}
	rng := rand.New(rand.NewPCG(3, 4))
	var sent []int64
	const pushes = 600
	for i := range pushes {
		post := snow(testBaseMs+int64(i)*3-int64(rng.IntN(40)), int64(i)) // mostly ascending, some late
		if i > 0 && rng.IntN(10) == 0 {
			post = sent[rng.IntN(len(sent))] // a redelivery
		}
		sent = append(sent, post)
		to := users[:2+rng.IntN(len(users)-1)]
		if _, err := all.PushAll(ctx, rd.Client, to, all.NewPush(post)); err != nil {
			t.Fatal(err)
		}
		if err := car.PushCarried(ctx, own, to, nil, car.NewPush(post), c); err != nil {
			t.Fatal(err)
		}
	}
	if got := count.n.Load(); got != pushes {
		t.Fatalf("%d pushes sent %d pipelines, want one each", pushes, got)
	}
	if c.Merges() == 0 {
		t.Fatal("no merge ran in the pushes' pipelines: the run did not exercise the carry")
	}
	if err := car.FlushFollowUps(ctx, own, c); err != nil {
		t.Fatal(err)
	}
	if c.Pending() != 0 {
		t.Fatalf("after the flush: %d follow-ups pending", c.Pending())
	}
	for _, u := range users {
		want, err := all.Posts(ctx, rd.Client, u)
		if err != nil {
			t.Fatal(err)
		}
		got, err := car.Posts(ctx, rd.Client, u)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("inbox %d: carried %d posts, PushAll %d", u, len(got), len(want))
		}
		if p, q := readPacked(t, ctx, rd.Client, car, u, readmodel.MaxScoreMs, 20), readPacked(t, ctx, rd.Client, all, u, readmodel.MaxScoreMs, 20); !slices.Equal(ids(p.Entries), ids(q.Entries)) {
			t.Fatalf("inbox %d: first pages differ: %v, %v", u, ids(p.Entries), ids(q.Entries))
		}
	}
	if n, ttl := bufferState(t, ctx, rd.Client, car, users); n >= MergeAt || !ttl {
		t.Fatalf("after the flush: a buffer of %d ids (want < %d), every buffer with a TTL: %v", n, MergeAt, ttl)
	}
}

// Pushes that stop leave nothing behind: the timer runs what they carried
// (the new buffer's TTL, the full buffer's merge) without another push.
func TestPackedFollowUpsFlushWhenIdle(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	m := NewInboxes(readmodel.Keys{Prefix: rd.Prefix}, readmodel.Policy{})
	c := NewFollowUps()
	for i := range MergeAt {
		if err := m.PushCarried(ctx, rd.Client, []int64{1}, nil, m.NewPush(snow(testBaseMs+int64(i), 1)), c); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.PushCarried(ctx, rd.Client, []int64{2}, nil, m.NewPush(snow(testBaseMs+500, 1)), c); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the carried follow-ups flushed and merged after the last push", func() bool {
		return c.Pending() == 0 && c.Merges() > 0
	})
	s, b := m.Keys(1)
	if rd.Client.Exists(ctx, b).Val() != 0 || rd.Client.StrLen(ctx, s).Val() != header+8*MergeAt {
		t.Fatal("inbox 1's full buffer was not merged")
	}
	if _, b := m.Keys(2); rd.Client.TTL(ctx, b).Val() <= 0 {
		t.Fatal("inbox 2's new buffer has no TTL")
	}
}

// The process dies between two pushes: what it carried is lost, and later
// pushes (another carrier, as after a restart) redo it: the buffer past
// MergeAt asks for its merge on its next APPEND, a new buffer's TTL
// on its second. Meanwhile every post stays readable.
func TestPackedFollowUpsLostWithTheProcess(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	m := NewInboxes(readmodel.Keys{Prefix: rd.Prefix}, readmodel.Policy{})
	dead := newTestFollowUps() // the process dies before its timer would fire
	var want []int64
	for i := range MergeAt + 3 {
		post := snow(testBaseMs+int64(i), 1)
		want = append(want, post)
		if err := m.PushCarried(ctx, rd.Client, []int64{1}, nil, m.NewPush(post), dead); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.PushCarried(ctx, rd.Client, []int64{2}, nil, m.NewPush(want[0]), dead); err != nil {
		t.Fatal(err)
	}
	if dead.Pending() == 0 {
		t.Fatal("nothing was carried when the process died")
	}
	slices.Reverse(want)
	if got, _ := m.Posts(ctx, rd.Client, 1); !slices.Equal(got, want) {
		t.Fatalf("inbox 1 before any merge: %d posts, want %d", len(got), len(want))
	}
	// After the restart.
	c := newTestFollowUps()
	next := snow(testBaseMs+1000, 1)
	want = append([]int64{next}, want...)
	for _, u := range []int64{1, 2} {
		if err := m.PushCarried(ctx, rd.Client, []int64{u}, nil, m.NewPush(next), c); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.FlushFollowUps(ctx, rd.Client, c); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Posts(ctx, rd.Client, 1); !slices.Equal(got, want) {
		t.Fatalf("inbox 1 after the restart: %d posts, want %d", len(got), len(want))
	}
	if n, ttl := bufferState(t, ctx, rd.Client, m, []int64{1, 2}); n >= MergeAt || !ttl {
		t.Fatalf("after the restart's push: a buffer of %d ids, every buffer with a TTL: %v", n, ttl)
	}
}

// A pipeline that fails puts back the follow-ups it took: the next push
// runs them.
func TestPackedFollowUpsFailedPipelineKeepsThem(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	m := NewInboxes(readmodel.Keys{Prefix: rd.Prefix}, readmodel.Policy{})
	c := newTestFollowUps()
	if err := m.PushCarried(ctx, rd.Client, []int64{1}, nil, m.NewPush(snow(testBaseMs, 1)), c); err != nil {
		t.Fatal(err)
	}
	if c.Pending() != 1 {
		t.Fatalf("%d follow-ups after a new buffer, want its TTL", c.Pending())
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := m.PushCarried(canceled, rd.Client, []int64{2}, nil, m.NewPush(snow(testBaseMs, 2)), c); err == nil {
		t.Fatal("a push on a canceled context succeeded")
	}
	if c.Pending() != 1 {
		t.Fatalf("%d follow-ups after the failed push, want the 1 it took back", c.Pending())
	}
	if err := m.PushCarried(ctx, rd.Client, []int64{3}, nil, m.NewPush(snow(testBaseMs, 3)), c); err != nil {
		t.Fatal(err)
	}
	if _, b := m.Keys(1); rd.Client.TTL(ctx, b).Val() <= 0 {
		t.Fatal("inbox 1's buffer has no TTL after the next push")
	}
}

// Concurrent pushes through one carrier (the projector's partitions) lose
// no post and leave every buffer merged once flushed.
func TestPackedFollowUpsConcurrentPushes(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	m := NewInboxes(readmodel.Keys{Prefix: rd.Prefix}, readmodel.Policy{InboxMax: 1000})
	c := newTestFollowUps()
	users := []int64{1, 2, 3, 4}
	const workers, each = 8, 100
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				post := snow(testBaseMs+int64(i), int64(w))
				if err := m.PushCarried(ctx, rd.Client, users, nil, m.NewPush(post), c); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := m.FlushFollowUps(ctx, rd.Client, c); err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		got, err := m.Posts(ctx, rd.Client, u)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != workers*each {
			t.Fatalf("inbox %d: %d posts, want %d", u, len(got), workers*each)
		}
	}
	if n, ttl := bufferState(t, ctx, rd.Client, m, users); n >= MergeAt || !ttl {
		t.Fatalf("a buffer of %d ids, every buffer with a TTL: %v", n, ttl)
	}
}

// A failed APPEND fails the push even when a carried read before it in the
// pipeline found its buffer gone (redis.Nil, which readmodel.Exec reports first).
func TestPackedPushCarriedReportsAFailedAppend(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	m := NewInboxes(readmodel.Keys{Prefix: rd.Prefix}, readmodel.Policy{})
	c := newTestFollowUps()
	c.read, c.pending[1] = []int64{1}, true // a read carried for inbox 1, whose buffer is gone
	_, b := m.Keys(2)
	if err := rd.Client.RPush(ctx, b, "x").Err(); err != nil { // inbox 2's buffer is not a string: APPEND fails
		t.Fatal(err)
	}
	if err := m.PushCarried(ctx, rd.Client, []int64{2}, nil, m.NewPush(snow(testBaseMs, 1)), c); err == nil {
		t.Fatal("a push whose APPEND failed (WRONGTYPE) succeeded")
	}
	if c.Pending() != 1 {
		t.Fatalf("%d follow-ups after the failed push, want the read it took back", c.Pending())
	}
}

// loadScripts loads this package's scripts and readmodel's.
func loadScripts(ctx context.Context, rdb redis.UniversalClient) error {
	if err := readmodel.LoadScripts(ctx, rdb); err != nil {
		return err
	}
	for _, s := range scripts {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return err
		}
	}
	return nil
}
