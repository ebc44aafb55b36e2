package commands_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/events"
)

func TestEditPost(t *testing.T) {
	c, b := setup(t, commands.Config{MaxContentChars: 10})
	ctx := context.Background()
	ana, bo := register(t, c, "ana"), register(t, c, "bo")
	p, err := c.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: ana, Content: "first"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Version != 1 || p.EditedAt != nil {
		t.Fatalf("created post: version %d, editedAt %v; want 1, nil", p.Version, p.EditedAt)
	}

	e1, err := c.EditPost.Handle(ctx, commands.EditPost{ActorID: ana, PostID: p.ID, Content: "second"})
	if err != nil {
		t.Fatal(err)
	}
	if e1.Content != "second" || e1.Version != 2 || e1.EditedAt == nil || !e1.CreatedAt.Equal(p.CreatedAt) || e1.AuthorID != ana {
		t.Fatalf("edit: %+v", e1)
	}
	e2, err := c.EditPost.Handle(ctx, commands.EditPost{ActorID: ana, PostID: p.ID, Content: "third", IfVersion: 2})
	if err != nil || e2.Version != 3 {
		t.Fatalf("edit at version 2: %+v, %v", e2, err)
	}
	// The same content again appends nothing and answers the post as it is.
	same, err := c.EditPost.Handle(ctx, commands.EditPost{ActorID: ana, PostID: p.ID, Content: "third"})
	if err != nil || same.Version != 3 || same.Content != "third" || same.EditedAt == nil || !same.EditedAt.Equal(*e2.EditedAt) {
		t.Fatalf("unchanged edit: %+v, %v", same, err)
	}

	// Refusals, none of which appends.
	before := countEvents(t, b.pool)
	for _, tc := range []struct {
		name string
		cmd  commands.EditPost
		want error
	}{
		{"another author", commands.EditPost{ActorID: bo, PostID: p.ID, Content: "x"}, commands.ErrForbidden},
		{"stale If-Match", commands.EditPost{ActorID: ana, PostID: p.ID, Content: "x", IfVersion: 2}, commands.ErrStaleVersion},
		{"future If-Match", commands.EditPost{ActorID: ana, PostID: p.ID, Content: "x", IfVersion: 9}, commands.ErrStaleVersion},
		{"unknown post", commands.EditPost{ActorID: ana, PostID: p.ID + 1, Content: "x"}, commands.ErrNotFound},
		{"empty", commands.EditPost{ActorID: ana, PostID: p.ID, Content: " "}, commands.ErrInvalid},
		{"too long", commands.EditPost{ActorID: ana, PostID: p.ID, Content: strings.Repeat("é", 11)}, commands.ErrInvalid},
		{"NUL", commands.EditPost{ActorID: ana, PostID: p.ID, Content: "a\x00"}, commands.ErrInvalid},
		{"bad id", commands.EditPost{ActorID: ana, PostID: 0, Content: "x"}, commands.ErrInvalid},
	} {
		if _, err := c.EditPost.Handle(ctx, tc.cmd); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := c.EditPost.Handle(ctx, commands.EditPost{ActorID: ana, PostID: p.ID, Content: "x", IfVersion: 2}); errors.Is(err, commands.ErrVersionConflict) {
		t.Errorf("a stale If-Match is not a lost race (the runner would retry it): %v", err)
	}
	if n := countEvents(t, b.pool); n != before {
		t.Fatalf("refused edits appended %d events", n-before)
	}

	// The deletion follows the edits in the stream; a deleted post is not
	// edited.
	if ok, err := c.DeletePost.Handle(ctx, commands.DeletePost{ActorID: ana, PostID: p.ID}); err != nil || !ok {
		t.Fatalf("delete: %v %v", ok, err)
	}
	if _, err := c.EditPost.Handle(ctx, commands.EditPost{ActorID: ana, PostID: p.ID, Content: "x"}); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("edit of a deleted post: %v, want ErrNotFound", err)
	}
	evs := streamEvents(t, b.pool, events.PostStream(p.ID))
	types := []string{events.TypePostCreated, events.TypePostEdited, events.TypePostEdited, events.TypePostDeleted}
	if len(evs) != len(types) {
		t.Fatalf("stream has %d events, want %d", len(evs), len(types))
	}
	for i, e := range evs {
		if e.Type != types[i] || e.Version != int64(i+1) {
			t.Errorf("event %d: %s at %d, want %s at %d", i, e.Type, e.Version, types[i], i+1)
		}
	}
	if ed, ok := evs[2].Event.(events.PostEdited); !ok || ed.Content != "third" || ed.Version != 3 || ed.AuthorID != ana || ed.PostID != p.ID {
		t.Fatalf("second edit event: %+v", evs[2].Event)
	}
	var content string
	var version int64
	if err := b.pool.QueryRow(ctx, `SELECT content, version FROM posts WHERE id = $1`, p.ID).Scan(&content, &version); err != nil {
		t.Fatal(err)
	}
	if content != "third" || version != 3 {
		t.Fatalf("posts row: %q at %d", content, version)
	}
}

// Concurrent edits of one post serialise on its row: each is appended at
// its own version, none is lost to a conflict, and the row holds the
// content of the last version.
func TestConcurrentEditsSerialise(t *testing.T) {
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	ana := register(t, c, "ana")
	p, err := c.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: ana, Content: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 12
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.EditPost.Handle(ctx, commands.EditPost{ActorID: ana, PostID: p.ID, Content: "edit " + string(rune('a'+i))})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	evs := streamEvents(t, b.pool, events.PostStream(p.ID))
	if len(evs) != n+1 {
		t.Fatalf("%d events, want %d", len(evs), n+1)
	}
	last := evs[len(evs)-1].Event.(events.PostEdited)
	var content string
	var version int64
	if err := b.pool.QueryRow(ctx, `SELECT content, version FROM posts WHERE id = $1`, p.ID).Scan(&content, &version); err != nil {
		t.Fatal(err)
	}
	if version != n+1 || last.Version != n+1 || content != last.Content {
		t.Fatalf("row %q at %d; last event %q at %d", content, version, last.Content, last.Version)
	}
}
