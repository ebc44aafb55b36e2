package commands_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/commands"
)

func TestRunIdempotent(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	author := register(t, c, "author")
	key := commands.IdempotencyKey{ActorID: author, Key: "k1", RequestHash: []byte("h1")}
	runs := 0
	create := func(ctx context.Context, tx pgx.Tx) (commands.Response, error) {
		runs++
		p, err := c.CreatePost.Exec(ctx, tx, commands.CreatePost{AuthorID: author, Content: "once"})
		return commands.Response{Status: 201, Body: []byte(strconv.FormatInt(p.ID, 10))}, err
	}
	first, replayed, err := c.Tx.RunIdempotent(ctx, key, create)
	if err != nil || replayed || first.Status != 201 {
		t.Fatalf("first: %+v replayed=%v err=%v", first, replayed, err)
	}
	again, replayed, err := c.Tx.RunIdempotent(ctx, key, create)
	if err != nil || !replayed || again.Status != first.Status || string(again.Body) != string(first.Body) {
		t.Fatalf("retry: %+v replayed=%v err=%v, want %+v", again, replayed, err, first)
	}
	if runs != 1 {
		t.Fatalf("command ran %d times", runs)
	}
	// Another actor may use the same key for its own request.
	if _, replayed, err := c.Tx.RunIdempotent(ctx, commands.IdempotencyKey{ActorID: author + 1, Key: "k1", RequestHash: []byte("h1")},
		func(context.Context, pgx.Tx) (commands.Response, error) { return commands.Response{Status: 204}, nil }); err != nil || replayed {
		t.Fatalf("other actor: replayed=%v err=%v", replayed, err)
	}
	// Same key, different request.
	_, _, err = c.Tx.RunIdempotent(ctx, commands.IdempotencyKey{ActorID: author, Key: "k1", RequestHash: []byte("h2")}, create)
	if !errors.Is(err, commands.ErrIdempotencyKeyReused) {
		t.Fatalf("reused key: want ErrIdempotencyKeyReused, got %v", err)
	}
	// A failed first attempt stores nothing: the retry runs normally.
	failKey := commands.IdempotencyKey{ActorID: author, Key: "k2", RequestHash: []byte("h")}
	_, _, err = c.Tx.RunIdempotent(ctx, failKey, func(context.Context, pgx.Tx) (commands.Response, error) {
		return commands.Response{}, commands.ErrForbidden
	})
	if !errors.Is(err, commands.ErrForbidden) {
		t.Fatal(err)
	}
	if _, replayed, err := c.Tx.RunIdempotent(ctx, failKey, create); err != nil || replayed {
		t.Fatalf("after failure: replayed=%v err=%v", replayed, err)
	}
	if n := countEvents(t, b.pool); n != 3 { // UserRegistered + 2 posts
		t.Fatalf("events: %d, want 3", n)
	}
}

func TestRunIdempotentConcurrent(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	author := register(t, c, "author")
	key := commands.IdempotencyKey{ActorID: author, Key: "same", RequestHash: []byte("h")}
	var runs atomic.Int32
	var wg sync.WaitGroup
	results := make([]commands.Response, 50)
	errs := make([]error, 50)
	for i := range 50 {
		wg.Go(func() {
			results[i], _, errs[i] = c.Tx.RunIdempotent(ctx, key, func(ctx context.Context, tx pgx.Tx) (commands.Response, error) {
				runs.Add(1)
				p, err := c.CreatePost.Exec(ctx, tx, commands.CreatePost{AuthorID: author, Content: "once"})
				return commands.Response{Status: 201, Body: []byte(strconv.FormatInt(p.ID, 10))}, err
			})
		})
	}
	wg.Wait()
	for i := range 50 {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if results[i].Status != 201 || string(results[i].Body) != string(results[0].Body) {
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
