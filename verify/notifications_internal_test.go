package verify

import (
	"context"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// TestVerifyNotifications: a small mixed workload of likes, reposts,
// replies, quotes, their undos, a mute and a marker, built in bulk and
// projected by the notifications and followers projectors (applied from
// the events table:
// the whole pipeline's verification is verify_test.go's), compares at
// zero differences; a notification removed from the read model and one
// added to it each show, with the unread counts they change.
func TestVerifyNotifications(t *testing.T) {
	ctx := context.Background()
	db, rd := testenv.NewDB(t), testenv.NewRedis(t)
	ids, err := snowflake.New(7)
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := commands.New(db.Pool, ids, commands.Config{})
	if err != nil {
		t.Fatal(err)
	}
	run := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	var u []int64
	for range 13 {
		x, err := cmds.RegisterUser.Handle(ctx, commands.RegisterUser{Name: "v"})
		run("register", err)
		u = append(u, x.ID)
	}
	var posts []int64
	for i := range 4 {
		p, err := cmds.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: u[i], Content: "n"})
		run("post", err)
		posts = append(posts, p.ID)
		_, err = cmds.Follow.Handle(ctx, commands.Follow{FollowerID: u[11], FolloweeID: u[i]})
		run("follow", err)
	}
	for i, p := range posts {
		for j := 4; j < 9; j++ {
			_, err := cmds.Like.Handle(ctx, commands.Like{UserID: u[j], PostID: p})
			run("like", err)
			if (i+j)%2 == 0 {
				_, err = cmds.Repost.Handle(ctx, commands.Repost{UserID: u[j], PostID: p})
				run("repost", err)
			}
		}
		r, err := cmds.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: u[9], Content: "re", ReplyTo: p})
		run("reply", err)
		q, err := cmds.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: u[10], Content: "q", QuoteOf: p})
		run("quote", err)
		if i%2 == 0 {
			_, err = cmds.DeletePost.Handle(ctx, commands.DeletePost{ActorID: u[9], PostID: r.ID})
			run("delete reply", err)
			_, err = cmds.Unlike.Handle(ctx, commands.Unlike{UserID: u[4], PostID: p})
			run("unlike", err)
			_, err = cmds.Unfollow.Handle(ctx, commands.Unfollow{FollowerID: u[11], FolloweeID: u[i]})
			run("unfollow", err)
		} else {
			_, err = cmds.DeletePost.Handle(ctx, commands.DeletePost{ActorID: u[10], PostID: q.ID})
			run("delete quote", err)
		}
	}
	_, err = cmds.Mute.Handle(ctx, commands.Mute{MuterID: u[1], MutedID: u[5]})
	run("mute", err)

	keys := readmodel.Keys{Prefix: rd.Prefix}
	ps, err := projections.New(projections.Config{Keys: keys}, db.Pool, rd.Client, nil, projections.NameNotifications, projections.NameFollowers)
	run("projectors", err)
	// A built deployment: the bulk build, then the projectors apply the
	// whole log over it (a rebuild's catch-up from the oldest offset).
	_, err = ps[0].(*projections.Notifications).BuildNotifications(ctx, db.Pool, nil)
	run("build", err)
	rows, err := db.Pool.Query(ctx, `SELECT position, stream_id, stream_version, type, payload, recorded_at FROM events ORDER BY position`)
	run("events", err)
	var envs []events.Envelope
	for rows.Next() {
		var e events.Envelope
		run("scan", rows.Scan(&e.Position, &e.StreamID, &e.StreamVersion, &e.Type, &e.Payload, &e.RecordedAt))
		envs = append(envs, e)
	}
	rows.Close()
	for _, e := range envs {
		run("apply "+e.Type, projections.Apply(ctx, ps, e))
	}

	model := readmodel.NewNotifications(keys, 0, 0)
	all, err := model.All(ctx, rd.Client, u[1])
	run("read", err)
	if len(all.Items) < 6 {
		t.Fatalf("user %d has %d notifications, want several", u[1], len(all.Items))
	}
	mk := all.Items[3]
	ms, key := mk.OrderKey()
	run("marker", cmds.SetMarkers(ctx, u[1], commands.Markers{Notifications: &commands.NotificationsMarker{ID: mk.ID(), MS: ms, Key: key}}))

	feed, err := queries.New(queries.Config{Keys: keys, ReadOnly: true, ReadCacheKeys: -1, Logger: testenv.Logger()}, db.Pool, rd.Client)
	run("feed", err)
	testenv.Start(t, feed.Service())
	v := &verifier{cfg: Config{}.withDefaults(), pool: db.Pool, rdb: rd.Client, keys: keys, feed: feed}
	compare := func() map[string][]int64 {
		t.Helper()
		kinds := map[string][]int64{}
		for _, x := range u {
			diffs, err := v.notifications(ctx, x)
			run("compare", err)
			for _, d := range diffs {
				t.Logf("%s", d)
				kinds[d.Kind] = append(kinds[d.Kind], x)
			}
		}
		return kinds
	}
	if kinds := compare(); len(kinds) != 0 {
		t.Fatalf("a converged workload: differences %v", kinds)
	}
	page, err := feed.Notifications(ctx, u[1], "", 50)
	run("page", err)
	if page.Unread == 0 || page.Unread >= len(all.Items) {
		t.Fatalf("unread %d of %d: the marker and the mute should both count", page.Unread, len(all.Items))
	}

	// Corruptions: a notification lost, a foreign one.
	victim := all.Items[0]
	run("zrem", rd.Client.ZRem(ctx, model.Key(u[1]), victim.Member()).Err())
	foreign := readmodel.Notification{Type: readmodel.NotifyLike, Actor: u[12], Post: posts[2], MS: victim.MS + 1}
	run("zadd", rd.Client.ZAdd(ctx, model.Key(u[2]), redis.Z{Score: float64(foreign.MS), Member: foreign.Member()}).Err())
	// A lost set is cold: not compared (the query side completes it).
	run("lose", rd.Client.Del(ctx, model.Key(u[3])).Err())
	kinds := compare()
	if len(kinds) > 0 && (slices.Contains(kinds["notification-missing"], u[3]) || slices.Contains(kinds["notification-unread"], u[3])) {
		t.Fatalf("a lost set compared: %v", kinds)
	}
	if len(kinds["notification-missing"]) != 1 || kinds["notification-missing"][0] != u[1] ||
		len(kinds["notification-foreign"]) != 1 || kinds["notification-foreign"][0] != u[2] {
		t.Fatalf("differences %v: want notification-missing of user %d and notification-foreign of user %d", kinds, u[1], u[2])
	}
	if got := kinds["notification-unread"]; len(got) != 2 || got[0] != u[1] || got[1] != u[2] {
		t.Fatalf("unread differences %v, want users %d's (its newest lost) and %d's (a foreign one)", got, u[1], u[2])
	}
}
