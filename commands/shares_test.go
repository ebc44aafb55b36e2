package commands_test

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/events"
)

// counts reads a post's reply, repost and like counts.
func counts(t *testing.T, pool *pgxpool.Pool, post int64) [3]int64 {
	t.Helper()
	var c [3]int64
	if err := pool.QueryRow(context.Background(), `SELECT reply_count, repost_count, like_count FROM posts WHERE id = $1`, post).Scan(&c[0], &c[1], &c[2]); err != nil {
		t.Fatal(err)
	}
	return c
}

func post(t *testing.T, c *commands.Commands, cmd commands.CreatePost) commands.Post {
	t.Helper()
	p, err := c.CreatePost.Handle(context.Background(), cmd)
	if err != nil {
		t.Fatalf("post %+v: %v", cmd, err)
	}
	return p
}

func block(t *testing.T, c *commands.Commands, blocker, blocked int64) {
	t.Helper()
	if _, err := c.Block.Handle(context.Background(), commands.Block{BlockerID: blocker, BlockedID: blocked}); err != nil {
		t.Fatal(err)
	}
}

func deletePost(t *testing.T, c *commands.Commands, author, id int64) {
	t.Helper()
	if _, err := c.DeletePost.Handle(context.Background(), commands.DeletePost{ActorID: author, PostID: id}); err != nil {
		t.Fatal(err)
	}
}

// A reply names its parent, the parent's author and the thread's root (the
// parent's root for a reply to a reply); the parent counts it while it
// lives. A quote names the quoted post and its author; a reply may quote.
// A repost's id stands for its original.
func TestReplyAndQuote(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	ana, bob, cy := register(t, c, "ana"), register(t, c, "bob"), register(t, c, "cy")
	root := post(t, c, commands.CreatePost{AuthorID: ana, Content: "root"})
	reply := post(t, c, commands.CreatePost{AuthorID: bob, Content: "re", ReplyTo: root.ID})
	if reply.ReplyTo == nil || *reply.ReplyTo != (commands.PostRef{ID: root.ID, AuthorID: ana}) || reply.ReplyRoot != root.ID {
		t.Fatalf("reply: %+v", reply)
	}
	deeper := post(t, c, commands.CreatePost{AuthorID: cy, Content: "re re", ReplyTo: reply.ID, QuoteOf: root.ID})
	want := events.PostCreated{PostID: deeper.ID, AuthorID: cy, Content: "re re", CreatedAt: deeper.CreatedAt,
		ReplyTo: reply.ID, ReplyToAuthor: bob, ReplyRoot: root.ID, QuoteOf: root.ID, QuoteAuthor: ana, ParentReplies: ptr(1)}
	evs := streamEvents(t, b.pool, events.PostStream(deeper.ID))
	if len(evs) != 1 || evs[0].Type != events.TypePostCreated || !reflect.DeepEqual(evs[0].Event, want) {
		t.Fatalf("reply to a reply that quotes: %+v, want %+v", evs, want)
	}
	if deeper.QuoteOf != root.ID || deeper.QuoteAuthor != ana || deeper.ReplyRoot != root.ID {
		t.Fatalf("result %+v", deeper)
	}
	if got := counts(t, b.pool, root.ID); got != [3]int64{1, 0, 0} {
		t.Fatalf("root's counts %v: one reply (a quote is none)", got)
	}

	// Through a repost's id: the original.
	if _, err := c.Repost.Handle(ctx, commands.Repost{UserID: cy, PostID: root.ID}); err != nil {
		t.Fatal(err)
	}
	var repostID int64
	if err := b.pool.QueryRow(ctx, `SELECT id FROM reposts WHERE user_id = $1`, cy).Scan(&repostID); err != nil {
		t.Fatal(err)
	}
	viaRepost := post(t, c, commands.CreatePost{AuthorID: bob, Content: "to the original", ReplyTo: repostID, QuoteOf: repostID})
	if viaRepost.ReplyTo.ID != root.ID || viaRepost.QuoteOf != root.ID {
		t.Fatalf("a reply and quote of a repost: %+v, want the original %d", viaRepost, root.ID)
	}

	evs = streamEvents(t, b.pool, events.PostStream(viaRepost.ID))
	if pc := evs[0].Event.(events.PostCreated); pc.ParentReplies == nil || *pc.ParentReplies != 2 {
		t.Fatalf("second reply to the root: parentReplies %v, want 2", pc.ParentReplies)
	}

	// Deleting a reply takes it off its parent's count; the event says
	// whose reply it was and the parent's count after it, 0 included.
	deletePost(t, c, bob, reply.ID)
	if got := counts(t, b.pool, root.ID); got[0] != 1 {
		t.Fatalf("root's replies %d after one of two was deleted", got[0])
	}
	evs = streamEvents(t, b.pool, events.PostStream(reply.ID))
	if d := evs[len(evs)-1].Event.(events.PostDeleted); d.ReplyTo != root.ID || d.ParentReplies == nil || *d.ParentReplies != 1 {
		t.Fatalf("deletion of a reply: %+v", d)
	}
	deletePost(t, c, bob, viaRepost.ID)
	evs = streamEvents(t, b.pool, events.PostStream(viaRepost.ID))
	if d := evs[len(evs)-1].Event.(events.PostDeleted); d.ParentReplies == nil || *d.ParentReplies != 0 {
		t.Fatalf("deletion of the last reply: parentReplies %v, want 0", d.ParentReplies)
	}
	if d := evs[len(evs)-1].Event.(events.PostDeleted); d.ReplyTo != root.ID {
		t.Fatalf("deletion of a reply: %+v", d)
	}
	if pc := streamEvents(t, b.pool, events.PostStream(root.ID))[0].Event.(events.PostCreated); pc.ParentReplies != nil {
		t.Fatalf("a post that replies to nothing has parentReplies %v", *pc.ParentReplies)
	}
}

func ptr(n int64) *int64 { return &n }

// A reply or quote of a post that does not exist or is deleted is
// ErrPostUnavailable; of a post whose author blocks the caller,
// ErrBlockedByAuthor (a forbidden); the caller's own block of the author
// refuses nothing. Nothing is written on a refusal.
func TestReplyAndQuoteRefused(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	ana, bob, cy := register(t, c, "ana"), register(t, c, "bob"), register(t, c, "cy")
	gone := post(t, c, commands.CreatePost{AuthorID: ana, Content: "gone"})
	deletePost(t, c, ana, gone.ID)
	blocking := post(t, c, commands.CreatePost{AuthorID: cy, Content: "cy blocks bob"})
	block(t, c, cy, bob)
	before := countEvents(t, b.pool)
	for _, tc := range []struct {
		name string
		cmd  commands.CreatePost
		want error
	}{
		{"reply to a missing post", commands.CreatePost{AuthorID: bob, Content: "x", ReplyTo: 424242}, commands.ErrPostUnavailable},
		{"quote of a missing post", commands.CreatePost{AuthorID: bob, Content: "x", QuoteOf: 424242}, commands.ErrPostUnavailable},
		{"reply to a deleted post", commands.CreatePost{AuthorID: bob, Content: "x", ReplyTo: gone.ID}, commands.ErrPostUnavailable},
		{"quote of a deleted post", commands.CreatePost{AuthorID: bob, Content: "x", QuoteOf: gone.ID}, commands.ErrPostUnavailable},
		{"reply to a blocker", commands.CreatePost{AuthorID: bob, Content: "x", ReplyTo: blocking.ID}, commands.ErrBlockedByAuthor},
		{"quote of a blocker", commands.CreatePost{AuthorID: bob, Content: "x", QuoteOf: blocking.ID}, commands.ErrForbidden},
		{"a reply that quotes a deleted post", commands.CreatePost{AuthorID: cy, Content: "x", ReplyTo: blocking.ID, QuoteOf: gone.ID}, commands.ErrPostUnavailable},
	} {
		for _, key := range []string{"", "k-" + tc.name} {
			if _, _, err := c.CreatePost.Do(ctx, tc.cmd, key); !errors.Is(err, tc.want) {
				t.Errorf("%s (key %q): %v, want %v", tc.name, key, err, tc.want)
			}
		}
	}
	if n := countEvents(t, b.pool); n != before {
		t.Fatalf("refusals appended %d events", n-before)
	}
	if got := counts(t, b.pool, blocking.ID); got != [3]int64{} {
		t.Fatalf("refusals counted %v", got)
	}
	// The blocker may reply to the one it blocks.
	bobs := post(t, c, commands.CreatePost{AuthorID: bob, Content: "bob's"})
	post(t, c, commands.CreatePost{AuthorID: cy, Content: "re", ReplyTo: bobs.ID, QuoteOf: bobs.ID})
}

// Media go to the posts row and the event as given, by the single
// statement (a plain post) and by the transaction (under a key, or a
// reply) alike; a reply under an Idempotency-Key is replayed.
func TestPostWithMedia(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	ana := register(t, c, "ana")
	media := []events.Media{
		{URL: "https://cdn.example/a.jpg", MIMEType: "image/jpeg", Alt: "a cat on a mat", Width: 1200, Height: 800},
		{URL: "https://cdn.example/b.mp4?x=1", MIMEType: "video/mp4", Alt: "", Width: 1920, Height: 1080},
	}
	plain := post(t, c, commands.CreatePost{AuthorID: ana, Content: "pics", Media: media})
	keyed, _, err := c.CreatePost.Do(ctx, commands.CreatePost{AuthorID: ana, Content: "pics", Media: media}, "media-1")
	if err != nil {
		t.Fatal(err)
	}
	reply, _, err := c.CreatePost.Do(ctx, commands.CreatePost{AuthorID: ana, Content: "more", ReplyTo: plain.ID, Media: media}, "media-2")
	if err != nil {
		t.Fatal(err)
	}
	again, replayed, err := c.CreatePost.Do(ctx, commands.CreatePost{AuthorID: ana, Content: "more", ReplyTo: plain.ID, Media: media}, "media-2")
	if err != nil || !replayed || again.ID != reply.ID || !reflect.DeepEqual(again.Media, media) || again.ReplyTo == nil || again.ReplyTo.ID != plain.ID {
		t.Fatalf("replay of a reply with media: %+v %v %v", again, replayed, err)
	}
	if _, _, err := c.CreatePost.Do(ctx, commands.CreatePost{AuthorID: ana, Content: "more", ReplyTo: keyed.ID, Media: media}, "media-2"); !errors.Is(err, commands.ErrIdempotencyKeyReused) {
		t.Fatalf("the key with another parent: %v", err)
	}
	for _, p := range []commands.Post{plain, keyed, reply} {
		if !reflect.DeepEqual(p.Media, media) {
			t.Errorf("post %d's media %+v", p.ID, p.Media)
		}
		evs := streamEvents(t, b.pool, events.PostStream(p.ID))
		if got := evs[0].Event.(events.PostCreated).Media; !reflect.DeepEqual(got, media) {
			t.Errorf("post %d's event media %+v", p.ID, got)
		}
		var stored []events.Media
		if err := b.pool.QueryRow(ctx, `SELECT media FROM posts WHERE id = $1`, p.ID).Scan(&stored); err != nil || !reflect.DeepEqual(stored, media) {
			t.Errorf("post %d's row media %+v (%v)", p.ID, stored, err)
		}
	}
	if got := readPostRows(t, b.pool, plain); got != readPostRows(t, b.pool, keyed) {
		t.Fatalf("statement and transaction differ: %+v and %+v", got, readPostRows(t, b.pool, keyed))
	}
	// An edit answers the whole post.
	edited, err := c.EditPost.Handle(ctx, commands.EditPost{ActorID: ana, PostID: reply.ID, Content: "more, edited"})
	if err != nil || !reflect.DeepEqual(edited.Media, media) || edited.ReplyTo == nil || edited.ReplyTo.ID != plain.ID {
		t.Fatalf("edit of a reply with media: %+v %v", edited, err)
	}
}

func TestMediaValidation(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ana := register(t, c, "ana")
	ok := events.Media{URL: "https://cdn.example/a.png", MIMEType: "image/png", Alt: "alt", Width: 10, Height: 10}
	with := func(f func(*events.Media)) []events.Media {
		m := ok
		f(&m)
		return []events.Media{m}
	}
	for _, tc := range []struct {
		name  string
		media []events.Media
		field string // "" when valid
	}{
		{"one", []events.Media{ok}, ""},
		{"four", []events.Media{ok, ok, ok, ok}, ""},
		{"five", []events.Media{ok, ok, ok, ok, ok}, "media"},
		{"every type", nil, ""},
		{"http", with(func(m *events.Media) { m.URL = "http://cdn.example/a.png" }), "media[0].url"},
		{"no scheme", with(func(m *events.Media) { m.URL = "cdn.example/a.png" }), "media[0].url"},
		{"no host", with(func(m *events.Media) { m.URL = "https:///a.png" }), "media[0].url"},
		{"opaque", with(func(m *events.Media) { m.URL = "https:a.png" }), "media[0].url"},
		{"user info", with(func(m *events.Media) { m.URL = "https://u:p@cdn.example/a.png" }), "media[0].url"},
		{"javascript", with(func(m *events.Media) { m.URL = "javascript:alert(1)" }), "media[0].url"},
		{"control character", with(func(m *events.Media) { m.URL = "https://cdn.example/a\n.png" }), "media[0].url"},
		{"long URL", with(func(m *events.Media) { m.URL = "https://cdn.example/" + strings.Repeat("a", 2048) }), "media[0].url"},
		{"HTTPS upper case", with(func(m *events.Media) { m.URL = "HTTPS://cdn.example/a.png" }), ""},
		{"type not allowed", with(func(m *events.Media) { m.MIMEType = "image/svg+xml" }), "media[0].mimeType"},
		{"type with parameters", with(func(m *events.Media) { m.MIMEType = "image/png; q=1" }), "media[0].mimeType"},
		{"type upper case", with(func(m *events.Media) { m.MIMEType = "IMAGE/PNG" }), "media[0].mimeType"},
		{"no type", with(func(m *events.Media) { m.MIMEType = "" }), "media[0].mimeType"},
		{"empty alt", with(func(m *events.Media) { m.Alt = "" }), ""},
		{"longest alt", with(func(m *events.Media) { m.Alt = strings.Repeat("é", commands.MaxMediaAltChars) }), ""},
		{"alt too long", with(func(m *events.Media) { m.Alt = strings.Repeat("é", commands.MaxMediaAltChars+1) }), "media[0].alt"},
		{"alt with NUL", with(func(m *events.Media) { m.Alt = "a\x00b" }), "media[0].alt"},
		{"alt not UTF-8", with(func(m *events.Media) { m.Alt = "a\xffb" }), "media[0].alt"},
		{"zero width", with(func(m *events.Media) { m.Width = 0 }), "media[0]"},
		{"negative height", with(func(m *events.Media) { m.Height = -1 }), "media[0]"},
		{"too wide", with(func(m *events.Media) { m.Width = commands.MaxMediaPixels + 1 }), "media[0]"},
		{"widest", with(func(m *events.Media) { m.Width = commands.MaxMediaPixels }), ""},
		{"the second bad", []events.Media{ok, with(func(m *events.Media) { m.Height = 0 })[0]}, "media[1]"},
	} {
		media := tc.media
		if tc.name == "every type" {
			for _, typ := range commands.MediaTypes {
				media = append(media[:0:0], with(func(m *events.Media) { m.MIMEType = typ })...)
				if _, err := c.CreatePost.Handle(context.Background(), commands.CreatePost{AuthorID: ana, Content: "x", Media: media}); err != nil {
					t.Errorf("type %s: %v", typ, err)
				}
			}
			continue
		}
		_, err := c.CreatePost.Handle(context.Background(), commands.CreatePost{AuthorID: ana, Content: "x", Media: media})
		var ve *commands.ValidationError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.field != "" && (!errors.As(err, &ve) || ve.Field != tc.field || !errors.Is(err, commands.ErrInvalid)):
			t.Errorf("%s: %v, want a validation error of %s", tc.name, err, tc.field)
		}
	}
	var refused int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM posts WHERE media IS NULL`).Scan(&refused); err != nil || refused != 0 {
		t.Fatalf("%d posts without media (%v)", refused, err)
	}
}

// A repost is an entry of its own (id, time) pointing at the original,
// with the reposter's follower count and the original's repost count; a
// repeat changes nothing; a repost of a repost reposts the original; an
// undo names the repost it undoes, and the pair's versions alternate.
func TestRepost(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	ana, bob, cy := register(t, c, "ana"), register(t, c, "bob"), register(t, c, "cy")
	if _, err := c.Follow.Handle(ctx, commands.Follow{FollowerID: cy, FolloweeID: bob}); err != nil {
		t.Fatal(err)
	}
	orig := post(t, c, commands.CreatePost{AuthorID: ana, Content: "share me"})
	for i, want := range []bool{true, false} {
		changed, err := c.Repost.Handle(ctx, commands.Repost{UserID: bob, PostID: orig.ID})
		if err != nil || changed != want {
			t.Fatalf("repost %d: %v %v, want %v", i, changed, err, want)
		}
	}
	evs := streamEvents(t, b.pool, events.RepostStream(bob, orig.ID))
	if len(evs) != 1 || evs[0].Version != 1 {
		t.Fatalf("a repeated repost: %+v", evs)
	}
	rp := evs[0].Event.(events.PostReposted)
	if rp.ReposterID != bob || rp.PostID != orig.ID || rp.AuthorID != ana || rp.ReposterFollowers != 1 || rp.Reposts != 1 ||
		rp.RepostID <= orig.ID || rp.CreatedAt.Before(orig.CreatedAt) || rp.AudienceKey() != bob {
		t.Fatalf("reposted: %+v", rp)
	}
	// Cy reposts bob's repost: the original, once.
	if changed, err := c.Repost.Handle(ctx, commands.Repost{UserID: cy, PostID: rp.RepostID}); err != nil || !changed {
		t.Fatalf("repost of a repost: %v %v", changed, err)
	}
	if evs := streamEvents(t, b.pool, events.RepostStream(cy, orig.ID)); len(evs) != 1 || evs[0].Event.(events.PostReposted).Reposts != 2 {
		t.Fatalf("repost of a repost: %+v", evs)
	}
	if changed, err := c.Repost.Handle(ctx, commands.Repost{UserID: cy, PostID: orig.ID}); err != nil || changed {
		t.Fatalf("the original after its repost was reposted: %v %v", changed, err)
	}
	if got := counts(t, b.pool, orig.ID); got != [3]int64{0, 2, 0} {
		t.Fatalf("counts %v", got)
	}

	// Undo: by the repost's id or the original's, once.
	for i, want := range []bool{true, false} {
		changed, err := c.Unrepost.Handle(ctx, commands.Unrepost{UserID: bob, PostID: orig.ID})
		if err != nil || changed != want {
			t.Fatalf("unrepost %d: %v %v, want %v", i, changed, err, want)
		}
	}
	evs = streamEvents(t, b.pool, events.RepostStream(bob, orig.ID))
	if len(evs) != 2 || evs[1].Version != 2 || evs[1].Type != events.TypePostUnreposted {
		t.Fatalf("after the undo: %+v", evs)
	}
	if un := evs[1].Event.(events.PostUnreposted); un.RepostID != rp.RepostID || un.Reposts != 1 || un.AuthorID != ana {
		t.Fatalf("unreposted: %+v", un)
	}
	// Again: a new repost, a new id, version 3.
	if _, err := c.Repost.Handle(ctx, commands.Repost{UserID: bob, PostID: orig.ID}); err != nil {
		t.Fatal(err)
	}
	evs = streamEvents(t, b.pool, events.RepostStream(bob, orig.ID))
	if len(evs) != 3 || evs[2].Version != 3 || evs[2].Event.(events.PostReposted).RepostID == rp.RepostID {
		t.Fatalf("a repost after an undo: %+v", evs)
	}
	// Own posts may be reposted.
	if changed, err := c.Repost.Handle(ctx, commands.Repost{UserID: ana, PostID: orig.ID}); err != nil || !changed {
		t.Fatalf("own repost: %v %v", changed, err)
	}
}

// A repost or like of a post that does not exist or is deleted is
// ErrNotFound, of one whose author blocks the caller ErrBlockedByAuthor;
// undoing works on a deleted post and whatever the blocks. Deleting an
// original leaves its reposts and likes (no undo event); they are undone
// as before.
func TestRepostAndLikeRefused(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	ana, bob := register(t, c, "ana"), register(t, c, "bob")
	orig := post(t, c, commands.CreatePost{AuthorID: ana, Content: "x"})
	if _, err := c.Repost.Handle(ctx, commands.Repost{UserID: bob, PostID: orig.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Like.Handle(ctx, commands.Like{UserID: bob, PostID: orig.ID}); err != nil {
		t.Fatal(err)
	}
	before := countEvents(t, b.pool)
	deletePost(t, c, ana, orig.ID)
	if n := countEvents(t, b.pool); n != before+1 {
		t.Fatalf("a deletion of a reposted, liked post appended %d events", n-before)
	}
	other := post(t, c, commands.CreatePost{AuthorID: ana, Content: "y"})
	block(t, c, ana, bob)
	before = countEvents(t, b.pool)
	for _, tc := range []struct {
		name string
		run  func(id int64, key string) error
	}{
		{"repost", func(id int64, key string) error {
			_, _, err := c.Repost.Do(ctx, commands.Repost{UserID: bob, PostID: id}, key)
			return err
		}},
		{"like", func(id int64, key string) error {
			_, _, err := c.Like.Do(ctx, commands.Like{UserID: bob, PostID: id}, key)
			return err
		}},
	} {
		for _, key := range []string{"", "k-" + tc.name} {
			if err := tc.run(424242, key); !errors.Is(err, commands.ErrNotFound) {
				t.Errorf("%s of a missing post: %v", tc.name, err)
			}
			if err := tc.run(orig.ID, key); !errors.Is(err, commands.ErrNotFound) {
				t.Errorf("%s of a deleted post: %v", tc.name, err)
			}
			if err := tc.run(other.ID, key); !errors.Is(err, commands.ErrBlockedByAuthor) {
				t.Errorf("%s of a blocker's post: %v", tc.name, err)
			}
		}
	}
	if n := countEvents(t, b.pool); n != before {
		t.Fatalf("refusals appended %d events", n-before)
	}
	if changed, err := c.Unrepost.Handle(ctx, commands.Unrepost{UserID: bob, PostID: orig.ID}); err != nil || !changed {
		t.Fatalf("unrepost of a deleted post: %v %v", changed, err)
	}
	if changed, err := c.Unlike.Handle(ctx, commands.Unlike{UserID: bob, PostID: orig.ID}); err != nil || !changed {
		t.Fatalf("unlike of a deleted post: %v %v", changed, err)
	}
	if _, err := c.Unlike.Handle(ctx, commands.Unlike{UserID: bob, PostID: 424242}); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("unlike of a missing post: %v", err)
	}
	if got := counts(t, b.pool, orig.ID); got != [3]int64{} {
		t.Fatalf("counts after the undos %v", got)
	}
}

// Likes: once per (liker, post), repeats append nothing, the event keyed
// by the post's author with the count after it; a like of a repost likes
// the original; under an Idempotency-Key a retry replays.
func TestLike(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	ana, bob, cy := register(t, c, "ana"), register(t, c, "bob"), register(t, c, "cy")
	orig := post(t, c, commands.CreatePost{AuthorID: ana, Content: "like me"})
	for i, want := range []bool{true, false} {
		if changed, err := c.Like.Handle(ctx, commands.Like{UserID: bob, PostID: orig.ID}); err != nil || changed != want {
			t.Fatalf("like %d: %v %v", i, changed, err)
		}
	}
	if _, err := c.Repost.Handle(ctx, commands.Repost{UserID: bob, PostID: orig.ID}); err != nil {
		t.Fatal(err)
	}
	var repostID int64
	if err := b.pool.QueryRow(ctx, `SELECT id FROM reposts WHERE user_id = $1`, bob).Scan(&repostID); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		changed, replayed, err := c.Like.Do(ctx, commands.Like{UserID: cy, PostID: repostID}, "like-1")
		if err != nil || !changed {
			t.Fatalf("like of a repost under a key: %v %v %v", changed, replayed, err)
		}
	}
	if _, _, err := c.Like.Do(ctx, commands.Like{UserID: cy, PostID: orig.ID}, "like-1"); !errors.Is(err, commands.ErrIdempotencyKeyReused) {
		t.Fatalf("the key for another post: %v", err)
	}
	if got := counts(t, b.pool, orig.ID); got != [3]int64{0, 1, 2} {
		t.Fatalf("counts %v", got)
	}
	evs := streamEvents(t, b.pool, events.LikeStream(cy, orig.ID))
	if len(evs) != 1 {
		t.Fatalf("cy's likes: %+v", evs)
	}
	if l := evs[0].Event.(events.PostLiked); l.LikerID != cy || l.AuthorID != ana || l.Likes != 2 || l.AudienceKey() != ana || l.LikedAt.IsZero() {
		t.Fatalf("liked: %+v", l)
	}
	for i, want := range []bool{true, false} {
		if changed, err := c.Unlike.Handle(ctx, commands.Unlike{UserID: cy, PostID: orig.ID}); err != nil || changed != want {
			t.Fatalf("unlike %d: %v %v", i, changed, err)
		}
	}
	evs = streamEvents(t, b.pool, events.LikeStream(cy, orig.ID))
	if len(evs) != 2 || evs[1].Version != 2 || evs[1].Event.(events.PostUnliked).Likes != 1 {
		t.Fatalf("after the unlike: %+v", evs)
	}
}

// A post.created.v1 in the log (written before v2 existed) reads as the
// current PostCreated, and the writer writes v2 only.
func TestPostCreatedV1InTheLog(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	ana := register(t, c, "ana")
	_, err := b.pool.Exec(ctx, `INSERT INTO events (event_id, stream_id, stream_version, type, payload, metadata)
		VALUES (gen_random_uuid(), 'post-77', 1, 'post.created.v1',
		        '{"postId":"77","authorId":"`+itoa(ana)+`","content":"old","createdAt":"2026-11-30T09:41:14.123Z","authorFollowers":0}', '{}')`)
	if err != nil {
		t.Fatal(err)
	}
	evs := streamEvents(t, b.pool, "post-77")
	pc, ok := evs[0].Event.(events.PostCreated)
	if !ok || pc.PostID != 77 || pc.AuthorID != ana || pc.Content != "old" || pc.ReplyTo != 0 || pc.Media != nil {
		t.Fatalf("v1 read as %#v", evs[0].Event)
	}
	p := post(t, c, commands.CreatePost{AuthorID: ana, Content: "new"})
	if evs := streamEvents(t, b.pool, events.PostStream(p.ID)); evs[0].Type != "post.created.v2" {
		t.Fatalf("written as %s", evs[0].Type)
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
