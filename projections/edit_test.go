package projections_test

import (
	"context"
	"strings"
	"testing"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// Edits change the post cache's body and nothing else: the inboxes and
// timelines are byte for byte those of the same history without the
// edits. Redelivered and reordered (every edit, creation and deletion
// applied again, in reverse), the body is the newest version's content,
// or the tombstone once deleted.
func TestPostEditsIdempotentAndOrdered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	author, reader := w.user(true), w.user(true)
	w.follow(reader, author)
	kept, gone := w.post(author), w.post(author)
	plain := len(w.envs)
	w.edit(author, kept, "second")
	w.edit(author, kept, "third")
	w.edit(author, gone, "gone soon")
	w.del(author, gone)

	// Every sequence is applied to rd, and without its edits to ref: the
	// two must differ only in post bodies.
	rd, ref := testenv.NewRedis(t), testenv.NewRedis(t)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	ps := newProjectors(t, w, rd.Client, projections.Config{Keys: keys})
	refPs := newProjectors(t, w, ref.Client, projections.Config{Keys: readmodel.Keys{Prefix: ref.Prefix}})
	apply := func(envs ...events.Envelope) {
		t.Helper()
		for _, e := range envs {
			if err := projections.Apply(ctx, ps, e); err != nil {
				t.Fatal(err)
			}
			if e.Type != events.TypePostEdited {
				if err := projections.Apply(ctx, refPs, e); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	withoutPosts := func(m map[string]string) map[string]string {
		for k := range m {
			if strings.Contains(k, "post:") {
				delete(m, k)
			}
		}
		return m
	}
	check := func(when string) {
		t.Helper()
		var p readmodel.Post
		if err := jsonGet(rd.Client, keys.Post(kept), &p); err != nil {
			t.Fatal(err)
		}
		if p.Content != "third" || p.Version != 3 || p.EditedAt == "" || p.Deleted || p.AuthorID != author ||
			p.CreatedAt != snowflake.Time(kept).Format(events.CreatedAtLayout) {
			t.Fatalf("%s: edited body %+v, want content third at version 3", when, p)
		}
		var d readmodel.Post
		if err := jsonGet(rd.Client, keys.Post(gone), &d); err != nil {
			t.Fatal(err)
		}
		if !d.Deleted || d.Content != "" {
			t.Fatalf("%s: deleted post's body %+v, want the tombstone", when, d)
		}
		want, got := withoutPosts(dump(t, ref.Client, ref.Prefix)), withoutPosts(dump(t, rd.Client, rd.Prefix))
		if len(got) == 0 {
			t.Fatalf("%s: no inbox or timeline written", when)
		}
		if d := diff(want, got); d != "" {
			t.Fatalf("%s: an edit touched a read model other than the post cache:\n%s", when, d)
		}
	}
	apply(w.envs...)
	check("applied once")

	// Redelivery in reverse order: the deletion, the edits newest first,
	// then the creations.
	for i := len(w.envs) - 1; i >= 0; i-- {
		apply(w.envs[i])
	}
	check("redelivered in reverse")
	// An older edit alone after the newer ones.
	for _, e := range w.envs[plain:] {
		if e.Type == events.TypePostEdited && e.StreamVersion == 2 {
			apply(e)
		}
	}
	check("an older edit again")

	// An edit whose body was lost (flushed, expired) writes nothing: the
	// edit does not carry the whole post (a reply's parent, a quote,
	// media), and a read of an absent body asks PostgreSQL. Replaying the
	// partition, which brings the creation before the edits, rebuilds it.
	if err := rd.Client.Del(ctx, keys.Post(kept)).Err(); err != nil {
		t.Fatal(err)
	}
	var edits []events.Envelope
	for _, e := range w.envs[plain:] {
		if e.Type == events.TypePostEdited && e.StreamID == events.PostStream(kept) {
			edits = append(edits, e)
		}
	}
	apply(edits...)
	if n := rd.Client.Exists(ctx, keys.Post(kept)).Val(); n != 0 {
		t.Fatalf("an edit of a lost body wrote one: %q", rd.Client.Get(ctx, keys.Post(kept)).Val())
	}
	apply(w.envs...)
	check("the partition replayed after a lost body")
}

// feed rebuild posts builds the edited content with its version, so the
// edits a rebuild's catch-up applies again change nothing.
func TestBuildPostsKeepsEdits(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	author := w.user(true)
	p := w.post(author)
	w.edit(author, p, "second")
	w.edit(author, p, "third")
	rd := testenv.NewRedis(t)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	ps := newProjectors(t, w, rd.Client, projections.Config{Keys: keys})
	var posts *projections.Posts
	for _, x := range ps {
		if pp, ok := x.(*projections.Posts); ok {
			posts = pp
		}
	}
	if _, err := posts.BuildPosts(context.Background(), w.db.Pool, nil); err != nil {
		t.Fatal(err)
	}
	applyAll(t, ps, w.envs) // the catch-up
	var body readmodel.Post
	if err := jsonGet(rd.Client, keys.Post(p), &body); err != nil {
		t.Fatal(err)
	}
	if body.Content != "third" || body.Version != 3 || body.EditedAt == "" {
		t.Fatalf("built body %+v, want the third version", body)
	}
}
