package projections_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// notifRig is the write side (commands) over a database of its own, and
// the notifications projector over a Redis prefix of its own, applied
// directly from the events table (the order and the repeats are the
// test's to choose).
type notifRig struct {
	t     *testing.T
	db    *testenv.DB
	rd    *testenv.Redis
	cmds  *commands.Commands
	keys  readmodel.Keys
	model readmodel.Notifications
	p     projections.Projector
	max   int
	last  int64 // the position of the last event loaded
	// clock is the projector's and the model's time (zero: time.Now):
	// the horizon's edge is judged by it.
	clock time.Time
}

func newNotifRig(t *testing.T, max int) *notifRig {
	t.Helper()
	db := testenv.NewDB(t)
	ids, err := snowflake.New(5)
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := commands.New(db.Pool, ids, commands.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := &notifRig{t: t, db: db, rd: testenv.NewRedis(t), cmds: cmds, max: max}
	r.keys = readmodel.Keys{Prefix: r.rd.Prefix}
	r.p = r.projector(r.keys, nil)
	r.model = readmodel.NewNotifications(r.keys, max, 0)
	return r
}

// now is the rig's clock.
func (r *notifRig) now() time.Time {
	if r.clock.IsZero() {
		return time.Now()
	}
	return r.clock
}

// horizonModel is the model as the projector writes it, with the
// default post horizon by the rig's clock.
func (r *notifRig) horizonModel(keys readmodel.Keys) readmodel.Notifications {
	return readmodel.NewNotifications(keys, r.max, 0).WithHorizon(readmodel.DefaultPolicy().Horizon(r.now))
}

func (r *notifRig) projector(keys readmodel.Keys, n projections.Notifier) projections.Projector {
	r.t.Helper()
	p, err := projections.NewNotifications(projections.Config{Keys: keys, NotificationsMax: r.max, Notifier: n, Now: r.now}, r.db.Pool, r.rd.Client)
	if err != nil {
		r.t.Fatal(err)
	}
	return p
}

// must is v, failing the test (by a panic, which the test reports) on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func (r *notifRig) user() int64 {
	return must(r.cmds.RegisterUser.Handle(context.Background(), commands.RegisterUser{Name: "n"})).ID
}

func (r *notifRig) post(author int64, replyTo, quoteOf int64) int64 {
	return must(r.cmds.CreatePost.Handle(context.Background(), commands.CreatePost{AuthorID: author, Content: "c", ReplyTo: replyTo, QuoteOf: quoteOf})).ID
}

// envelopes returns the events appended since the last call, in log order.
func (r *notifRig) envelopes() []events.Envelope {
	r.t.Helper()
	rows, err := r.db.Pool.Query(context.Background(), `SELECT position, event_id, stream_id, stream_version, type, payload, recorded_at
		FROM events WHERE position > $1 ORDER BY position`, r.last)
	if err != nil {
		r.t.Fatal(err)
	}
	defer rows.Close()
	var out []events.Envelope
	for rows.Next() {
		var e events.Envelope
		if err := rows.Scan(&e.Position, &e.EventID, &e.StreamID, &e.StreamVersion, &e.Type, &e.Payload, &e.RecordedAt); err != nil {
			r.t.Fatal(err)
		}
		ev, err := events.DefaultCodec.DecodeEnvelope(e)
		if err != nil {
			r.t.Fatal(err)
		}
		e.AudienceKey = ev.AudienceKey()
		out = append(out, e)
		r.last = e.Position
	}
	return out
}

func (r *notifRig) applyTo(p projections.Projector, envs ...events.Envelope) error {
	for _, e := range envs {
		// projections.Apply passes over the types the projector ignores,
		// as its consumer group does.
		if err := projections.Apply(context.Background(), []projections.Projector{p}, e); err != nil {
			return err
		}
	}
	return nil
}

// interleave applies parts (the events of each partition, in order) to p
// in one random interleaving drawn from rng, each event delivered twice.
func (r *notifRig) interleave(p projections.Projector, parts map[int64][]events.Envelope, rng *rand.Rand) {
	r.t.Helper()
	next := map[int64]int{}
	for {
		var live []int64
		for k, es := range parts {
			if next[k] < len(es) {
				live = append(live, k)
			}
		}
		if len(live) == 0 {
			return
		}
		slices.Sort(live)
		k := live[rng.IntN(len(live))]
		e := parts[k][next[k]]
		next[k]++
		if err := r.applyTo(p, e, e); err != nil {
			r.t.Fatal(err)
		}
	}
}

func (r *notifRig) apply(envs ...events.Envelope) {
	r.t.Helper()
	if err := r.applyTo(r.p, envs...); err != nil {
		r.t.Fatal(err)
	}
}

func (r *notifRig) list(user int64) readmodel.NotificationRange {
	r.t.Helper()
	return must(r.model.All(context.Background(), r.rd.Client, user))
}

// truth is user's live notifications from PostgreSQL, newest first, the
// ones at or below floor left out.
func (r *notifRig) truth(user int64, floor int64) []readmodel.Notification {
	r.t.Helper()
	rows, err := r.db.Pool.Query(context.Background(), `SELECT * FROM (`+projections.NotificationsSQL+`) t WHERE target = $1`, user)
	if err != nil {
		r.t.Fatal(err)
	}
	defer rows.Close()
	var out []readmodel.Notification
	for rows.Next() {
		var (
			u   int64
			typ int32
			n   readmodel.Notification
		)
		if err := rows.Scan(&u, &typ, &n.Actor, &n.Post, &n.MS); err != nil {
			r.t.Fatal(err)
		}
		n.Type = byte(typ)
		if n.MS > floor {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b readmodel.Notification) int {
		if a.Newer(b) {
			return -1
		}
		return 1
	})
	return out
}

func typesOf(ns []readmodel.Notification) []string {
	var out []string
	for _, n := range ns {
		out = append(out, readmodel.TypeName(n.Type))
	}
	slices.Sort(out)
	return out
}

func TestNotificationsEachTypeAndItsUndo(t *testing.T) {
	ctx := context.Background()
	r := newNotifRig(t, 0)
	alice, bob := r.user(), r.user()
	p := r.post(alice, 0, 0)
	must(r.cmds.Like.Handle(ctx, commands.Like{UserID: bob, PostID: p}))
	must(r.cmds.Repost.Handle(ctx, commands.Repost{UserID: bob, PostID: p}))
	quote := r.post(bob, 0, p)
	reply := r.post(bob, p, 0)
	must(r.cmds.Follow.Handle(ctx, commands.Follow{FollowerID: bob, FolloweeID: alice}))
	// Acting on one's own post notifies no one.
	must(r.cmds.Like.Handle(ctx, commands.Like{UserID: alice, PostID: p}))
	r.post(alice, p, p)
	r.apply(r.envelopes()...)

	got := r.list(alice)
	if want := []string{"follow", "like", "quote", "reply", "repost"}; !slices.Equal(typesOf(got.Items), want) {
		t.Fatalf("alice's notifications %v, want %v", typesOf(got.Items), want)
	}
	for _, n := range got.Items {
		if n.Actor != bob {
			t.Fatalf("notification %+v: actor %d, want bob %d", n, n.Actor, bob)
		}
	}
	if !slices.Equal(got.Items, r.truth(alice, got.Floor)) {
		t.Fatalf("projected %+v, truth %+v", got.Items, r.truth(alice, got.Floor))
	}
	if n := r.list(bob); len(n.Items) != 0 {
		t.Fatalf("bob has notifications %+v", n.Items)
	}

	must(r.cmds.Unlike.Handle(ctx, commands.Unlike{UserID: bob, PostID: p}))
	must(r.cmds.Unrepost.Handle(ctx, commands.Unrepost{UserID: bob, PostID: p}))
	must(r.cmds.DeletePost.Handle(ctx, commands.DeletePost{ActorID: bob, PostID: quote}))
	must(r.cmds.DeletePost.Handle(ctx, commands.DeletePost{ActorID: bob, PostID: reply}))
	must(r.cmds.Unfollow.Handle(ctx, commands.Unfollow{FollowerID: bob, FolloweeID: alice}))
	r.apply(r.envelopes()...)
	if n := r.list(alice); len(n.Items) != 0 {
		t.Fatalf("after every undo alice still has %v", typesOf(n.Items))
	}
}

// TestNotificationsRedeliveryAndLateEvents: every event twice, then a
// replayed stretch; then a do applied late after its undo, and an undo
// applied late after the next do (a moved partition): the pair's version
// refuses both.
func TestNotificationsRedeliveryAndLateEvents(t *testing.T) {
	ctx := context.Background()
	r := newNotifRig(t, 0)
	alice, bob, carol := r.user(), r.user(), r.user()
	p := r.post(alice, 0, 0)
	must(r.cmds.Like.Handle(ctx, commands.Like{UserID: bob, PostID: p}))
	must(r.cmds.Follow.Handle(ctx, commands.Follow{FollowerID: carol, FolloweeID: alice}))
	first := r.envelopes()
	for _, e := range first {
		r.apply(e, e)
	}
	r.apply(first...)
	if got := r.list(alice); !slices.Equal(typesOf(got.Items), []string{"follow", "like"}) {
		t.Fatalf("after redelivery: %v", typesOf(got.Items))
	}

	must(r.cmds.Unlike.Handle(ctx, commands.Unlike{UserID: bob, PostID: p}))
	unlike := r.envelopes()
	must(r.cmds.Like.Handle(ctx, commands.Like{UserID: bob, PostID: p}))
	relike := r.envelopes()
	must(r.cmds.Unfollow.Handle(ctx, commands.Unfollow{FollowerID: carol, FolloweeID: alice}))
	unfollow := r.envelopes()
	likeV1 := first[len(first)-2] // the first like (the follow is last)
	r.apply(unlike...)
	r.apply(likeV1) // late: the like at version 1 after its unlike at 2
	if got := r.list(alice); slices.Contains(typesOf(got.Items), "like") {
		t.Fatal("a late like brought back the unliked notification")
	}
	r.apply(relike...)
	r.apply(unlike...) // late: the unlike at 2 after the like at 3
	r.apply(unfollow...)
	r.apply(first[len(first)-1]) // late: the follow after its unfollow
	got := r.list(alice)
	if !slices.Equal(typesOf(got.Items), []string{"like"}) {
		t.Fatalf("after the late events: %v, want the second like only", typesOf(got.Items))
	}
	if !slices.Equal(got.Items, r.truth(alice, got.Floor)) {
		t.Fatalf("projected %+v, truth %+v", got.Items, r.truth(alice, got.Floor))
	}
}

// TestNotificationsPartitionInterleavings applies the log's events split
// by Kafka key, each partition in order, partitions interleaved at
// random, with a small bound: every order leaves the truth above its
// floor, and the rebuild from PostgreSQL the same.
func TestNotificationsPartitionInterleavings(t *testing.T) {
	ctx := context.Background()
	r := newNotifRig(t, 5)
	alice := r.user()
	var others []int64
	for range 4 {
		others = append(others, r.user())
	}
	posts := []int64{r.post(alice, 0, 0), r.post(alice, 0, 0)}
	var replies []int64
	for i, u := range others {
		p := posts[i%2]
		must(r.cmds.Like.Handle(ctx, commands.Like{UserID: u, PostID: p}))
		must(r.cmds.Repost.Handle(ctx, commands.Repost{UserID: u, PostID: p}))
		must(r.cmds.Follow.Handle(ctx, commands.Follow{FollowerID: u, FolloweeID: alice}))
		replies = append(replies, r.post(u, p, 0))
	}
	// Undos of some, redos of others.
	must(r.cmds.Unlike.Handle(ctx, commands.Unlike{UserID: others[0], PostID: posts[0]}))
	must(r.cmds.Unrepost.Handle(ctx, commands.Unrepost{UserID: others[1], PostID: posts[1]}))
	must(r.cmds.Unfollow.Handle(ctx, commands.Unfollow{FollowerID: others[2], FolloweeID: alice}))
	must(r.cmds.DeletePost.Handle(ctx, commands.DeletePost{ActorID: others[3], PostID: replies[3]}))
	must(r.cmds.Like.Handle(ctx, commands.Like{UserID: others[0], PostID: posts[0]}))
	envs := r.envelopes()

	parts := map[int64][]events.Envelope{}
	for _, e := range envs {
		parts[e.AudienceKey%3] = append(parts[e.AudienceKey%3], e)
	}
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 52))
		keys := readmodel.Keys{Prefix: r.rd.Prefix + "o" + string(rune('a'+seed)) + ":"}
		p := r.projector(keys, nil)
		// The set of a built deployment (the bulk build of a user with no
		// notifications yet): complete, floor 0.
		pipe := r.rd.Client.Pipeline()
		readmodel.NewNotifications(keys, 5, 0).WriteRebuilt(ctx, pipe, alice, nil)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		r.interleave(p, parts, rng)
		got := must(readmodel.NewNotifications(keys, 5, 0).All(ctx, r.rd.Client, alice))
		if want := r.truth(alice, got.Floor); !slices.Equal(got.Items, want) {
			t.Fatalf("order %d: projected %+v, truth above floor %d %+v", seed, got.Items, got.Floor, want)
		}
		if len(got.Items) > 5 {
			t.Fatalf("order %d: %d notifications over the bound 5", seed, len(got.Items))
		}
	}

	built := readmodel.Keys{Prefix: r.rd.Prefix + "built:"}
	bp, ok := r.projector(built, nil).(*projections.Notifications)
	if !ok {
		t.Fatal("not the notifications projector")
	}
	if _, err := bp.BuildNotifications(ctx, r.db.Pool, nil); err != nil {
		t.Fatal(err)
	}
	got := must(readmodel.NewNotifications(built, 5, 0).All(ctx, r.rd.Client, alice))
	if want := r.truth(alice, got.Floor); !slices.Equal(got.Items, want) || len(want) != 5 {
		t.Fatalf("rebuilt %+v, truth above floor %d %+v (want the bound, 5)", got.Items, got.Floor, want)
	}
}

// cutAfter is a Notifier that cancels the handler's context after n
// notifications: the projector stops between two writes of one event,
// as a crash would.
type cutAfter struct {
	n      int
	cancel context.CancelFunc
	seen   []int64
}

// Unnotified is not counted: the cut is between two additions.
func (c *cutAfter) Unnotified(context.Context, int64, readmodel.Notification) {}

func (c *cutAfter) Notified(_ context.Context, user int64, _ readmodel.Notification) {
	c.seen = append(c.seen, user)
	if len(c.seen) == c.n {
		c.cancel()
	}
}

// TestNotificationsCrashBetweenSteps: a reply that quotes notifies two
// users, one write each; the projector stops after the first, and the
// redelivery writes the second and changes nothing of the first. The
// same for its deletion's two removals.
func TestNotificationsCrashBetweenSteps(t *testing.T) {
	ctx := context.Background()
	r := newNotifRig(t, 0)
	alice, bob, carol := r.user(), r.user(), r.user()
	pa, pb := r.post(alice, 0, 0), r.post(bob, 0, 0)
	both := r.post(carol, pa, pb)
	envs := r.envelopes()
	created := envs[len(envs)-1]
	r.apply(envs[:len(envs)-1]...)

	cctx, cancel := context.WithCancel(ctx)
	cut := &cutAfter{n: 1, cancel: cancel}
	p := r.projector(r.keys, cut)
	ev := must(events.DefaultCodec.DecodeEnvelope(created))
	if err := p.Apply(cctx, created, ev); !errors.Is(err, context.Canceled) {
		t.Fatalf("the first apply: %v, want it cut by the cancellation", err)
	}
	if a, b := len(r.list(alice).Items), len(r.list(bob).Items); a+b != 1 {
		t.Fatalf("after the cut: alice %d, bob %d notifications, want one of them", a, b)
	}
	r.apply(created) // the redelivery
	for _, u := range []int64{alice, bob} {
		if got := r.list(u).Items; len(got) != 1 || got[0].Actor != carol || got[0].Post != both {
			t.Fatalf("user %d after the redelivery: %+v", u, got)
		}
	}

	must(r.cmds.DeletePost.Handle(ctx, commands.DeletePost{ActorID: carol, PostID: both}))
	del := r.envelopes()
	// The first of the deletion's two removals, then the crash: the
	// redelivery removes the second, and the first again (a no-op).
	if _, err := r.model.Remove(ctx, r.rd.Client, alice,
		readmodel.Notification{Type: readmodel.NotifyReply, Actor: carol, Post: both}, del[len(del)-1].StreamVersion); err != nil {
		t.Fatal(err)
	}
	if a, b := len(r.list(alice).Items), len(r.list(bob).Items); a != 0 || b != 1 {
		t.Fatalf("after the first removal: alice %d, bob %d", a, b)
	}
	r.apply(del...)
	r.apply(del...)
	if a, b := r.list(alice).Items, r.list(bob).Items; len(a)+len(b) != 0 {
		t.Fatalf("after the deletion: alice %+v, bob %+v", a, b)
	}
}

// TestNotificationMemory measures the bytes per notification of a full
// set (MEMORY USAGE over the bound's entries), the figure of
// docs/benchmarks.md.
func TestNotificationMemory(t *testing.T) {
	ctx := context.Background()
	rd := testenv.NewRedis(t)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	m := readmodel.NewNotifications(keys, readmodel.DefaultNotificationsMax, 0)
	base := int64(1_700_000_000_000)
	pipe := rd.Client.Pipeline()
	var ns []readmodel.Notification
	for i := range readmodel.DefaultNotificationsMax {
		ns = append(ns, readmodel.Notification{Type: byte(1 + i%4), Actor: 1 << 50, Post: 7<<58 + int64(i)<<22, MS: base + int64(i)*997})
	}
	m.WriteRebuilt(ctx, pipe, 42, ns)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	bytes := must(m.MemoryUsage(ctx, rd.Client, 42))
	per := float64(bytes) / float64(len(ns))
	t.Logf("notifications: %d bytes for %d (%.1f bytes each)", bytes, len(ns), per)
	if per > 40 || per < 17 {
		t.Fatalf("%.1f bytes per notification: outside 17..40", per)
	}
	if got := must(m.All(ctx, rd.Client, 42)); len(got.Items) != len(ns) {
		t.Fatalf("read %d of %d", len(got.Items), len(ns))
	}
}

// TestNotificationRemovals: each undo that removes a notification appends
// it, with the removed entry's millisecond, to the user's removals stream
// in the same script as the removal, so a redelivery (refused by the
// pair's guard) appends nothing twice and a crash leaves no removal
// untold; an undo of what was never added (one's own like) appends
// nothing; the removals of two users' pairs, from two partitions, applied
// in either order, land each in its user's stream once.
func TestNotificationRemovals(t *testing.T) {
	ctx := context.Background()
	r := newNotifRig(t, 0)
	alice, bob, carol := r.user(), r.user(), r.user()
	pa := r.post(alice, 0, 0)
	must(r.cmds.Like.Handle(ctx, commands.Like{UserID: bob, PostID: pa}))
	must(r.cmds.Like.Handle(ctx, commands.Like{UserID: alice, PostID: pa})) // one's own: no notification
	must(r.cmds.Follow.Handle(ctx, commands.Follow{FollowerID: bob, FolloweeID: carol}))
	r.apply(r.envelopes()...)
	added := map[int64]readmodel.Notification{alice: r.list(alice).Items[0], carol: r.list(carol).Items[0]}

	must(r.cmds.Unlike.Handle(ctx, commands.Unlike{UserID: bob, PostID: pa}))
	must(r.cmds.Unlike.Handle(ctx, commands.Unlike{UserID: alice, PostID: pa}))
	ofAlice := r.envelopes()
	must(r.cmds.Unfollow.Handle(ctx, commands.Unfollow{FollowerID: bob, FolloweeID: carol}))
	ofCarol := r.envelopes()
	r.apply(ofCarol...)
	r.apply(ofAlice...)
	r.apply(ofAlice...) // redelivered
	r.apply(ofCarol...)

	for _, u := range []int64{alice, carol} {
		rs := must(r.model.RemovalsAfter(ctx, r.rd.Client, u, readmodel.ChangePos{}, 10))
		if len(rs) != 1 || rs[0].N != added[u] {
			t.Fatalf("removals of %d: %+v, want the one notification it had, %+v", u, rs, added[u])
		}
		if got := r.list(u).Items; len(got) != 0 {
			t.Fatalf("notifications of %d after the undos: %+v", u, got)
		}
		last := must(r.model.LastRemoval(ctx, r.rd.Client, u))
		if last != rs[0].Pos {
			t.Fatalf("last removal of %d at %v, want %v", u, last, rs[0].Pos)
		}
		if rest := must(r.model.RemovalsAfter(ctx, r.rd.Client, u, last, 10)); len(rest) != 0 {
			t.Fatalf("removals of %d after the last: %+v", u, rest)
		}
	}
}

// horizonSplit waits until the clock has passed the last millisecond of
// what was written so far and returns that millisecond: every event
// written from now on is later than it. A rig clock of that millisecond
// plus the post horizon puts the events before it past the horizon's
// edge and the ones after it inside.
func horizonSplit(t *testing.T, r *notifRig) time.Time {
	t.Helper()
	var last time.Time
	if err := r.db.Pool.QueryRow(context.Background(), `SELECT now()`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	edge := last.Truncate(time.Millisecond)
	// A condition, not a sleep: the database's clock must be a
	// millisecond past the edge before the next events are written.
	for {
		var now time.Time
		if err := r.db.Pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		if now.Sub(edge) >= 2*time.Millisecond && time.Since(edge) >= 2*time.Millisecond {
			return edge.Add(time.Millisecond)
		}
	}
}

// keysOf is every key under prefix with its content (members or fields
// and values), for comparing Redis before and after.
func keysOf(t *testing.T, r *notifRig, prefix string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, k := range must(r.rd.Client.Keys(ctx, prefix+"*").Result()) {
		switch must(r.rd.Client.Type(ctx, k).Result()) {
		case "zset":
			zs := must(r.rd.Client.ZRangeWithScores(ctx, k, 0, -1).Result())
			out[k] = fmt.Sprint(zs)
		case "hash":
			out[k] = fmt.Sprint(must(r.rd.Client.HGetAll(ctx, k).Result()))
		default:
			out[k] = "?"
		}
	}
	return out
}

// TestNotificationsHorizonPastWritesNothing: with the projector's clock
// five days on, every event of the log (dos and undos, a reply that
// quotes) delivered again changes nothing in Redis; after the keys are
// gone (expired), the same redelivery brings nothing back.
func TestNotificationsHorizonPastWritesNothing(t *testing.T) {
	ctx := context.Background()
	r := newNotifRig(t, 0)
	alice, bob, carol := r.user(), r.user(), r.user()
	pa, pb := r.post(alice, 0, 0), r.post(bob, 0, 0)
	must(r.cmds.Like.Handle(ctx, commands.Like{UserID: bob, PostID: pa}))
	must(r.cmds.Repost.Handle(ctx, commands.Repost{UserID: carol, PostID: pa}))
	must(r.cmds.Follow.Handle(ctx, commands.Follow{FollowerID: carol, FolloweeID: alice}))
	r.post(carol, pa, pb)
	must(r.cmds.Unlike.Handle(ctx, commands.Unlike{UserID: bob, PostID: pa}))
	must(r.cmds.Like.Handle(ctx, commands.Like{UserID: carol, PostID: pb}))
	envs := r.envelopes()
	r.apply(envs...)
	before := keysOf(t, r, r.rd.Prefix)
	if len(before) == 0 {
		t.Fatal("nothing projected")
	}
	if got := r.horizonModel(r.keys); len(must(got.All(ctx, r.rd.Client, alice)).Items) != 3 {
		t.Fatalf("alice's notifications inside the horizon: %+v", must(got.All(ctx, r.rd.Client, alice)))
	}

	r.clock = time.Now().Add(5 * 24 * time.Hour)
	r.p = r.projector(r.keys, nil)
	for _, e := range envs {
		r.apply(e, e)
	}
	if after := keysOf(t, r, r.rd.Prefix); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("a redelivery past the horizon changed Redis:\nbefore %v\nafter  %v", before, after)
	}
	// Five days on the sets hold nothing a reader shows: what is left
	// expires with the newest (the horizon), and a read goes to PostgreSQL.
	for _, u := range []int64{alice, bob} {
		got := must(r.horizonModel(r.keys).All(ctx, r.rd.Client, u))
		if len(got.Items) != 0 || !got.Older {
			t.Fatalf("user %d five days on: %+v, want nothing shown and older ones in PostgreSQL", u, got)
		}
	}
	if err := r.rd.Client.Del(ctx, must(r.rd.Client.Keys(ctx, r.rd.Prefix+"*").Result())...).Err(); err != nil {
		t.Fatal(err)
	}
	r.apply(envs...)
	if after := keysOf(t, r, r.rd.Prefix); len(after) != 0 {
		t.Fatalf("a redelivery after the keys expired wrote %v", after)
	}
}

// TestNotificationsHorizonPartitionInterleavings: a log whose first part
// is past the horizon's edge (the clock one horizon after it) and whose
// second part is inside, split by Kafka key into three partitions,
// applied in four random interleavings with every event twice, bound 5:
// each order leaves exactly the truth above the set's floor and the edge,
// nothing of the first part, and the rebuild writes the same.
func TestNotificationsHorizonPartitionInterleavings(t *testing.T) {
	ctx := context.Background()
	r := newNotifRig(t, 5)
	alice := r.user()
	var others []int64
	for range 4 {
		others = append(others, r.user())
	}
	posts := []int64{r.post(alice, 0, 0), r.post(alice, 0, 0)}
	for i, u := range others {
		p := posts[i%2]
		must(r.cmds.Like.Handle(ctx, commands.Like{UserID: u, PostID: p}))
		must(r.cmds.Follow.Handle(ctx, commands.Follow{FollowerID: u, FolloweeID: alice}))
	}
	edge := horizonSplit(t, r)
	var replies []int64
	for i, u := range others {
		p := posts[i%2]
		must(r.cmds.Repost.Handle(ctx, commands.Repost{UserID: u, PostID: p}))
		replies = append(replies, r.post(u, p, 0))
	}
	// Undos of old and new ones, a redo of an old one.
	must(r.cmds.Unlike.Handle(ctx, commands.Unlike{UserID: others[0], PostID: posts[0]}))
	must(r.cmds.Unrepost.Handle(ctx, commands.Unrepost{UserID: others[1], PostID: posts[1]}))
	must(r.cmds.Unfollow.Handle(ctx, commands.Unfollow{FollowerID: others[2], FolloweeID: alice}))
	must(r.cmds.DeletePost.Handle(ctx, commands.DeletePost{ActorID: others[3], PostID: replies[3]}))
	must(r.cmds.Like.Handle(ctx, commands.Like{UserID: others[0], PostID: posts[0]}))
	envs := r.envelopes()
	r.clock = edge.Add(readmodel.DefaultPolicy().PostHorizon)
	edgeMs := edge.UnixMilli()

	parts := map[int64][]events.Envelope{}
	for _, e := range envs {
		parts[e.AudienceKey%3] = append(parts[e.AudienceKey%3], e)
	}
	check := func(what string, keys readmodel.Keys) {
		t.Helper()
		got := must(r.horizonModel(keys).All(ctx, r.rd.Client, alice))
		want := r.truth(alice, got.Floor)
		if !slices.Equal(got.Items, want) || got.Floor < edgeMs {
			t.Fatalf("%s: projected %+v above floor %d, truth %+v (edge %d)", what, got.Items, got.Floor, want, edgeMs)
		}
		if len(want) == 0 || len(want) > 5 {
			t.Fatalf("%s: %d notifications, want 1..5", what, len(want))
		}
		for _, z := range must(r.rd.Client.ZRangeWithScores(ctx, r.horizonModel(keys).Key(alice), 0, -1).Result()) {
			if z.Member != "\x00" && int64(z.Score) <= edgeMs {
				t.Fatalf("%s: a notification at %d, past the edge %d, was written", what, int64(z.Score), edgeMs)
			}
		}
		if d := must(r.rd.Client.PExpireTime(ctx, r.horizonModel(keys).Key(alice)).Result()); d <= 0 {
			t.Fatalf("%s: the set has no expiry (%v)", what, d)
		}
	}
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 55))
		keys := readmodel.Keys{Prefix: r.rd.Prefix + "h" + string(rune('a'+seed)) + ":"}
		p := r.projector(keys, nil)
		pipe := r.rd.Client.Pipeline()
		readmodel.NewNotifications(keys, 5, 0).WriteRebuilt(ctx, pipe, alice, nil)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		r.interleave(p, parts, rng)
		check(fmt.Sprintf("order %d", seed), keys)
	}

	built := readmodel.Keys{Prefix: r.rd.Prefix + "hbuilt:"}
	bp, ok := r.projector(built, nil).(*projections.Notifications)
	if !ok {
		t.Fatal("not the notifications projector")
	}
	if _, err := bp.BuildNotifications(ctx, r.db.Pool, nil); err != nil {
		t.Fatal(err)
	}
	check("rebuilt", built)
	// The rebuild wrote no set for the users with nothing inside the
	// horizon: the four others were notified of nothing.
	for _, u := range others {
		if n := must(r.rd.Client.Exists(ctx, r.horizonModel(built).Key(u)).Result()); n != 0 {
			t.Fatalf("the rebuild wrote a set for %d", u)
		}
	}
}

// TestNotificationsHorizonCrashBetweenSteps: a reply that quotes notifies
// two users; the projector stops after the first write, and the
// redelivery comes after the event has left the horizon: it writes
// nothing (the second user gets no set), and the first user's entry,
// past the edge, is shown by no read (the reader goes to PostgreSQL) and
// goes at the set's next write.
func TestNotificationsHorizonCrashBetweenSteps(t *testing.T) {
	ctx := context.Background()
	r := newNotifRig(t, 0)
	alice, bob, carol, dan := r.user(), r.user(), r.user(), r.user()
	pa, pb := r.post(alice, 0, 0), r.post(bob, 0, 0)
	r.post(carol, pa, pb)
	envs := r.envelopes()
	created := envs[len(envs)-1]
	r.apply(envs[:len(envs)-1]...)

	cctx, cancel := context.WithCancel(ctx)
	cut := &cutAfter{n: 1, cancel: cancel}
	ev := must(events.DefaultCodec.DecodeEnvelope(created))
	if err := r.projector(r.keys, cut).Apply(cctx, created, ev); !errors.Is(err, context.Canceled) {
		t.Fatalf("the first apply: %v, want it cut by the cancellation", err)
	}
	first, second := cut.seen[0], alice
	if first == alice {
		second = bob
	}

	r.clock = time.Now().Add(readmodel.DefaultPolicy().PostHorizon + time.Minute)
	r.p = r.projector(r.keys, nil)
	r.apply(created) // the redelivery, past the horizon
	m := r.horizonModel(r.keys)
	if n := must(r.rd.Client.Exists(ctx, m.Key(second)).Result()); n != 0 {
		t.Fatalf("the redelivery past the horizon wrote user %d's set", second)
	}
	got := must(m.All(ctx, r.rd.Client, first))
	if len(got.Items) != 0 || !got.Older {
		t.Fatalf("user %d past the horizon: %+v, want nothing shown and older ones in PostgreSQL", first, got)
	}
	// The next write to the first user's set trims the old entry: a
	// follow written after the reply, the clock one horizon after the
	// reply (the reply past the edge, the follow inside).
	edge := horizonSplit(t, r)
	must(r.cmds.Follow.Handle(ctx, commands.Follow{FollowerID: dan, FolloweeID: first}))
	r.clock = edge.Add(readmodel.DefaultPolicy().PostHorizon)
	r.p = r.projector(r.keys, nil)
	r.apply(r.envelopes()...)
	m = r.horizonModel(r.keys)
	if n := must(r.rd.Client.ZCard(ctx, m.Key(first)).Result()); n != 1 {
		t.Fatalf("user %d's set holds %d members after a write, want the follow alone", first, n)
	}
}
