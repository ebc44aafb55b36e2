package readmodel

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/feedco/feed/testkit/testenv"
)

// An edit replaces a cached body's content, version and editedAt and
// keeps what it does not carry: a reply's parent, a quote, media.
func TestEditKeepsRepliesQuotesAndMedia(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rd := testenv.NewRedis(t)
	m := NewPostCache(Keys{Prefix: rd.Prefix})
	p := Post{ID: 917309935400783872, AuthorID: 7, Content: "first", CreatedAt: "2026-12-06T07:02:11.394Z",
		ReplyTo: 917309935400783000, ReplyToAuthor: 8, ReplyRoot: 917309935400780000, QuoteOf: 917309935400781111, QuoteAuthor: 9,
		Media: []Media{{URL: "https://img.example/a.png", MIMEType: "image/png", Alt: "a \"quoted\" / alt", Width: 640, Height: 480}}}
	if err := m.Create(ctx, rd.Client, p); err != nil {
		t.Fatal(err)
	}
	ok, err := m.Edit(ctx, rd.Client, Post{ID: p.ID, AuthorID: 7, Content: "second ✓", Version: 2, EditedAt: "2026-12-06T07:03:00.000Z"})
	if err != nil || !ok {
		t.Fatalf("edit: wrote %v, %v", ok, err)
	}
	var got Post
	if err := json.Unmarshal([]byte(rd.Client.Get(ctx, m.keys.Post(p.ID)).Val()), &got); err != nil {
		t.Fatal(err)
	}
	want := p
	want.Content, want.Version, want.EditedAt = "second ✓", 2, "2026-12-06T07:03:00.000Z"
	wb, _ := json.Marshal(want)
	gb, _ := json.Marshal(got)
	if string(wb) != string(gb) {
		t.Fatalf("edited body\n%s\nwant\n%s", gb, wb)
	}
	if ok, err := m.Edit(ctx, rd.Client, Post{ID: p.ID, Content: "older", Version: 2}); err != nil || ok {
		t.Fatalf("an edit at the same version again: wrote %v, %v", ok, err)
	}
}
