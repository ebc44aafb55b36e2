package api_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// withQueries gives the server a query side over the test's database.
func withQueries(t *testing.T) options {
	return options{withPool: func(pool *pgxpool.Pool, d *api.Deps) {
		r := testenv.NewRedis(t)
		f, err := queries.New(queries.Config{Keys: readmodel.Keys{Prefix: r.Prefix}, Logger: testenv.Logger()}, pool, r.Client)
		if err != nil {
			t.Fatal(err)
		}
		testenv.Start(t, f.Service())
		d.Feed = f
	}}
}

// postItem is the item of GET /api/posts/{id} and of replies pages.
type postItem struct {
	ID, AuthorID, Content, CreatedAt, EditedAt string
	Author                                     struct{ ID, Name string }
	Media                                      []struct{ URL, MIMEType, Alt string }
	ReplyTo                                    *struct{ ID, AuthorID string }
	Quote                                      *struct {
		ID, AuthorID string
		Unavailable  bool
		Author       struct{ ID, Name string }
	}
	Counts struct{ Likes, Reposts, Replies int64 }
	Viewer struct{ Liked, Reposted bool }
}

func (e *env) getPost(t *testing.T, id, bearer string) postItem {
	t.Helper()
	r := e.do(t, "GET", "/api/posts/"+id, "", "Authorization", bearer)
	if r.Status != 200 {
		t.Fatalf("GET post %s: %d %s", id, r.Status, r.Body)
	}
	var p postItem
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *env) postJSON(t *testing.T, bearer, body string) string {
	t.Helper()
	r := e.do(t, "POST", "/api/posts", body, "Authorization", bearer)
	if r.Status != 201 {
		t.Fatalf("create post: %d %s", r.Status, r.Body)
	}
	return r.json(t)["id"].(string)
}

// GET /api/posts/{id}: the post with its author, media, parent, quote,
// counts and the caller's own like and repost, after the write side's
// commands; a quote of a post later deleted is unavailable; 404 for a
// missing or deleted post and for a caller its author blocks.
func TestGetPost(t *testing.T) {
	t.Parallel()
	e := setup(t, withQueries(t))
	ana, bob, cy := e.register(t, "ana"), e.register(t, "bob"), e.register(t, "cy")
	A, B, C := e.bearer(ana), e.bearer(bob), e.bearer(cy)
	root := e.post(t, ana, "root")
	quoted := e.post(t, cy, "quoted")
	reply := e.postJSON(t, B, `{"content":"re","replyTo":"`+root+`","quoteOf":"`+quoted+`",`+
		`"media":[{"url":"https://cdn.example/a.webp","mimeType":"image/webp","alt":"a dog","width":800,"height":600}]}`)
	for _, path := range []string{"/api/posts/" + root + "/like", "/api/posts/" + root + "/repost"} {
		for _, who := range []string{B, C} {
			if r := e.do(t, "PUT", path, "", "Authorization", who); r.Status != 204 {
				t.Fatalf("PUT %s: %d %s", path, r.Status, r.Body)
			}
		}
	}

	p := e.getPost(t, root, B)
	if p.ID != root || p.AuthorID != strconv.FormatInt(ana, 10) || p.Author.Name != "ana" || p.Content != "root" ||
		p.Counts.Likes != 2 || p.Counts.Reposts != 2 || p.Counts.Replies != 1 || !p.Viewer.Liked || !p.Viewer.Reposted ||
		p.ReplyTo != nil || p.Quote != nil || p.Media != nil || p.EditedAt != "" {
		t.Errorf("root as bob: %+v", p)
	}
	if p := e.getPost(t, root, A); p.Viewer.Liked || p.Viewer.Reposted {
		t.Errorf("root as ana (who neither liked nor reposted it): %+v", p.Viewer)
	}
	if r := e.do(t, "DELETE", "/api/posts/"+root+"/like", "", "Authorization", B); r.Status != 204 {
		t.Fatalf("unlike: %d", r.Status)
	}
	if p := e.getPost(t, root, B); p.Viewer.Liked || !p.Viewer.Reposted || p.Counts.Likes != 1 {
		t.Errorf("root as bob after the unlike: %+v %+v", p.Viewer, p.Counts)
	}

	p = e.getPost(t, reply, A)
	if p.ReplyTo == nil || p.ReplyTo.ID != root || p.ReplyTo.AuthorID != strconv.FormatInt(ana, 10) ||
		p.Quote == nil || p.Quote.ID != quoted || p.Quote.Unavailable || p.Quote.Author.Name != "cy" ||
		len(p.Media) != 1 || p.Media[0].MIMEType != "image/webp" || p.Author.Name != "bob" {
		t.Errorf("the reply as ana: %+v", p)
	}
	if r := e.do(t, "DELETE", "/api/posts/"+quoted, "", "Authorization", C); r.Status != 204 {
		t.Fatalf("delete: %d", r.Status)
	}
	if p := e.getPost(t, reply, A); p.Quote == nil || p.Quote.ID != quoted || !p.Quote.Unavailable || p.Quote.AuthorID != "" {
		t.Errorf("a quote of a deleted post: %+v", p.Quote)
	}

	// A repost's id answers the original.
	var repostID string
	if err := e.pool.QueryRow(t.Context(), `SELECT id::text FROM reposts WHERE user_id = $1`, cy).Scan(&repostID); err != nil {
		t.Fatal(err)
	}
	if p := e.getPost(t, repostID, A); p.ID != root {
		t.Errorf("by a repost's id: %s, want the original %s", p.ID, root)
	}

	wantProblem(t, e.do(t, "GET", "/api/posts/"+quoted, "", "Authorization", A), 404, "not-found")
	wantProblem(t, e.do(t, "GET", "/api/posts/424242", "", "Authorization", A), 404, "not-found")
	wantProblem(t, e.do(t, "GET", "/api/posts/x", "", "Authorization", A), 400, "bad-request")
	wantProblem(t, e.do(t, "GET", "/api/posts/"+root, ""), 401, "unauthorized")
	if r := e.do(t, "PUT", "/api/blocking/"+strconv.FormatInt(bob, 10), "", "Authorization", A); r.Status != 204 {
		t.Fatalf("block: %d", r.Status)
	}
	wantProblem(t, e.do(t, "GET", "/api/posts/"+root, "", "Authorization", B), 404, "not-found")
	wantProblem(t, e.do(t, "GET", "/api/posts/"+root+"/replies", "", "Authorization", B), 404, "not-found")
	e.getPost(t, reply, A) // the blocker still sees what the blocked wrote
}

// GET /api/posts/{id}/replies pages the direct replies oldest first with
// an opaque cursor, without the deleted ones and those of repliers the
// caller mutes or blocks or who block the caller.
func TestGetReplies(t *testing.T) {
	t.Parallel()
	e := setup(t, withQueries(t))
	ana, bob, cy, dee := e.register(t, "ana"), e.register(t, "bob"), e.register(t, "cy"), e.register(t, "dee")
	A := e.bearer(ana)
	root := e.post(t, ana, "root")
	var want []string
	for i := range 5 {
		want = append(want, e.postJSON(t, e.bearer(bob), fmt.Sprintf(`{"content":"bob %d","replyTo":"%s"}`, i, root)))
		e.postJSON(t, e.bearer(cy), `{"content":"cy","replyTo":"`+root+`"}`)
		e.postJSON(t, e.bearer(dee), `{"content":"dee","replyTo":"`+root+`"}`)
	}
	gone := e.postJSON(t, e.bearer(bob), `{"content":"gone","replyTo":"`+root+`"}`)
	if r := e.do(t, "DELETE", "/api/posts/"+gone, "", "Authorization", e.bearer(bob)); r.Status != 204 {
		t.Fatalf("delete: %d", r.Status)
	}
	e.postJSON(t, e.bearer(bob), `{"content":"nested","replyTo":"`+want[0]+`"}`)
	if r := e.do(t, "PUT", "/api/muting/"+strconv.FormatInt(cy, 10), "", "Authorization", A); r.Status != 204 {
		t.Fatalf("mute: %d", r.Status)
	}
	if r := e.do(t, "PUT", "/api/blocking/"+strconv.FormatInt(ana, 10), "", "Authorization", e.bearer(dee)); r.Status != 204 {
		t.Fatalf("block: %d", r.Status)
	}

	var got []string
	cursor, pages := "", 0
	for {
		path := "/api/posts/" + root + "/replies?limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r := e.do(t, "GET", path, "", "Authorization", A)
		if r.Status != 200 {
			t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
		}
		var page struct {
			Items                  []postItem
			NextCursor, PrevCursor *string
		}
		if err := json.Unmarshal(r.Body, &page); err != nil {
			t.Fatal(err)
		}
		pages++
		for _, it := range page.Items {
			got = append(got, it.ID)
			if it.ReplyTo == nil || it.ReplyTo.ID != root || it.Author.Name != "bob" {
				t.Errorf("reply %+v", it)
			}
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if !slices.Equal(got, want) || pages != 3 {
		t.Errorf("replies %v in %d pages, want %v in 3", got, pages, want)
	}
	if p := e.getPost(t, root, A); p.Counts.Replies != 15 {
		t.Errorf("root's replies count %d, want 15 (the live ones, hidden or not)", p.Counts.Replies)
	}

	r := e.do(t, "GET", "/api/posts/"+want[1]+"/replies", "", "Authorization", A)
	if r.Status != 200 || string(r.Body) != `{"items":[],"nextCursor":null,"prevCursor":null}` {
		t.Errorf("no replies: %d %s", r.Status, r.Body)
	}
	wantProblem(t, e.do(t, "GET", "/api/posts/"+root+"/replies?cursor=nope", "", "Authorization", A), 400, "bad-request")
	wantProblem(t, e.do(t, "GET", "/api/posts/"+root+"/replies?after=x", "", "Authorization", A), 400, "bad-request")
	wantProblem(t, e.do(t, "GET", "/api/posts/"+root+"/replies?limit=51", "", "Authorization", A), 400, "bad-request")
	wantProblem(t, e.do(t, "GET", "/api/posts/"+gone+"/replies", "", "Authorization", A), 404, "not-found")
}
