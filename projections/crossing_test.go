package projections_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// A downward celebrity crossing is two steps in two groups: the followers
// projector removes the author from the celebrity set and records it as
// leaving, the inbox projector backfills every active follower and then
// records the crossing as backfilled. Between the two (the inbox group
// behind, or crashed in the middle of the backfill) the crossing is
// pending, which the query side bridges by pulling the author. This
// checks the records at every step: the crash in the middle of the
// backfill (nothing recorded, then the redelivery finishes and records),
// the redelivery of either side (no change), a move back in (the leaving
// entry goes) and the old unfollow applied late after it (ignored), and a
// late backfill of an older crossing (never lowers the record).
func TestCrossingDownRecords(t *testing.T) {
	t.Parallel()
	testCrossingDownRecords(t)
}

// failPipelines fails, while armed, every pipeline that runs a script
// (the backfill's writes) after the first `allow`.
type failPipelines struct {
	armed atomic.Bool
	allow atomic.Int64
}

func (*failPipelines) DialHook(next redis.DialHook) redis.DialHook { return next }
func (*failPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *failPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.Load() && slices.ContainsFunc(cmds, isScript) && h.allow.Add(-1) < 0 {
			return errors.New("injected: Redis gone in the middle of the backfill")
		}
		return next(ctx, cmds)
	}
}

func isScript(c redis.Cmder) bool { return c.Name() == "evalsha" || c.Name() == "eval" }

func testCrossingDownRecords(t *testing.T) {
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	hook := &failPipelines{}
	rd.Client.AddHook(hook)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	cfg := projections.Config{Keys: keys, CelebrityThreshold: 3, FanoutBatch: 1}
	ps := newProjectors(t, w, rd.Client, cfg)
	var followers, inbox []projections.Projector
	for _, p := range ps {
		switch p.Name() {
		case projections.NameInbox:
			inbox = append(inbox, p)
		case projections.NameFollowers:
			followers = append(followers, p)
		}
	}
	ctx := context.Background()
	celebs := readmodel.NewCelebrities(keys)
	leaving := func() map[string]string {
		t.Helper()
		lv, err := celebs.Leaving(ctx, rd.Client)
		if err != nil {
			t.Fatal(err)
		}
		return lv
	}
	backfilled := func() map[string]string {
		t.Helper()
		return rd.Client.HGetAll(ctx, keys.InboxBackfilled()).Val()
	}
	pending := func() []int64 {
		t.Helper()
		var ids []int64
		for _, c := range readmodel.Pending(leaving(), backfilled()) {
			ids = append(ids, c.ID)
		}
		return ids
	}
	apply := func(to []projections.Projector, envs ...events.Envelope) error {
		for _, e := range envs {
			if err := projections.Apply(ctx, to, e); err != nil {
				return err
			}
		}
		return nil
	}
	mustApply := func(to []projections.Projector, envs ...events.Envelope) {
		t.Helper()
		if err := apply(to, envs...); err != nil {
			t.Fatal(err)
		}
	}
	has := func(u, post int64) bool {
		t.Helper()
		ids, _, _ := inboxView(t, rd.Client, keys, u)
		return slices.Contains(ids, idstr(post))
	}
	order := func(e events.Envelope) string { return string(readmodel.OrderOf(e.CommitLSN, e.Position)) }

	star, bob, cat, dan := w.user(true), w.user(true), w.user(true), w.user(true)
	w.follow(bob, star)
	w.follow(cat, star)
	w.follow(dan, star) // 3: a celebrity
	mustApply(ps, w.envs...)
	w.envs = w.envs[:0]
	s1 := w.post(star) // pulled, never pushed
	mustApply(ps, w.envs...)
	w.envs = w.envs[:0]
	if !rd.Client.SIsMember(ctx, keys.Celebrities(), idstr(star)).Val() || has(bob, s1) {
		t.Fatalf("star is not a pulled celebrity before the crossing: member %v, bob has s1 %v", rd.Client.SIsMember(ctx, keys.Celebrities(), idstr(star)).Val(), has(bob, s1))
	}

	w.unfollow(dan, star) // 2: the downward crossing
	down := w.envs[len(w.envs)-1]
	w.envs = w.envs[:0]
	mustApply(followers, down)
	if rd.Client.SIsMember(ctx, keys.Celebrities(), idstr(star)).Val() {
		t.Fatal("star still in the celebrity set after the crossing")
	}
	if got := leaving()[idstr(star)]; got != order(down) {
		t.Fatalf("leaving entry %q, want the crossing's order %q", got, order(down))
	}
	mustApply(followers, down) // redelivery
	if got := leaving()[idstr(star)]; got != order(down) {
		t.Fatalf("leaving entry after the redelivery %q, want %q", got, order(down))
	}
	if got := pending(); !slices.Equal(got, []int64{star}) {
		t.Fatalf("pending with the inbox group behind: %v, want [%d]", got, star)
	}

	// The inbox projector fails after the first follower's page: nothing
	// recorded, the pull stays on.
	hook.allow.Store(1)
	hook.armed.Store(true)
	if err := apply(inbox, down); err == nil {
		t.Fatal("backfill with Redis failing in the middle: no error")
	}
	hook.armed.Store(false)
	if bob, cat := has(bob, s1), has(cat, s1); bob == cat {
		t.Fatalf("the injected failure did not cut the backfill in the middle: bob has s1 %v, cat %v", bob, cat)
	}
	if got := pending(); !slices.Equal(got, []int64{star}) {
		t.Fatalf("pending after a backfill cut in the middle: %v, want [%d]", got, star)
	}
	mustApply(inbox, down) // the redelivery finishes it
	if !has(bob, s1) || !has(cat, s1) || has(dan, s1) {
		t.Fatalf("after the backfill: bob %v, cat %v, dan %v; want s1 for bob and cat only", has(bob, s1), has(cat, s1), has(dan, s1))
	}
	if got := backfilled()[idstr(star)]; got != order(down) {
		t.Fatalf("backfilled %q, want %q", got, order(down))
	}
	if got := pending(); len(got) != 0 {
		t.Fatalf("pending after the backfill: %v", got)
	}
	mustApply(inbox, down) // redelivery after the record
	if got := backfilled()[idstr(star)]; got != order(down) || len(pending()) != 0 {
		t.Fatalf("after a redelivery: backfilled %q, pending %v", got, pending())
	}

	// Back in: the leaving entry goes; the old unfollow applied late
	// (another instance, after its partition moved) changes nothing.
	w.follow(dan, star)
	up := w.envs[len(w.envs)-1]
	w.envs = w.envs[:0]
	mustApply(ps, up)
	mustApply(followers, down)
	if !rd.Client.SIsMember(ctx, keys.Celebrities(), idstr(star)).Val() {
		t.Fatal("a late unfollow undid the newer move back in")
	}
	if lv := leaving(); len(lv) != 0 {
		t.Fatalf("leaving after the move back in: %v", lv)
	}

	// A second crossing, backfilled; then the first one's backfill again,
	// late: the record keeps the newer crossing.
	w.unfollow(dan, star)
	down2 := w.envs[len(w.envs)-1]
	w.envs = w.envs[:0]
	mustApply(followers, down2)
	if got := pending(); !slices.Equal(got, []int64{star}) {
		t.Fatalf("pending at the second crossing: %v, want [%d] (the first one's record must not cover it)", got, star)
	}
	mustApply(inbox, down2)
	mustApply(inbox, down)
	if got := backfilled()[idstr(star)]; got != order(down2) {
		t.Fatalf("backfilled after a late backfill of the older crossing: %q, want %q", got, order(down2))
	}
	if got := pending(); len(got) != 0 {
		t.Fatalf("pending after the second backfill: %v", got)
	}
}

// A new inbox version built after a downward crossing holds the author's
// posts (its snapshot sees the crossing's event), so the build records
// the crossings the followers version had recorded as leaving before it
// as backfilled in the new version: nothing stays pending on it.
func TestInboxBuildRecordsCrossings(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	live := readmodel.Keys{Prefix: rd.Prefix}
	cfg := projections.Config{Keys: live, CelebrityThreshold: 3}
	ps := newProjectors(t, w, rd.Client, cfg)
	star, bob, cat, dan := w.user(true), w.user(true), w.user(true), w.user(true)
	w.follow(bob, star)
	w.follow(cat, star)
	w.follow(dan, star)
	applyAll(t, ps, w.envs)
	w.envs = w.envs[:0]
	s1 := w.post(star)
	w.unfollow(dan, star) // the crossing
	down := w.envs[len(w.envs)-1]
	var followers []projections.Projector
	for _, p := range ps {
		if p.Name() == projections.NameFollowers {
			followers = append(followers, p)
		}
	}
	applyAll(t, followers, w.envs) // the live inbox group is behind
	ctx := context.Background()
	lv, err := readmodel.NewCelebrities(live).Leaving(ctx, rd.Client)
	if err != nil {
		t.Fatal(err)
	}
	if lv[idstr(star)] != string(readmodel.OrderOf(down.CommitLSN, down.Position)) {
		t.Fatalf("leaving %v after the crossing", lv)
	}

	built := readmodel.Keys{Prefix: rd.Prefix, Versions: readmodel.Versions{}.With(readmodel.ProjectionInbox, 2)}
	buildInboxesAt(t, w, rd.Client, cfg, built)
	if ids, _, _ := inboxView(t, rd.Client, built, bob); !slices.Contains(ids, idstr(s1)) {
		t.Fatalf("built inbox of bob %v without the star's post %d", ids, s1)
	}
	bf := rd.Client.HGetAll(ctx, built.InboxBackfilled()).Val()
	if got := readmodel.Pending(lv, bf); len(got) != 0 {
		t.Fatalf("pending on the built version: %v (backfilled %v)", got, bf)
	}
	if got := readmodel.Pending(lv, rd.Client.HGetAll(ctx, live.InboxBackfilled()).Val()); len(got) != 1 {
		t.Fatalf("pending on the live version, whose group is behind: %v, want the star", got)
	}
}
