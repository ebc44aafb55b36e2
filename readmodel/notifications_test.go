package readmodel

import (
	"context"
	"testing"

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
