package commands_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/commands"
)

// countedCreate runs CreatePost's work under Idempotent in the runner's
// transaction, as the CreatePost entry point does, counting the runs of the
// work itself.
func countedCreate(c *commands.Commands, runs *atomic.Int32) func(context.Context, commands.CreatePost, string) (commands.Post, bool, error) {
	h := commands.Idempotent("create-post", func(ctx context.Context, tx pgx.Tx, cmd commands.CreatePost) (commands.Post, error) {
		runs.Add(1)
		return c.CreatePost.Exec(ctx, tx, cmd)
	})
	return func(ctx context.Context, cmd commands.CreatePost, key string) (p commands.Post, replayed bool, err error) {
		err = c.Tx.Run(ctx, func(ctx context.Context, tx pgx.Tx) error {
			p, replayed, err = h(ctx, tx, cmd, key)
			return err
		})
		return p, replayed, err
	}
}

func samePost(a, b commands.Post) bool {
	return a.ID == b.ID && a.AuthorID == b.AuthorID && a.Content == b.Content && a.CreatedAt.Equal(b.CreatedAt)
}

func TestIdempotent(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	author := register(t, c, "author")
	var runs atomic.Int32
	create := countedCreate(c, &runs)
	cmd := commands.CreatePost{AuthorID: author, Content: "once", Trace: commands.Trace{CausationID: "req-1"}}
	first, replayed, err := create(ctx, cmd, "k1")
	if err != nil || replayed || first.ID == 0 {
		t.Fatalf("first: %+v replayed=%v err=%v", first, replayed, err)
	}
	// A retry is another request (its own trace) of the same command.
	cmd.Trace = commands.Trace{CausationID: "req-2"}
	again, replayed, err := create(ctx, cmd, "k1")
	if err != nil || !replayed || !samePost(again, first) {
		t.Fatalf("retry: %+v replayed=%v err=%v, want %+v", again, replayed, err, first)
	}
	if runs.Load() != 1 {
		t.Fatalf("command ran %d times", runs.Load())
	}
	// Another actor may use the same key for its own command.
	other := commands.Idempotent("follow", func(context.Context, pgx.Tx, commands.Follow) (bool, error) { return true, nil })
	err = c.Tx.Run(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, replayed, err = other(ctx, tx, commands.Follow{FollowerID: author + 1, FolloweeID: author}, "k1")
		return err
	})
	if err != nil || replayed {
		t.Fatalf("other actor: replayed=%v err=%v", replayed, err)
	}
	// Same key, different command inputs.
	_, _, err = create(ctx, commands.CreatePost{AuthorID: author, Content: "twice"}, "k1")
	if !errors.Is(err, commands.ErrIdempotencyKeyReused) {
		t.Fatalf("reused key: want ErrIdempotencyKeyReused, got %v", err)
	}
	// Same key, another command of the same actor.
	if _, _, err := c.Follow.Do(ctx, commands.Follow{FollowerID: author, FolloweeID: author + 1}, "k1"); !errors.Is(err, commands.ErrIdempotencyKeyReused) {
		t.Fatalf("key reused by another command: want ErrIdempotencyKeyReused, got %v", err)
	}
	// A failed first attempt stores nothing: the retry runs normally.
	failing := commands.Idempotent("create-post", func(context.Context, pgx.Tx, commands.CreatePost) (commands.Post, error) {
		return commands.Post{}, commands.ErrForbidden
	})
	err = c.Tx.Run(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, _, err := failing(ctx, tx, cmd, "k2")
		return err
	})
	if !errors.Is(err, commands.ErrForbidden) {
		t.Fatal(err)
	}
	if _, replayed, err := create(ctx, cmd, "k2"); err != nil || replayed {
		t.Fatalf("after failure: replayed=%v err=%v", replayed, err)
	}
	if n := countEvents(t, b.pool); n != 3 { // UserRegistered + 2 posts
		t.Fatalf("events: %d, want 3", n)
	}
}

func TestHandlerDoReplays(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	u1, replayed, err := c.RegisterUser.Do(ctx, commands.RegisterUser{Name: "ana"}, "reg")
	if err != nil || replayed {
		t.Fatalf("register: %+v replayed=%v err=%v", u1, replayed, err)
	}
	u2, replayed, err := c.RegisterUser.Do(ctx, commands.RegisterUser{Name: "ana"}, "reg")
	if err != nil || !replayed || u2 != u1 {
		t.Fatalf("register again: %+v replayed=%v err=%v, want %+v", u2, replayed, err, u1)
	}
	p, _, err := c.CreatePost.Do(ctx, commands.CreatePost{AuthorID: u1.ID, Content: "x"}, "")
	if err != nil {
		t.Fatal(err)
	}
	del := commands.DeletePost{ActorID: u1.ID, PostID: p.ID}
	if deleted, replayed, err := c.DeletePost.Do(ctx, del, "del"); err != nil || replayed || !deleted {
		t.Fatalf("delete: deleted=%v replayed=%v err=%v", deleted, replayed, err)
	}
	// The replay is the first delete's result, not a second delete's.
	if deleted, replayed, err := c.DeletePost.Do(ctx, del, "del"); err != nil || !replayed || !deleted {
		t.Fatalf("delete replay: deleted=%v replayed=%v err=%v", deleted, replayed, err)
	}
	if _, _, err := c.DeletePost.Do(ctx, del, strings.Repeat("k", 201)); !errors.Is(err, commands.ErrInvalid) {
		t.Fatalf("over-long key: want ErrInvalid, got %v", err)
	}
	if n := countEvents(t, b.pool); n != 3 { // UserRegistered, PostCreated, PostDeleted
		t.Fatalf("events: %d, want 3", n)
	}
}

func TestIdempotentConcurrent(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	author := register(t, c, "author")
	var runs atomic.Int32
	create := countedCreate(c, &runs)
	var wg sync.WaitGroup
	results := make([]commands.Post, 50)
	errs := make([]error, 50)
	for i := range 50 {
		wg.Go(func() {
			results[i], _, errs[i] = create(ctx, commands.CreatePost{AuthorID: author, Content: "once"}, "same")
		})
	}
	wg.Wait()
	for i := range 50 {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if results[i].ID == 0 || !samePost(results[i], results[0]) {
			t.Fatalf("request %d got %+v, request 0 got %+v", i, results[i], results[0])
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("command ran %d times", runs.Load())
	}
	if n := countEvents(t, b.pool); n != 2 {
		t.Fatalf("events: %d, want 2 (registration and one post)", n)
	}
}

func TestValidateIdempotencyKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"a", true},
		{strings.Repeat("k", 200), true},
		{strings.Repeat("k", 201), false},
		{"", false},
		{"tab\there", false},
		{"é", false},
	} {
		if err := commands.ValidateIdempotencyKey(tc.key); (err == nil) != tc.ok {
			t.Errorf("ValidateIdempotencyKey(%q) = %v, want ok=%v", tc.key, err, tc.ok)
		}
	}
}
