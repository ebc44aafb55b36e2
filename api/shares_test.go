package api_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/feedco/feed/events"
)

// POST /api/posts with replyTo, quoteOf and media answers the post with
// them; a reply to or quote of a missing or deleted post is 422
// post-unavailable, of a post whose author blocks the caller 403; bad
// media and ids are 400.
func TestCreateReplyQuoteMedia(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	ana, bob := e.register(t, "ana"), e.register(t, "bob")
	A, B := e.bearer(ana), e.bearer(bob)
	root := e.post(t, ana, "root")
	body := `{"content":"re","replyTo":"` + root + `","quoteOf":"` + root + `","media":[{"url":"https://cdn.example/a.webp","mimeType":"image/webp","alt":"a dog","width":800,"height":600}]}`
	r := e.do(t, "POST", "/api/posts", body, "Authorization", B, "Idempotency-Key", "re-1")
	if r.Status != 201 {
		t.Fatalf("reply: %d %s", r.Status, r.Body)
	}
	var p struct {
		ID      string
		ReplyTo struct{ ID, AuthorID string }
		QuoteOf string
		Media   []map[string]any
	}
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatal(err)
	}
	if p.ReplyTo.ID != root || p.ReplyTo.AuthorID != strconv.FormatInt(ana, 10) || p.QuoteOf != root || len(p.Media) != 1 ||
		p.Media[0]["url"] != "https://cdn.example/a.webp" || p.Media[0]["width"] != 800.0 || p.Media[0]["alt"] != "a dog" {
		t.Fatalf("reply: %s", r.Body)
	}
	again := e.do(t, "POST", "/api/posts", body, "Authorization", B, "Idempotency-Key", "re-1")
	if again.Status != 201 || again.Header.Get("Idempotent-Replayed") != "true" || string(again.Body) != string(r.Body) {
		t.Fatalf("replay: %d %s", again.Status, again.Body)
	}
	if n := e.count(t, "type = $1 AND payload->>'replyTo' = $2", events.TypePostCreated, root); n != 1 {
		t.Fatalf("%d replies in the log", n)
	}
	// A plain post has none of the new fields.
	plain := e.do(t, "POST", "/api/posts", `{"content":"plain","replyTo":null,"media":null}`, "Authorization", A)
	if plain.Status != 201 || strings.Contains(string(plain.Body), "replyTo") || strings.Contains(string(plain.Body), "media") {
		t.Fatalf("plain post: %d %s", plain.Status, plain.Body)
	}

	gone := e.post(t, ana, "gone")
	if r := e.do(t, "DELETE", "/api/posts/"+gone, "", "Authorization", A); r.Status != 204 {
		t.Fatalf("delete: %d", r.Status)
	}
	wantProblem(t, e.do(t, "POST", "/api/posts", `{"content":"x","replyTo":"`+gone+`"}`, "Authorization", B), 422, "post-unavailable")
	wantProblem(t, e.do(t, "POST", "/api/posts", `{"content":"x","quoteOf":"424242"}`, "Authorization", B), 422, "post-unavailable")
	if r := e.do(t, "PUT", "/api/blocking/"+strconv.FormatInt(bob, 10), "", "Authorization", A); r.Status != 204 {
		t.Fatalf("block: %d", r.Status)
	}
	wantProblem(t, e.do(t, "POST", "/api/posts", `{"content":"x","replyTo":"`+root+`"}`, "Authorization", B), 403, "forbidden")
	wantProblem(t, e.do(t, "POST", "/api/posts", `{"content":"x","quoteOf":"`+root+`"}`, "Authorization", B, "Idempotency-Key", "q-1"), 403, "forbidden")

	media := func(m string) string { return `{"content":"x","media":[` + m + `]}` }
	okMedia := `{"url":"https://cdn.example/a.png","mimeType":"image/png","alt":"","width":1,"height":1}`
	for name, b := range map[string]string{
		"replyTo a number":   `{"content":"x","replyTo":1}`,
		"replyTo empty":      `{"content":"x","replyTo":""}`,
		"quoteOf not an id":  `{"content":"x","quoteOf":"-3"}`,
		"five media":         media(strings.Repeat(okMedia+",", 4) + okMedia),
		"http media":         media(strings.Replace(okMedia, "https", "http", 1)),
		"svg":                media(strings.Replace(okMedia, "image/png", "image/svg+xml", 1)),
		"zero width":         media(strings.Replace(okMedia, `"width":1`, `"width":0`, 1)),
		"fractional width":   media(strings.Replace(okMedia, `"width":1`, `"width":1.5`, 1)),
		"alt too long":       media(strings.Replace(okMedia, `"alt":""`, `"alt":"`+strings.Repeat("a", 1501)+`"`, 1)),
		"unknown media key":  media(strings.Replace(okMedia, `"alt":""`, `"alt":"","x":1`, 1)),
		"media not an array": `{"content":"x","media":{}}`,
	} {
		r := e.do(t, "POST", "/api/posts", b, "Authorization", A)
		if r.Status != 400 {
			t.Errorf("%s: %d %s, want 400", name, r.Status, r.Body)
		}
	}
	if r := e.do(t, "POST", "/api/posts", media(strings.Repeat(okMedia+",", 3)+okMedia), "Authorization", A); r.Status != 201 {
		t.Fatalf("four media: %d %s", r.Status, r.Body)
	}
	// An edit takes the content only.
	wantProblem(t, e.do(t, "PATCH", "/api/posts/"+root, `{"content":"x","replyTo":"`+root+`"}`, "Authorization", A), 400, "bad-request")
}

// PUT and DELETE of /api/posts/{id}/repost and /like: 204, repeats 204
// with no new event, a repost of a repost reposts its original; a missing
// or deleted post 404, a blocker's post 403; Idempotency-Key replays.
func TestRepostAndLikeRoutes(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	ana, bob, cy := e.register(t, "ana"), e.register(t, "bob"), e.register(t, "cy")
	A, B, C := e.bearer(ana), e.bearer(bob), e.bearer(cy)
	orig := e.post(t, ana, "share me")
	for _, rel := range []string{"repost", "like"} {
		path := "/api/posts/" + orig + "/" + rel
		for i := range 2 {
			if r := e.do(t, "PUT", path, "", "Authorization", B); r.Status != 204 || len(r.Body) != 0 {
				t.Fatalf("%s %d: %d %s", rel, i, r.Status, r.Body)
			}
		}
		r := e.do(t, "PUT", path, "", "Authorization", C, "Idempotency-Key", rel+"-1")
		again := e.do(t, "PUT", path, "", "Authorization", C, "Idempotency-Key", rel+"-1")
		if r.Status != 204 || again.Status != 204 || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("%s under a key: %d, %d %v", rel, r.Status, again.Status, again.Header)
		}
		wantProblem(t, e.do(t, "DELETE", path, "", "Authorization", C, "Idempotency-Key", rel+"-1"), 422, "idempotency-key-reused")
		wantProblem(t, e.do(t, "PUT", "/api/posts/424242/"+rel, "", "Authorization", B), 404, "not-found")
		wantProblem(t, e.do(t, "PUT", "/api/posts/x/"+rel, "", "Authorization", B), 400, "bad-request")
		wantProblem(t, e.do(t, "PUT", path, "", ""), 401, "unauthorized")
		for i := range 2 {
			if r := e.do(t, "DELETE", path, "", "Authorization", B); r.Status != 204 {
				t.Fatalf("un%s %d: %d %s", rel, i, r.Status, r.Body)
			}
		}
	}
	for typ, want := range map[string]int{events.TypePostReposted: 2, events.TypePostUnreposted: 1, events.TypePostLiked: 2, events.TypePostUnliked: 1} {
		if n := e.count(t, "type = $1", typ); n != want {
			t.Errorf("%d %s events, want %d", n, typ, want)
		}
	}
	// A repost of cy's repost reposts the original: nothing new for cy
	// (who reposted it already), a repost by ana.
	var repostID string
	if err := e.pool.QueryRow(t.Context(), `SELECT id::text FROM reposts WHERE user_id = $1`, cy).Scan(&repostID); err != nil {
		t.Fatal(err)
	}
	if r := e.do(t, "PUT", "/api/posts/"+repostID+"/repost", "", "Authorization", C); r.Status != 204 {
		t.Fatalf("repost of one's own repost: %d", r.Status)
	}
	if r := e.do(t, "PUT", "/api/posts/"+repostID+"/repost", "", "Authorization", A); r.Status != 204 {
		t.Fatalf("repost of a repost: %d", r.Status)
	}
	if n := e.count(t, "type = $1 AND payload->>'postId' = $2", events.TypePostReposted, orig); n != 3 {
		t.Fatalf("%d reposts of the original, want 3 (bob's, cy's, ana's)", n)
	}
	// A deleted post: 404 to do, 204 to undo; a blocker's post: 403.
	if r := e.do(t, "DELETE", "/api/posts/"+orig, "", "Authorization", A); r.Status != 204 {
		t.Fatalf("delete: %d", r.Status)
	}
	wantProblem(t, e.do(t, "PUT", "/api/posts/"+orig+"/repost", "", "Authorization", B), 404, "not-found")
	wantProblem(t, e.do(t, "PUT", "/api/posts/"+orig+"/like", "", "Authorization", B), 404, "not-found")
	if r := e.do(t, "DELETE", "/api/posts/"+orig+"/repost", "", "Authorization", C); r.Status != 204 {
		t.Fatalf("unrepost of a deleted post: %d", r.Status)
	}
	other := e.post(t, ana, "other")
	if r := e.do(t, "PUT", "/api/blocking/"+strconv.FormatInt(bob, 10), "", "Authorization", A); r.Status != 204 {
		t.Fatalf("block: %d", r.Status)
	}
	wantProblem(t, e.do(t, "PUT", "/api/posts/"+other+"/repost", "", "Authorization", B), 403, "forbidden")
	wantProblem(t, e.do(t, "PUT", "/api/posts/"+other+"/like", "", "Authorization", B), 403, "forbidden")
	// 405s name the methods.
	if r := e.do(t, "POST", "/api/posts/"+other+"/like", "", "Authorization", A); r.Status != 405 || r.Header.Get("Allow") != "DELETE, PUT" {
		t.Fatalf("POST like: %d Allow %q", r.Status, r.Header.Get("Allow"))
	}
}
