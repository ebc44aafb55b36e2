package projections_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/kafkatest"
	"github.com/feedco/feed/testkit/testenv"
)

// broken fails every event in bad while on is set: the cause of a poison
// that a fix removes (on cleared).
type broken struct {
	projections.Projector
	on  atomic.Bool
	bad map[string]bool
}

func (b *broken) Apply(ctx context.Context, env events.Envelope, ev events.Event) error {
	if b.on.Load() && b.bad[env.EventID] {
		return fmt.Errorf("broken on %s", env.EventID)
	}
	return b.Projector.Apply(ctx, env, ev)
}

// The poison queue's lifecycle through the real broker, PostgreSQL and
// Redis: two posts are poisoned in the inbox group,
// the first is deleted afterwards (the deletion is handled while the post
// is parked), and later posts go on. After the fix a replay that crashes
// between applying and recording leaves both pending; the next replay
// lands them: the inbox equals a projection of the same events in order
// (the deleted post absent, although its creation was applied after its
// deletion had been), each post once; replaying again, by id, changes
// nothing. A third poisoned record is discarded. Applying the old event
// alone, as republishing it would, resurrects the deleted post: the
// hazard the key's suffix avoids.
func TestPoisonReplayLandsOnceInKeyOrder(t *testing.T) {
	t.Parallel()
	testPoisonReplay(t)
}

func testPoisonReplay(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	b := kafkatest.Start(t)
	topic := b.Topic(t, 4)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	cfg := projections.Config{Keys: keys}
	ps, err := projections.New(cfg, w.db.Pool, rd.Client, nil, projections.NameInbox)
	if err != nil {
		t.Fatal(err)
	}
	inbox := &broken{Projector: ps[0], bad: map[string]bool{}}
	inbox.on.Store(true)

	r, err := projections.NewRunner(projections.RunnerConfig{Brokers: b.Addrs(), Topic: topic, GroupPrefix: topic + ".",
		Logger: quietLogger(), LagInterval: -1, RetryInitial: 5 * time.Millisecond, MaxRetries: 1}, inbox)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Go(t, "runner", r.Run)
	group := topic + "." + projections.GroupInbox

	// The follows first, handled before any post exists (a follow's
	// backfill reads the followee's posts from PostgreSQL).
	a, f, other := w.user(true), w.user(true), w.user(true)
	w.follow(f, a)
	w.follow(f, other)
	b.PublishEvents(t, topic, w.envs...)
	sent := len(w.envs)
	testenv.Eventually(t, 60*time.Second, "the follows handled", func() bool {
		lag, err := projections.ConsumerLag(ctx, b.Conn(), topic, []string{group})
		return err == nil && lag[group] == 0
	})
	p1 := w.post(a)
	inbox.bad[w.envs[len(w.envs)-1].EventID] = true
	p2 := w.post(a)
	inbox.bad[w.envs[len(w.envs)-1].EventID] = true
	w.del(a, p1)
	p3 := w.post(a)
	p4 := w.post(other)
	inbox.bad[w.envs[len(w.envs)-1].EventID] = true
	p5 := w.post(other)
	b.PublishEvents(t, topic, w.envs[sent:]...)

	q, err := projections.NewPoisonQueue(b.Conn(), topic, w.db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	view := func(k readmodel.Keys) []string {
		ids, _, _ := inboxView(t, rd.Client, k, f)
		return ids
	}
	// of a's posts, which the replay is about (the discarded p4 is not in
	// the live inbox, but a backfill of the oracle's would copy it).
	ofA := func(ids []string) []string {
		return slices.DeleteFunc(ids, func(id string) bool { return id != idstr(p1) && id != idstr(p2) && id != idstr(p3) })
	}
	testenv.Eventually(t, 60*time.Second, "three poisoned records and the posts after them", func() bool {
		es, err := q.List(ctx, group, false)
		return err == nil && len(es) == 3 && slices.Contains(view(keys), idstr(p3)) && slices.Contains(view(keys), idstr(p5))
	})
	if got := view(keys); slices.Contains(got, idstr(p2)) || slices.Contains(got, idstr(p4)) {
		t.Fatalf("poisoned posts in the inbox before the replay: %v", got)
	}
	es, err := q.List(ctx, "", false)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range es {
		if e.Group != group || e.State != projections.PoisonPending || e.Type != events.TypePostCreated || e.Position == 0 {
			t.Fatalf("entry %+v", e)
		}
		ids = append(ids, e.ID)
	}
	got, err := q.Get(ctx, ids[0])
	if err != nil || got.ID != ids[0] || got.Reason == "" {
		t.Fatalf("get %s: %+v, %v", ids[0], got, err)
	}
	if _, err := q.Get(ctx, "3:999"); !errors.Is(err, projections.ErrPoisonNotFound) {
		t.Fatalf("get of a missing id: %v", err)
	}

	// The third one (author other) is discarded.
	var third projections.PoisonEntry
	for _, e := range es {
		if e.Key == idstr(other) {
			third = e
		}
	}
	if d, err := q.Discard(ctx, projections.PoisonSelect{ID: third.ID}); err != nil || len(d) != 1 {
		t.Fatalf("discard: %v %v", d, err)
	}

	resolver := func(context.Context, string) (projections.Projector, error) { return inbox, nil }
	// Not fixed yet: the replay fails and nothing is recorded.
	res, err := q.Replay(ctx, projections.PoisonSelect{Group: group}, resolver)
	if err != nil || len(res) != 1 || res[0].Err == nil {
		t.Fatalf("replay before the fix: %+v, %v", res, err)
	}
	inbox.on.Store(false)

	// A crash between applying and recording: still pending, and the
	// next replay applies again.
	projections.SetPoisonAfterApply(q, func(string) error { return errors.New("crash") })
	if res, err := q.Replay(ctx, projections.PoisonSelect{Group: group}, resolver); err != nil || len(res) != 1 || res[0].Err == nil {
		t.Fatalf("crashing replay: %+v, %v", res, err)
	}
	if pend, _ := q.List(ctx, group, false); len(pend) != 2 {
		t.Fatalf("after the crash %d pending, want 2", len(pend))
	}
	projections.SetPoisonAfterApply(q, nil)
	res, err = q.Replay(ctx, projections.PoisonSelect{Group: group}, resolver)
	if err != nil || len(res) != 1 || res[0].Err != nil || len(res[0].Entries) != 2 {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	// p1, p2, the deletion and p3: the key's suffix from the first poison.
	if res[0].Applied != 4 {
		t.Fatalf("applied %d events, want 4", res[0].Applied)
	}

	// The oracle: the same events in order, into another namespace.
	clean := readmodel.Keys{Prefix: rd.Prefix + "clean:"}
	cps, err := projections.New(projections.Config{Keys: clean}, w.db.Pool, rd.Client, nil, projections.NameInbox)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range w.envs {
		if e.EventID == w.envs[len(w.envs)-2].EventID { // p4, discarded
			continue
		}
		if err := projections.Apply(ctx, cps, e); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{idstr(p3), idstr(p2)}
	if got := ofA(view(keys)); !slices.Equal(got, want) || !slices.Equal(ofA(view(clean)), want) {
		t.Fatalf("a's posts in the inbox after the replay %v, in order %v, want %v", got, ofA(view(clean)), want)
	}
	if got := view(keys); !slices.Contains(got, idstr(p5)) || slices.Contains(got, idstr(p4)) {
		t.Fatalf("inbox %v: want p5 (handled) and not p4 (discarded)", got)
	}
	counts, err := q.Counts(ctx)
	if err != nil || counts[group] != (projections.PoisonCounts{Replayed: 2, Discarded: 1}) {
		t.Fatalf("counts %+v, %v", counts, err)
	}
	if pend, _ := q.List(ctx, "", false); len(pend) != 0 {
		t.Fatalf("pending after the replay: %+v", pend)
	}

	// Safe to repeat: by id, in any state.
	keep := readmodel.DefaultPolicy().InboxKeep()
	before := canonical(t, rd.Client, rd.Prefix, keep) // as read: a replay may append a duplicate to a buffer
	for _, e := range es {
		if e.Key != idstr(a) {
			continue
		}
		id := e.ID
		if res, err := q.Replay(ctx, projections.PoisonSelect{ID: id}, resolver); err != nil || res[0].Err != nil {
			t.Fatalf("replay %s again: %+v, %v", id, res, err)
		}
	}
	if got := ofA(view(keys)); !slices.Equal(got, want) {
		t.Fatalf("inbox after replaying again %v, want %v", got, want)
	}
	if d := diff(before, canonical(t, rd.Client, rd.Prefix, keep)); d != "" {
		t.Fatalf("replaying again changed Redis:\n%s", d)
	}

	// Why the suffix: the old event alone brings the deleted post back.
	for _, e := range w.envs {
		if e.Type == events.TypePostCreated && e.AudienceKey == a {
			if err := projections.Apply(ctx, cps, e); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if !slices.Contains(ofA(view(clean)), idstr(p1)) {
		t.Fatalf("applying the old creation alone left %v: the test would not see a resurrection", view(clean))
	}
}

func TestParseGroup(t *testing.T) {
	for _, c := range []struct {
		prefix, group, name string
		version             int
	}{
		{"", projections.GroupInbox, projections.NameInbox, 1},
		{"", projections.GroupFor(projections.NamePosts, 3), projections.NamePosts, 3},
		{"t.", "t." + projections.GroupFollowers, projections.NameFollowers, 1},
		{"", "feed.projection.nope.v1", "", 0},
		{"", "feed.projection.inbox.v0", "", 0},
		{"", "feed.projection.inbox", "", 0},
		{"t.", projections.GroupInbox, "", 0},
	} {
		n, v, err := projections.ParseGroup(c.prefix, c.group)
		if n != c.name || v != c.version || (err == nil) != (c.name != "") {
			t.Errorf("ParseGroup(%q, %q) = %q %d %v", c.prefix, c.group, n, v, err)
		}
	}
	for _, id := range []string{"", "1", "a:1", "1:b", "-1:2", "1:-2"} {
		if _, _, err := projections.ParsePoisonID(id); err == nil {
			t.Errorf("ParsePoisonID(%q) accepted", id)
		}
	}
	if p, o, err := projections.ParsePoisonID("3:17"); p != 3 || o != 17 || err != nil {
		t.Errorf("ParsePoisonID(3:17) = %d %d %v", p, o, err)
	}
}

// ProjectorForGroup builds the projector of a group at the active version
// and refuses a group of another version or of no projector.
func TestProjectorForGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, rd := testenv.NewDB(t), testenv.NewRedis(t)
	cfg := projections.Config{Keys: readmodel.Keys{Prefix: rd.Prefix}}
	p, err := projections.ProjectorForGroup(ctx, cfg, "t.", db.Pool, rd.Client, "t."+projections.GroupInbox)
	if err != nil || p.Name() != projections.NameInbox || p.Group() != projections.GroupInbox {
		t.Fatalf("inbox v1: %v, %v", p, err)
	}
	if _, err := projections.ProjectorForGroup(ctx, cfg, "t.", db.Pool, rd.Client, "t."+projections.GroupFor(projections.NameInbox, 2)); err == nil {
		t.Fatal("a group of an inactive version was accepted")
	}
	if _, err := projections.ProjectorForGroup(ctx, cfg, "", db.Pool, rd.Client, "other"); err == nil {
		t.Fatal("a foreign group was accepted")
	}
	if err := readmodel.ActivateVersion(ctx, db.Pool, readmodel.ProjectionPosts, 1, 2, readmodel.Policy{}); err != nil {
		t.Fatal(err)
	}
	p, err = projections.ProjectorForGroup(ctx, cfg, "", db.Pool, rd.Client, projections.GroupFor(projections.NamePosts, 2))
	if err != nil || p.Group() != projections.GroupFor(projections.NamePosts, 2) {
		t.Fatalf("posts v2: %v, %v", p, err)
	}
}
