package commands_test

import (
	"context"
	"testing"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/testkit/testenv"
)

// TestMarkersOnlyMoveForward: each marker is replaced only by a greater
// order key; an older or equal one, or an absent one, leaves it.
func TestMarkersOnlyMoveForward(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDB(t)
	ids, err := snowflake.New(9)
	if err != nil {
		t.Fatal(err)
	}
	c, err := commands.New(db.Pool, ids, commands.Config{})
	if err != nil {
		t.Fatal(err)
	}
	u, err := c.RegisterUser.Handle(ctx, commands.RegisterUser{Name: "m"})
	if err != nil {
		t.Fatal(err)
	}
	read := func() (home, notif string) {
		t.Helper()
		var h, n *string
		if err := db.Pool.QueryRow(ctx, `SELECT home, notifications FROM markers WHERE user_id = $1`, u.ID).Scan(&h, &n); err != nil {
			t.Fatal(err)
		}
		if h != nil {
			home = *h
		}
		if n != nil {
			notif = *n
		}
		return home, notif
	}
	set := func(mk commands.Markers) {
		t.Helper()
		if err := c.SetMarkers(ctx, u.ID, mk); err != nil {
			t.Fatal(err)
		}
	}
	home := func(cursor string, ms, id int64) commands.Markers {
		return commands.Markers{Home: &commands.HomeMarker{Cursor: cursor, MS: ms, ID: id}}
	}
	notif := func(id string, ms int64, key string) commands.Markers {
		return commands.Markers{Notifications: &commands.NotificationsMarker{ID: id, MS: ms, Key: []byte(key)}}
	}
	set(home("h2", 200, 5))
	set(notif("n2", 200, "\x05b"))
	for _, step := range []struct {
		mk          commands.Markers
		home, notif string
	}{
		{home("h1", 100, 9), "h2", "n2"},         // older millisecond
		{home("h2b", 200, 4), "h2", "n2"},        // same millisecond, lower id
		{home("h3", 200, 6), "h3", "n2"},         // same millisecond, higher id
		{notif("n1", 199, "\x05z"), "h3", "n2"},  // older
		{notif("n2b", 200, "\x05a"), "h3", "n2"}, // same ms, lower member
		{notif("n3", 200, "\x05c"), "h3", "n3"},  // same ms, higher member
		{commands.Markers{}, "h3", "n3"},         // nothing given
		{home("h4", 300, 1), "h4", "n3"},         // one moves, the other stays
	} {
		set(step.mk)
		if h, n := read(); h != step.home || n != step.notif {
			t.Fatalf("after %+v: home %q, notifications %q; want %q, %q", step.mk, h, n, step.home, step.notif)
		}
	}
}
