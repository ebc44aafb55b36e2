package commands_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/testkit/testenv"
)

type bundle struct {
	pool *pgxpool.Pool
}

func setup(t *testing.T, cfg commands.Config) (*commands.Commands, bundle) {
	t.Helper()
	db := testenv.NewDB(t)
	ids, err := snowflake.New(1)
	if err != nil {
		t.Fatal(err)
	}
	c, err := commands.New(db.Pool, ids, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, bundle{pool: db.Pool}
}

func register(t *testing.T, c *commands.Commands, name string) int64 {
	t.Helper()
	u, err := c.RegisterUser.Handle(context.Background(), commands.RegisterUser{Name: name})
	if err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
	return u.ID
}

type storedEvent struct {
	Stream  string
	Version int64
	Type    string
	Event   events.Event
	Meta    events.Metadata
}

func streamEvents(t *testing.T, pool *pgxpool.Pool, stream string) []storedEvent {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT stream_id, stream_version, type, payload, metadata FROM events WHERE stream_id = $1 ORDER BY stream_version`, stream)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []storedEvent
	for rows.Next() {
		var e storedEvent
		var payload []byte
		if err := rows.Scan(&e.Stream, &e.Version, &e.Type, &payload, &e.Meta); err != nil {
			t.Fatal(err)
		}
		if e.Event, err = events.DefaultCodec.Decode(e.Type, payload); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func countEvents(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRegisterUser(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	u, err := c.RegisterUser.Handle(ctx, commands.RegisterUser{Name: "ana", Trace: commands.Trace{CorrelationID: "corr", CausationID: "cause"}})
	if err != nil {
		t.Fatal(err)
	}
	if u.ID <= 0 || u.Name != "ana" {
		t.Fatalf("user: %+v", u)
	}
	evs := streamEvents(t, b.pool, events.UserStream(u.ID))
	if len(evs) != 1 || evs[0].Version != 1 || evs[0].Event != (events.UserRegistered{UserID: u.ID, Name: "ana"}) {
		t.Fatalf("events: %+v", evs)
	}
	if m := evs[0].Meta; m.CorrelationID != "corr" || m.CausationID != "cause" || m.Actor != "1" {
		t.Fatalf("metadata: %+v", m)
	}
	got, err := c.GetUser(ctx, u.ID)
	if err != nil || got != (commands.User{ID: u.ID, Name: "ana"}) {
		t.Fatalf("GetUser: %+v, %v", got, err)
	}
	if _, err := c.GetUser(ctx, u.ID+100); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("GetUser of unknown user: want ErrNotFound, got %v", err)
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{MaxContentChars: 5})
	ctx := context.Background()
	author := register(t, c, "author")
	before := countEvents(t, b.pool)
	cases := []struct {
		name string
		run  func() error
		want error
	}{
		{"empty content", func() error {
			_, err := c.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: author, Content: ""})
			return err
		}, commands.ErrInvalid},
		{"blank content", func() error {
			_, err := c.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: author, Content: " \n\t"})
			return err
		}, commands.ErrInvalid},
		{"content over max runes", func() error {
			_, err := c.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: author, Content: "ãããããã"})
			return err
		}, commands.ErrInvalid},
		{"invalid UTF-8", func() error {
			_, err := c.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: author, Content: "a\xffb"})
			return err
		}, commands.ErrInvalid},
		{"NUL", func() error {
			_, err := c.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: author, Content: "a\x00"})
			return err
		}, commands.ErrInvalid},
		{"unknown author", func() error {
			_, err := c.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: author + 99, Content: "hi"})
			return err
		}, commands.ErrNotFound},
		{"zero author", func() error {
			_, err := c.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: 0, Content: "hi"})
			return err
		}, commands.ErrInvalid},
		{"empty name", func() error { _, err := c.RegisterUser.Handle(ctx, commands.RegisterUser{Name: ""}); return err }, commands.ErrInvalid},
		{"long name", func() error {
			_, err := c.RegisterUser.Handle(ctx, commands.RegisterUser{Name: strings.Repeat("n", 101)})
			return err
		}, commands.ErrInvalid},
		{"self follow", func() error {
			_, err := c.Follow.Handle(ctx, commands.Follow{FollowerID: author, FolloweeID: author})
			return err
		}, commands.ErrInvalid},
		{"self unfollow", func() error {
			_, err := c.Unfollow.Handle(ctx, commands.Unfollow{FollowerID: author, FolloweeID: author})
			return err
		}, commands.ErrInvalid},
		{"follow unknown followee", func() error {
			_, err := c.Follow.Handle(ctx, commands.Follow{FollowerID: author, FolloweeID: author + 99})
			return err
		}, commands.ErrNotFound},
		{"follow by unknown follower", func() error {
			_, err := c.Follow.Handle(ctx, commands.Follow{FollowerID: author + 99, FolloweeID: author})
			return err
		}, commands.ErrNotFound},
		{"unfollow unknown", func() error {
			_, err := c.Unfollow.Handle(ctx, commands.Unfollow{FollowerID: author, FolloweeID: author + 99})
			return err
		}, commands.ErrNotFound},
		{"delete unknown post", func() error {
			_, err := c.DeletePost.Handle(ctx, commands.DeletePost{ActorID: author, PostID: 12345})
			return err
		}, commands.ErrNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.run(); !errors.Is(err, tc.want) {
				t.Fatalf("want %v, got %v", tc.want, err)
			}
		})
	}
	if after := countEvents(t, b.pool); after != before {
		t.Fatalf("rejected commands appended %d events", after-before)
	}
	// Exactly at the limit, counted in runes (5 runes, 10 bytes) is fine.
	if _, err := c.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: author, Content: "ããããã"}); err != nil {
		t.Fatalf("content at the limit: %v", err)
	}
}

func TestCreatePost(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	author, fan := register(t, c, "author"), register(t, c, "fan")
	if _, err := c.Follow.Handle(ctx, commands.Follow{FollowerID: fan, FolloweeID: author}); err != nil {
		t.Fatal(err)
	}
	p, err := c.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: author, Content: "olá mundo"})
	if err != nil {
		t.Fatal(err)
	}
	if !p.CreatedAt.Equal(snowflake.Time(p.ID)) || p.CreatedAt.Location() != time.UTC {
		t.Fatalf("createdAt %v is not the snowflake's millisecond %v", p.CreatedAt, snowflake.Time(p.ID))
	}
	evs := streamEvents(t, b.pool, events.PostStream(p.ID))
	want := events.PostCreated{PostID: p.ID, AuthorID: author, Content: "olá mundo", CreatedAt: p.CreatedAt, AuthorFollowers: 1}
	if len(evs) != 1 || evs[0].Version != 1 {
		t.Fatalf("events: %+v", evs)
	}
	if got := evs[0].Event.(events.PostCreated); !got.CreatedAt.Equal(want.CreatedAt) || got.AuthorFollowers != 1 || got.Content != want.Content || got.PostID != p.ID {
		t.Fatalf("event %+v, want %+v", got, want)
	}
	var stored time.Time
	if err := b.pool.QueryRow(ctx, `SELECT created_at FROM posts WHERE id = $1`, p.ID).Scan(&stored); err != nil || !stored.Equal(p.CreatedAt) {
		t.Fatalf("posts row created_at %v (%v), want %v", stored, err, p.CreatedAt)
	}
}

func TestDeletePost(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	author, other := register(t, c, "author"), register(t, c, "other")
	p, err := c.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: author, Content: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeletePost.Handle(ctx, commands.DeletePost{ActorID: other, PostID: p.ID}); !errors.Is(err, commands.ErrForbidden) {
		t.Fatalf("delete by another user: want ErrForbidden, got %v", err)
	}
	deleted, err := c.DeletePost.Handle(ctx, commands.DeletePost{ActorID: author, PostID: p.ID})
	if err != nil || !deleted {
		t.Fatalf("first delete: %v, %v", deleted, err)
	}
	deleted, err = c.DeletePost.Handle(ctx, commands.DeletePost{ActorID: author, PostID: p.ID})
	if err != nil || deleted {
		t.Fatalf("second delete: want no-op success, got %v, %v", deleted, err)
	}
	evs := streamEvents(t, b.pool, events.PostStream(p.ID))
	if len(evs) != 2 || evs[1].Version != 2 || evs[1].Type != events.TypePostDeleted {
		t.Fatalf("events: %+v", evs)
	}
	if d := evs[1].Event.(events.PostDeleted); d.AuthorID != author || d.PostID != p.ID || d.DeletedAt.IsZero() {
		t.Fatalf("PostDeleted: %+v", d)
	}
}

func TestFollowUnfollow(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	a, z, y := register(t, c, "a"), register(t, c, "z"), register(t, c, "y")
	follow := func(from, to int64, wantChanged bool) {
		t.Helper()
		changed, err := c.Follow.Handle(ctx, commands.Follow{FollowerID: from, FolloweeID: to})
		if err != nil || changed != wantChanged {
			t.Fatalf("follow %d->%d: changed=%v err=%v, want changed=%v", from, to, changed, err, wantChanged)
		}
	}
	unfollow := func(from, to int64, wantChanged bool) {
		t.Helper()
		changed, err := c.Unfollow.Handle(ctx, commands.Unfollow{FollowerID: from, FolloweeID: to})
		if err != nil || changed != wantChanged {
			t.Fatalf("unfollow %d->%d: changed=%v err=%v, want changed=%v", from, to, changed, err, wantChanged)
		}
	}
	unfollow(a, z, false) // not following: no-op
	follow(a, z, true)
	follow(a, z, false) // repeat: no-op
	follow(y, z, true)
	unfollow(a, z, true)
	unfollow(a, z, false)
	follow(a, z, true)

	evs := streamEvents(t, b.pool, events.FollowStream(a, z))
	wantTypes := []string{events.TypeFollowed, events.TypeUnfollowed, events.TypeFollowed}
	wantCounts := []int64{1, 1, 2} // z's followers after each change: a; y (a left); a and y
	if len(evs) != len(wantTypes) {
		t.Fatalf("events: %+v", evs)
	}
	for i, e := range evs {
		if e.Version != int64(i+1) || e.Type != wantTypes[i] {
			t.Fatalf("event %d: %+v", i, e)
		}
		n := followeeFollowers(e.Event)
		if n != wantCounts[i] {
			t.Fatalf("event %d followeeFollowers %d, want %d", i, n, wantCounts[i])
		}
	}
	zu, _ := c.GetUser(ctx, z)
	au, _ := c.GetUser(ctx, a)
	if zu.FollowerCount != 2 || zu.FollowingCount != 0 || au.FollowingCount != 1 || au.FollowerCount != 0 {
		t.Fatalf("counts: z=%+v a=%+v", zu, au)
	}
}

// Follows and unfollows of one pair racing each other: the pair's events
// are at versions 1..n without a gap, alternate Followed and Unfollowed,
// and each carries the followee's count after exactly that change; the
// counts end where the last event says. The follow's row change, counts
// and event are one statement after the users' locks, which computes the
// stream's next version itself.
func TestConcurrentFollowUnfollowOfOnePair(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	a, z := register(t, c, "a"), register(t, c, "z")
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for range 8 {
		wg.Go(func() {
			for range 10 {
				if _, err := c.Follow.Handle(ctx, commands.Follow{FollowerID: a, FolloweeID: z}); err != nil {
					errs <- err
				}
				if _, err := c.Unfollow.Handle(ctx, commands.Unfollow{FollowerID: a, FolloweeID: z}); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("follow or unfollow failed: %v", err)
	}
	evs := streamEvents(t, b.pool, events.FollowStream(a, z))
	if len(evs) == 0 || len(evs)%2 != 0 {
		t.Fatalf("%d events, want an even number > 0 (each follow undone)", len(evs))
	}
	for i, e := range evs {
		want, count := events.TypeFollowed, int64(1)
		if i%2 == 1 {
			want, count = events.TypeUnfollowed, 0
		}
		n := followeeFollowers(e.Event)
		if e.Version != int64(i+1) || e.Type != want || n != count {
			t.Fatalf("event %d: version %d, %s, followeeFollowers %d; want version %d, %s, %d", i, e.Version, e.Type, n, i+1, want, count)
		}
	}
	zu, _ := c.GetUser(ctx, z)
	au, _ := c.GetUser(ctx, a)
	if zu.FollowerCount != 0 || au.FollowingCount != 0 {
		t.Fatalf("counts after every follow was undone: z has %d followers, a follows %d", zu.FollowerCount, au.FollowingCount)
	}
}

func TestConcurrentIdenticalFollowsAppendOnce(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	a, z := register(t, c, "a"), register(t, c, "z")
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	changes := make(chan bool, 50)
	for range 50 {
		wg.Go(func() {
			changed, err := c.Follow.Handle(ctx, commands.Follow{FollowerID: a, FolloweeID: z})
			errs <- err
			changes <- changed
		})
	}
	wg.Wait()
	close(errs)
	close(changes)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent follow failed: %v", err)
		}
	}
	n := 0
	for ch := range changes {
		if ch {
			n++
		}
	}
	if evs := streamEvents(t, b.pool, events.FollowStream(a, z)); len(evs) != 1 || n != 1 {
		t.Fatalf("want exactly one Followed and one change, got %d events, %d changes", len(evs), n)
	}
	if zu, _ := c.GetUser(ctx, z); zu.FollowerCount != 1 {
		t.Fatalf("follower count %d, want 1", zu.FollowerCount)
	}
}

func TestAppendVersionConflict(t *testing.T) {
	t.Parallel()
	_, b := setup(t, commands.Config{})
	ctx := context.Background()
	ev := events.Followed{FollowerID: 1, FolloweeID: 2, FolloweeFollowers: 1}

	// Two transactions append at the same expected version: the second
	// waits on the unique index for the first, then conflicts.
	tx1, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback(ctx)
	if err := commands.Append(ctx, tx1, 0, events.Metadata{}, ev); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() {
		second <- pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			return commands.Append(ctx, tx, 0, events.Metadata{}, ev)
		})
	}()
	waitingFor(t, b.pool, "INSERT INTO events", "the second append") // blocked on the index
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-second; !errors.Is(err, commands.ErrVersionConflict) {
		t.Fatalf("second append: want ErrVersionConflict, got %v", err)
	}

	// A stale or future expected version against the committed head.
	for _, v := range []int64{0, 2} {
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			return commands.Append(ctx, tx, v, events.Metadata{}, ev)
		})
		if !errors.Is(err, commands.ErrVersionConflict) {
			t.Fatalf("append at %d with head 1: want ErrVersionConflict, got %v", v, err)
		}
	}
	// The right version succeeds, and several events take consecutive versions.
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		return commands.Append(ctx, tx, 1, events.Metadata{}, events.Unfollowed{FollowerID: 1, FolloweeID: 2}, ev)
	})
	if err != nil {
		t.Fatal(err)
	}
	if evs := streamEvents(t, b.pool, events.FollowStream(1, 2)); len(evs) != 3 || evs[2].Version != 3 {
		t.Fatalf("events: %+v", evs)
	}
}

func TestAppendRejectsMixedStreams(t *testing.T) {
	t.Parallel()
	_, b := setup(t, commands.Config{})
	err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		return commands.Append(context.Background(), tx, 0, events.Metadata{},
			events.Followed{FollowerID: 1, FolloweeID: 2}, events.Followed{FollowerID: 1, FolloweeID: 3})
	})
	if err == nil {
		t.Fatal("append of two streams succeeded")
	}
}

func TestRunnerRetriesConflicts(t *testing.T) {
	t.Parallel()
	c, _ := setup(t, commands.Config{MaxAttempts: 3})
	attempts := 0
	err := c.Tx.Run(context.Background(), func(ctx context.Context, tx pgx.Tx) error {
		attempts++
		if attempts < 3 {
			return commands.ErrVersionConflict
		}
		return nil
	})
	if err != nil || attempts != 3 {
		t.Fatalf("want success on attempt 3, got %v after %d", err, attempts)
	}
	attempts = 0
	err = c.Tx.Run(context.Background(), func(ctx context.Context, tx pgx.Tx) error {
		attempts++
		return commands.ErrVersionConflict
	})
	if !errors.Is(err, commands.ErrVersionConflict) || attempts != 3 {
		t.Fatalf("want ErrVersionConflict after 3 attempts, got %v after %d", err, attempts)
	}
	attempts = 0
	err = c.Tx.Run(context.Background(), func(ctx context.Context, tx pgx.Tx) error {
		attempts++
		return commands.ErrForbidden
	})
	if !errors.Is(err, commands.ErrForbidden) || attempts != 1 {
		t.Fatalf("domain errors must not be retried: %v after %d", err, attempts)
	}
}

func TestConcurrentAppendsAtOneVersion(t *testing.T) {
	t.Parallel()
	_, b := setup(t, commands.Config{})
	ctx := context.Background()
	const n = 10
	start := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				return commands.Append(ctx, tx, 0, events.Metadata{}, events.Followed{FollowerID: 5, FolloweeID: 6, FolloweeFollowers: int64(i)})
			})
		})
	}
	close(start)
	wg.Wait()
	ok, conflicts := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, commands.ErrVersionConflict):
			conflicts++
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	if ok != 1 || conflicts != n-1 {
		t.Fatalf("%d appends at version 0: %d succeeded, %d conflicted; want 1 and %d", n, ok, conflicts, n-1)
	}
	if evs := streamEvents(t, b.pool, events.FollowStream(5, 6)); len(evs) != 1 {
		t.Fatalf("stream has %d events", len(evs))
	}
}

// followeeFollowers is the count a Followed or Unfollowed carries.
func followeeFollowers(ev events.Event) int64 {
	switch ev := ev.(type) {
	case events.Followed:
		return ev.FolloweeFollowers
	case events.Unfollowed:
		return ev.FolloweeFollowers
	}
	return -1
}
