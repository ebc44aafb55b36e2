package readmodel

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/feedco/feed/testkit/testenv"
)

func TestNotificationIDs(t *testing.T) {
	for _, n := range []Notification{
		{Type: NotifyLike, Actor: 7, Post: 917313043103232000, MS: 1_796_541_408_035},
		{Type: NotifyFollow, Actor: 1 << 40, MS: 1},
	} {
		got, err := ParseNotificationID(n.ID())
		if err != nil || got != n {
			t.Fatalf("%+v: parsed back %+v, %v", n, got, err)
		}
	}
	for _, bad := range []string{"", "x", "AAAA", "!!!!", Notification{Type: 9, Actor: 1, Post: 1, MS: 1}.ID(),
		Notification{Type: NotifyLike, Actor: 0, Post: 1, MS: 1}.ID()} {
		if _, err := ParseNotificationID(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	k := Keys{Prefix: "p:", Versions: Versions{Notifications: 3}}
	m := NewNotifications(k, 0, 0)
	for _, key := range []string{m.Key(5), m.guardKey(5)} {
		if p, v, ok := k.Classify(key); !ok || p != ProjectionNotifications || v != 3 {
			t.Errorf("Classify(%q) = %s, %d, %v", key, p, v, ok)
		}
	}
}

// TestNotificationsBoundAndFloor: past the bound the oldest go and the
// floor rises to them; an add at or below the floor is refused; a guard
// refuses a do older than the pair's undo.
func TestNotificationsBoundAndFloor(t *testing.T) {
	ctx := context.Background()
	rd := testenv.NewRedis(t)
	m := NewNotifications(Keys{Prefix: rd.Prefix}, 3, 0)
	add := func(actor, ms, version int64) bool {
		t.Helper()
		ok, err := m.Add(ctx, rd.Client, 1, Notification{Type: NotifyFollow, Actor: actor, MS: ms}, version)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	// A built set (the bulk build's of a user with none yet).
	pipe := rd.Client.Pipeline()
	m.WriteRebuilt(ctx, pipe, 1, nil)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for a := int64(1); a <= 5; a++ {
		add(a, 100*a, 1)
	}
	got, err := m.All(ctx, rd.Client, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got.Floor != 200 || len(got.Items) != 3 || got.Items[0].Actor != 5 || got.Items[2].Actor != 3 {
		t.Fatalf("after 5 adds, bound 3: %+v", got)
	}
	if add(9, 150, 1) {
		t.Fatal("an add below the floor was taken")
	}
	if _, err := m.Remove(ctx, rd.Client, 1, Notification{Type: NotifyFollow, Actor: 4}, 2); err != nil {
		t.Fatal(err)
	}
	if add(4, 400, 1) {
		t.Fatal("a follow at version 1 came back after its unfollow at 2")
	}
	if !add(4, 450, 3) {
		t.Fatal("the follow at version 3 was refused")
	}
	got, _ = m.All(ctx, rd.Client, 1)
	if len(got.Items) != 3 || got.Items[1].Actor != 4 || got.Items[1].MS != 450 {
		t.Fatalf("after the refollow: %+v", got)
	}
}

// TestNotificationsCompleteAColdSet: a set the projector made alone (no
// floor sentinel: not built) is trimmed without claiming a floor; the
// cold path's Complete adds the truth it lacks but an entry whose pair
// has a newer event (a guard), keeps what the projector added, cuts at
// the bound and marks it built; a second Complete changes nothing.
func TestNotificationsCompleteAColdSet(t *testing.T) {
	ctx := context.Background()
	rd := testenv.NewRedis(t)
	m := NewNotifications(Keys{Prefix: rd.Prefix}, 3, 0)
	f := func(actor, ms int64) Notification { return Notification{Type: NotifyFollow, Actor: actor, MS: ms} }
	for a := int64(1); a <= 4; a++ {
		if _, err := m.Add(ctx, rd.Client, 1, f(a, 1000+a), 1); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := m.All(ctx, rd.Client, 1)
	if got.Built || len(got.Items) != 3 {
		t.Fatalf("a projector-made set past its bound: %+v", got)
	}
	// Actor 9 unfollowed after the truth was read: its guard stops the add.
	if _, err := m.Remove(ctx, rd.Client, 1, f(9, 0), 2); err != nil {
		t.Fatal(err)
	}
	truth := []Notification{f(8, 1003), f(9, 1002), f(7, 500), f(6, 400)}
	if ok, err := m.Complete(ctx, rd.Client, 1, truth); err != nil || !ok {
		t.Fatalf("Complete: %v, %v", ok, err)
	}
	got, _ = m.All(ctx, rd.Client, 1)
	var actors []int64
	for _, n := range got.Items {
		actors = append(actors, n.Actor)
	}
	if !got.Built || got.Floor != 1002 || len(actors) != 3 || actors[0] != 4 || actors[1] != 8 || actors[2] != 3 {
		t.Fatalf("completed: built %v, floor %d, actors %v; want built, floor 1002, [4 8 3] (ties by member)", got.Built, got.Floor, actors)
	}
	if ok, err := m.Complete(ctx, rd.Client, 1, nil); err != nil || ok {
		t.Fatalf("a second Complete: %v, %v", ok, err)
	}
}

// TestNotificationsHorizon: with a horizon of 4 days, the builds keep only
// what is inside it (the floor is the newest left out), a write trims what
// has left it and raises the floor over it, the set expires 4 days after
// its newest notification and never earlier than it did, a do older than
// the horizon and an undo recorded before it send nothing, and a read
// leaves out what has left the horizon but no write has trimmed yet.
func TestNotificationsHorizon(t *testing.T) {
	ctx := context.Background()
	rd := testenv.NewRedis(t)
	const day = int64(24 * 60 * 60 * 1000)
	h := 4 * 24 * time.Hour
	t0 := time.Now().UnixMilli()
	now := t0
	m := NewNotifications(Keys{Prefix: rd.Prefix}, 3, 0).WithHorizon(Horizon{H: h, Now: func() time.Time { return time.UnixMilli(now) }})
	f := func(actor, ms int64) Notification { return Notification{Type: NotifyFollow, Actor: actor, MS: ms} }
	expiry := func() int64 {
		t.Helper()
		d, err := rd.Client.PExpireTime(ctx, m.Key(1)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d.Milliseconds()
	}
	actors := func(r NotificationRange) []int64 {
		var out []int64
		for _, n := range r.Items {
			out = append(out, n.Actor)
		}
		return out
	}

	pipe := rd.Client.Pipeline()
	m.WriteRebuilt(ctx, pipe, 1, []Notification{f(1, t0-5*day), f(2, t0-3*day), f(3, t0-2*day), f(4, t0-day)})
	m.WriteRebuilt(ctx, pipe, 2, []Notification{f(1, t0-5*day)})
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	got := must(m.All(ctx, rd.Client, 1))
	if !got.Built || !got.Older || got.Floor != t0-4*day || !slices.Equal(actors(got), []int64{4, 3, 2}) {
		t.Fatalf("built: %+v, want [4 3 2] above the horizon's edge", got)
	}
	if ms := must(rd.Client.ZScore(ctx, m.Key(1), notifFloor).Result()); int64(ms) != t0-5*day {
		t.Fatalf("built floor %d, want the one 5 days old %d", int64(ms), t0-5*day)
	}
	if e := expiry(); e != t0-day+4*day {
		t.Fatalf("expires at %d, want the newest + 4 days %d", e, t0+3*day)
	}
	if n := must(rd.Client.Exists(ctx, m.Key(2)).Result()); n != 0 {
		t.Fatal("a user with nothing inside the horizon got a set")
	}

	// Past the horizon: nothing is sent (a version above 1 would write a
	// guard, a sent undo too).
	if ok := must(m.Add(ctx, rd.Client, 1, f(9, t0-4*day-1), 2)); ok {
		t.Fatal("a do older than the horizon was added")
	}
	if ok := must(m.Remove(ctx, rd.Client, 1, f(4, t0-4*day), 2)); ok {
		t.Fatal("an undo recorded before the horizon removed something")
	}
	if n := must(rd.Client.Exists(ctx, m.guardKey(1)).Result()); n != 0 {
		t.Fatal("a write past the horizon wrote the guard hash")
	}

	// A day and a half later the one 3 days old has left the horizon: a
	// read leaves it out (and says older ones exist); the next write trims
	// it and raises the floor to it, and moves the expiry later.
	now = t0 + 3*day/2
	got = must(m.All(ctx, rd.Client, 1))
	if !slices.Equal(actors(got), []int64{4, 3}) || got.Floor != now-4*day || !got.Older {
		t.Fatalf("read past the horizon: %+v", got)
	}
	if !must(m.Add(ctx, rd.Client, 1, f(5, t0+day), 1)) {
		t.Fatal("a new notification was refused")
	}
	if ms := must(rd.Client.ZScore(ctx, m.Key(1), notifFloor).Result()); int64(ms) != t0-3*day {
		t.Fatalf("floor %d after the trim, want the trimmed one's %d", int64(ms), t0-3*day)
	}
	if n := must(rd.Client.ZCard(ctx, m.Key(1)).Result()); n != 4 {
		t.Fatalf("%d members, want 3 and the floor", n)
	}
	if e := expiry(); e != t0+5*day {
		t.Fatalf("expires at %d, want %d", e, t0+5*day)
	}
	// Removing the newest leaves the expiry where it was (never earlier).
	if !must(m.Remove(ctx, rd.Client, 1, f(5, now), 2)) {
		t.Fatal("the unfollow removed nothing")
	}
	if e := expiry(); e != t0+5*day {
		t.Fatalf("expires at %d after removing the newest, want still %d", e, t0+5*day)
	}

	// A set without an expiry (written before the horizon) gets one at its
	// next write.
	plain := NewNotifications(Keys{Prefix: rd.Prefix}, 3, 0)
	if _, err := plain.Add(ctx, rd.Client, 3, f(1, t0), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Add(ctx, rd.Client, 3, f(2, t0-day), 1); err != nil {
		t.Fatal(err)
	}
	if d := must(rd.Client.PExpireTime(ctx, m.Key(3)).Result()); d.Milliseconds() != t0+4*day {
		t.Fatalf("an old set's expiry %d, want %d", d.Milliseconds(), t0+4*day)
	}

	// The cold path: a set the projector made alone completed from the
	// truth writes only the horizon; a truth with nothing inside it gives
	// a built set holding only its floor, expiring one horizon from now.
	now = t0
	if _, err := m.Add(ctx, rd.Client, 4, f(7, t0-day), 1); err != nil {
		t.Fatal(err)
	}
	if !must(m.Complete(ctx, rd.Client, 4, []Notification{f(6, t0-6*day), f(7, t0-day), f(8, t0-2*day)})) {
		t.Fatal("Complete built nothing")
	}
	got = must(m.All(ctx, rd.Client, 4))
	if !got.Built || got.Floor != t0-4*day || !got.Older || !slices.Equal(actors(got), []int64{7, 8}) {
		t.Fatalf("completed: %+v", got)
	}
	if ms := must(rd.Client.ZScore(ctx, m.Key(4), notifFloor).Result()); int64(ms) != t0-6*day {
		t.Fatalf("completed floor %d, want the newest outside the horizon %d", int64(ms), t0-6*day)
	}
	if !must(m.Complete(ctx, rd.Client, 5, []Notification{f(6, t0-6*day)})) {
		t.Fatal("Complete built nothing")
	}
	got = must(m.All(ctx, rd.Client, 5))
	if !got.Built || !got.Older || len(got.Items) != 0 {
		t.Fatalf("completed with nothing recent: %+v", got)
	}
	if d := must(rd.Client.PExpireTime(ctx, m.Key(5)).Result()); d.Milliseconds() != t0+4*day {
		t.Fatalf("an empty set expires at %d, want now + 4 days %d", d.Milliseconds(), t0+4*day)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
