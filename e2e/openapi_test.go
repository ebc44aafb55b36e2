package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/internal/auth"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/testkit/testenv"
)

// notProduced are the responses of the OpenAPI document that no request
// of TestOpenAPIResponses can cause against a healthy system: a
// version conflict that outlasts the server's own retries, and a bug.
// Every other (operation, status) of the document must be seen.
var notProduced = map[string]string{"409": "a version conflict the server's retries did not absorb", "500": "a bug"}

// specCheck validates exchanges with the API against its OpenAPI document
// and records which (operation, status) pairs it saw.
type specCheck struct {
	t      *testing.T
	doc    *openapi3.T
	router routers.Router
	seen   map[string]bool // "operationId status"
}

func newSpecCheck(t *testing.T) *specCheck {
	t.Helper()
	// The status page is HTML, a string to the document's schema.
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
	openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI())
	if err != nil {
		t.Fatalf("load the OpenAPI document: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("the OpenAPI document is invalid: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Fatalf("openapi %q, want 3.1.x", doc.OpenAPI)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &specCheck{t: t, doc: doc, router: router, seen: map[string]bool{}}
}

type exchange struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request to base and validates the answer: against its
// operation when the document has one (and then the request too, when it
// succeeded), else against the NotFound or MethodNotAllowed response.
// headers alternate name, value.
func (c *specCheck) do(base, method, path string, body []byte, headers ...string) exchange {
	t := c.t
	t.Helper()
	newReq := func() *http.Request {
		req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Add(headers[i], headers[i+1])
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		return req
	}
	resp, err := http.DefaultClient.Do(newReq())
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	ex := exchange{status: resp.StatusCode, header: resp.Header, body: b}
	what := fmt.Sprintf("%s %s -> %d %s", method, path, ex.status, b)

	// The document's router matches the path without the server's base.
	req := newReq()
	req.URL.Scheme, req.URL.Host, req.Host = "", "", ""
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		name := "NotFound"
		if ex.status == http.StatusMethodNotAllowed {
			name = "MethodNotAllowed"
		}
		c.checkResponse(what, c.doc.Components.Responses[name].Value, ex)
		c.seen[name+" "+fmt.Sprint(ex.status)] = true
		return ex
	}
	ctx := context.Background()
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if ex.status < 300 {
		if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
			t.Errorf("%s: the request does not match the document: %v", what, err)
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: ex.status, Header: ex.header,
		Body: io.NopCloser(bytes.NewReader(b)), Options: opts}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		t.Errorf("%s: the response does not match the document: %v", what, err)
	}
	// ValidateResponse checks the body; the headers the document requires
	// are checked here too.
	if r := route.Operation.Responses.Status(ex.status); r != nil {
		c.checkHeaders(what, r.Value, ex)
	}
	c.seen[route.Operation.OperationID+" "+fmt.Sprint(ex.status)] = true
	return ex
}

// checkResponse validates ex against r: its media type, its body's schema
// and its headers.
func (c *specCheck) checkResponse(what string, r *openapi3.Response, ex exchange) {
	t := c.t
	t.Helper()
	mt, _, err := mime.ParseMediaType(ex.header.Get("Content-Type"))
	if err != nil {
		t.Errorf("%s: Content-Type %q: %v", what, ex.header.Get("Content-Type"), err)
		return
	}
	media := r.Content.Get(mt)
	if media == nil {
		t.Errorf("%s: Content-Type %s is not one of the response's", what, mt)
		return
	}
	var v any
	if err := json.Unmarshal(ex.body, &v); err != nil {
		t.Errorf("%s: not JSON: %v", what, err)
		return
	}
	if err := media.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		t.Errorf("%s: the body does not match the document: %v", what, err)
	}
	c.checkHeaders(what, r, ex)
}

func (c *specCheck) checkHeaders(what string, r *openapi3.Response, ex exchange) {
	t := c.t
	t.Helper()
	for name, h := range r.Headers {
		v := ex.header.Get(name)
		if v == "" {
			if h.Value.Required {
				t.Errorf("%s: no %s header", what, name)
			}
			continue
		}
		if err := h.Value.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			t.Errorf("%s: header %s %q: %v", what, name, v, err)
		}
	}
}

// missing lists the (operation, status) pairs of the document not seen,
// less notProduced.
func (c *specCheck) missing() []string {
	var out []string
	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				if _, ok := notProduced[status]; !ok && !c.seen[op.OperationID+" "+status] {
					out = append(out, fmt.Sprintf("%s %s (%s) %s", method, path, op.OperationID, status))
				}
			}
		}
	}
	for _, name := range []string{"NotFound 404", "MethodNotAllowed 405"} {
		if !c.seen[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Real responses of every route, success and error, from the whole system
// (PostgreSQL, Redis, the broker, CDC, projectors) validated against the
// OpenAPI document; the document's every response is produced but for
// notProduced. The 503s come from a second server whose PostgreSQL is
// unreachable and that has no query side.
func TestOpenAPIResponses(t *testing.T) {
	s := startSystem(t, policies{CelebrityThreshold: 1000, InboxMax: 100, InboxTrimSlack: 10, TimelineMax: 100, BackfillPosts: 20, FanoutBatch: 100, CacheTTL: 100 * time.Millisecond})
	c := newSpecCheck(t)
	base := s.baseURL
	js := func(v any) []byte { b, _ := json.Marshal(v); return b }
	want := func(ex exchange, status int, what string) exchange {
		t.Helper()
		if ex.status != status {
			t.Fatalf("%s: %d %s, want %d", what, ex.status, ex.body, status)
		}
		return ex
	}
	id := func(ex exchange) string {
		var v struct{ ID string }
		if err := json.Unmarshal(ex.body, &v); err != nil || v.ID == "" {
			t.Fatalf("no id in %s", ex.body)
		}
		return v.ID
	}
	bearer := func(user string) string {
		var n int64
		fmt.Sscan(user, &n)
		return "Bearer " + s.signer.Sign(n, time.Hour)
	}
	big := js(map[string]string{"content": strings.Repeat("x", 70<<10)})

	// Users.
	ex := want(c.do(base, "POST", "/api/users", js(map[string]string{"name": "ana"}), "Idempotency-Key", "reg-ana"), 201, "register")
	ana := id(ex)
	if loc := ex.header.Get("Location"); loc != "/api/users/"+ana {
		t.Errorf("Location %q, want /api/users/%s", loc, ana)
	}
	ex = want(c.do(base, "POST", "/api/users", js(map[string]string{"name": "ana"}), "Idempotency-Key", "reg-ana"), 201, "register again")
	if ex.header.Get("Idempotent-Replayed") != "true" || ex.header.Get("Location") != "/api/users/"+ana {
		t.Errorf("replay: headers %v", ex.header)
	}
	want(c.do(base, "POST", "/api/users", js(map[string]string{"name": "other"}), "Idempotency-Key", "reg-ana"), 422, "key reused")
	want(c.do(base, "POST", "/api/users", []byte(`{"name":`)), 400, "bad JSON")
	want(c.do(base, "POST", "/api/users", js(map[string]string{"name": strings.Repeat("n", 70<<10)})), 413, "too large")
	bob := id(want(c.do(base, "POST", "/api/users", js(map[string]string{"name": "bob"})), 201, "register bob"))
	A, B := bearer(ana), bearer(bob)

	want(c.do(base, "GET", "/api/users/"+bob, nil, "Authorization", A), 200, "get user")
	want(c.do(base, "GET", "/api/users/x1", nil, "Authorization", A), 400, "bad id")
	ex = want(c.do(base, "GET", "/api/users/"+bob, nil), 401, "no token")
	want(c.do(base, "GET", "/api/users/"+bob, nil, "Authorization", A, "Authorization", B), 400, "two identities")
	want(c.do(base, "GET", "/api/users/999999999", nil, "Authorization", A), 404, "unknown user")

	// Posts.
	ex = want(c.do(base, "POST", "/api/posts", js(map[string]string{"content": "hello"}), "Authorization", B, "Idempotency-Key", "post-1"), 201, "create post")
	post := id(ex)
	if loc := ex.header.Get("Location"); loc != "/api/posts/"+post {
		t.Errorf("Location %q, want /api/posts/%s", loc, post)
	}
	want(c.do(base, "POST", "/api/posts", js(map[string]string{"content": "other"}), "Authorization", B, "Idempotency-Key", "post-1"), 422, "post key reused")
	want(c.do(base, "POST", "/api/posts", js(map[string]string{"content": " "}), "Authorization", B), 400, "blank post")
	want(c.do(base, "POST", "/api/posts", big, "Authorization", B), 413, "post too large")
	want(c.do(base, "POST", "/api/posts", js(map[string]string{"content": "x"})), 401, "post without token")
	media := []map[string]any{{"url": "https://cdn.example/a.png", "mimeType": "image/png", "alt": "a cat", "width": 640, "height": 480}}
	reply := id(want(c.do(base, "POST", "/api/posts", js(map[string]any{"content": "re", "replyTo": post, "quoteOf": post, "media": media}), "Authorization", B), 201, "a reply that quotes, with media"))
	want(c.do(base, "POST", "/api/posts", js(map[string]any{"content": "re", "replyTo": "999999999"}), "Authorization", B), 422, "a reply to a missing post")
	want(c.do(base, "POST", "/api/posts", js(map[string]any{"content": "x", "media": append(media, media[0], media[0], media[0], media[0])}), "Authorization", B), 400, "five media")

	// Reading posts: hydrated items (a quote, a quote of a quote), replies
	// paged with a cursor.
	want(c.do(base, "GET", "/api/posts/"+reply, nil, "Authorization", A), 200, "get a reply that quotes")
	quotes := id(want(c.do(base, "POST", "/api/posts", js(map[string]any{"content": "qq", "quoteOf": reply}), "Authorization", A), 201, "a quote of a quote"))
	want(c.do(base, "GET", "/api/posts/"+quotes, nil, "Authorization", B), 200, "get a quote of a quote")
	want(c.do(base, "POST", "/api/posts", js(map[string]any{"content": "re 2", "replyTo": post}), "Authorization", A), 201, "a second reply")
	ex = want(c.do(base, "GET", "/api/posts/"+post+"/replies?limit=1", nil, "Authorization", A), 200, "replies")
	var replies struct{ NextCursor string }
	if err := json.Unmarshal(ex.body, &replies); err != nil || replies.NextCursor == "" {
		t.Fatalf("replies: no nextCursor in %s", ex.body)
	}
	want(c.do(base, "GET", "/api/posts/"+post+"/replies?limit=1&cursor="+replies.NextCursor, nil, "Authorization", A), 200, "replies, second page")
	want(c.do(base, "GET", "/api/posts/x", nil, "Authorization", A), 400, "get a bad post id")
	want(c.do(base, "GET", "/api/posts/"+post+"/replies?limit=0", nil, "Authorization", A), 400, "replies limit 0")
	want(c.do(base, "GET", "/api/posts/"+post, nil), 401, "get a post without token")
	want(c.do(base, "GET", "/api/posts/"+post+"/replies", nil), 401, "replies without token")
	want(c.do(base, "GET", "/api/posts/999999999", nil, "Authorization", A), 404, "get an unknown post")
	want(c.do(base, "GET", "/api/posts/999999999/replies", nil, "Authorization", A), 404, "replies of an unknown post")

	// Reposts and likes (ana's, of bob's post).
	for _, rel := range []string{"repost", "like"} {
		p := "/api/posts/" + post + "/" + rel
		want(c.do(base, "PUT", p, nil, "Authorization", A, "Idempotency-Key", rel+"-1"), 204, rel)
		ex = want(c.do(base, "PUT", p, nil, "Authorization", A, "Idempotency-Key", rel+"-1"), 204, rel+" replay")
		if ex.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("%s replay: headers %v", rel, ex.header)
		}
		want(c.do(base, "PUT", p, nil, "Authorization", A), 204, rel+" again")
		want(c.do(base, "PUT", "/api/posts/"+post+"/"+rel, nil, "Authorization", B, "Idempotency-Key", "post-1"), 422, rel+" key reused")
		want(c.do(base, "PUT", "/api/posts/x/"+rel, nil, "Authorization", A), 400, rel+" a bad id")
		want(c.do(base, "PUT", "/api/posts/999999999/"+rel, nil, "Authorization", A), 404, rel+" an unknown post")
		want(c.do(base, "PUT", p, nil), 401, rel+" without token")
		want(c.do(base, "PUT", p, big, "Authorization", A), 413, rel+" with a huge body")
		want(c.do(base, "DELETE", p, nil, "Authorization", A, "Idempotency-Key", "un"+rel+"-1"), 204, "un"+rel)
		want(c.do(base, "DELETE", p, nil, "Authorization", A, "Idempotency-Key", "un"+rel+"-1"), 204, "un"+rel+" replay")
		want(c.do(base, "DELETE", p, nil, "Authorization", B, "Idempotency-Key", "post-1"), 422, "un"+rel+" key reused")
		want(c.do(base, "DELETE", "/api/posts/0/"+rel, nil, "Authorization", A), 400, "un"+rel+" id 0")
		want(c.do(base, "DELETE", "/api/posts/999999999/"+rel, nil, "Authorization", A), 404, "un"+rel+" an unknown post")
		want(c.do(base, "DELETE", p, nil), 401, "un"+rel+" without token")
		want(c.do(base, "DELETE", p, big, "Authorization", A), 413, "un"+rel+" with a huge body")
	}

	// Following.
	want(c.do(base, "PUT", "/api/following/"+bob, nil, "Authorization", A, "Idempotency-Key", "f-1"), 204, "follow")
	ex = want(c.do(base, "PUT", "/api/following/"+bob, nil, "Authorization", A, "Idempotency-Key", "f-1"), 204, "follow replay")
	if ex.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("follow replay: headers %v", ex.header)
	}
	want(c.do(base, "PUT", "/api/following/"+ana, nil, "Authorization", A), 400, "self-follow")
	want(c.do(base, "PUT", "/api/following/999999999", nil, "Authorization", A), 404, "follow unknown")
	want(c.do(base, "PUT", "/api/following/"+bob, nil), 401, "follow without token")
	want(c.do(base, "PUT", "/api/following/"+bob, big, "Authorization", A), 413, "follow with a huge body")
	want(c.do(base, "PUT", "/api/following/"+bob, nil, "Authorization", A, "Idempotency-Key", "p-1"), 204, "follow, key p-1")
	want(c.do(base, "PUT", "/api/following/"+ana, nil, "Authorization", A, "Idempotency-Key", "p-1"), 422, "follow key reused")

	// Feeds: ana's feed shows bob's post once the projectors have run.
	testenv.Eventually(t, 60*time.Second, "the post in ana's feed", func() bool {
		ex = want(c.do(base, "GET", "/api/feed?limit=10", nil, "Authorization", A), 200, "feed")
		return bytes.Contains(ex.body, []byte(post))
	})
	var page struct{ PrevCursor string }
	_ = json.Unmarshal(ex.body, &page)
	want(c.do(base, "GET", "/api/feed?after="+page.PrevCursor, nil, "Authorization", A), 200, "refresh")
	want(c.do(base, "GET", "/api/feed?limit=0", nil, "Authorization", A), 400, "limit 0")
	want(c.do(base, "GET", "/api/feed?cursor=&after=x", nil, "Authorization", A), 400, "cursor and after")
	want(c.do(base, "GET", "/api/feed", nil, "Authorization", "Bearer not-a-token"), 401, "feed with a bad token")
	want(c.do(base, "GET", "/api/users/"+bob+"/posts?limit=5", nil, "Authorization", A), 200, "author posts")
	want(c.do(base, "GET", "/api/users/"+bob+"/posts?limit=51", nil, "Authorization", A), 400, "author posts limit 51")
	want(c.do(base, "GET", "/api/users/"+bob+"/posts", nil), 401, "author posts without token")

	// Notifications (bob's: ana's follow, quote and reply) and markers.
	var notes struct {
		Items      []struct{ ID string }
		NextCursor *string
	}
	testenv.Eventually(t, 60*time.Second, "bob's notifications", func() bool {
		ex = want(c.do(base, "GET", "/api/notifications", nil, "Authorization", B), 200, "notifications")
		return json.Unmarshal(ex.body, &notes) == nil && len(notes.Items) >= 3
	})
	ex = want(c.do(base, "GET", "/api/notifications?limit=1", nil, "Authorization", B), 200, "notifications, limit 1")
	if err := json.Unmarshal(ex.body, &notes); err != nil || notes.NextCursor == nil {
		t.Fatalf("notifications: no nextCursor in %s", ex.body)
	}
	want(c.do(base, "GET", "/api/notifications?limit=1&cursor="+*notes.NextCursor, nil, "Authorization", B), 200, "notifications, second page")
	want(c.do(base, "GET", "/api/notifications?cursor=nope", nil, "Authorization", B), 400, "notifications, bad cursor")
	want(c.do(base, "GET", "/api/notifications", nil), 401, "notifications without token")
	want(c.do(base, "GET", "/api/markers", nil, "Authorization", B), 200, "markers, none set")
	want(c.do(base, "PUT", "/api/markers", js(map[string]string{"notifications": notes.Items[0].ID}), "Authorization", B), 204, "put marker")
	want(c.do(base, "PUT", "/api/markers", js(map[string]string{"home": page.PrevCursor}), "Authorization", A), 204, "put home marker")
	want(c.do(base, "GET", "/api/markers", nil, "Authorization", B), 200, "markers")
	want(c.do(base, "PUT", "/api/markers", js(map[string]string{"notifications": "nope"}), "Authorization", B), 400, "put a bad marker")
	want(c.do(base, "PUT", "/api/markers", js(map[string]string{"home": "x"})), 401, "put marker without token")
	want(c.do(base, "PUT", "/api/markers", big, "Authorization", B), 413, "put marker, a huge body")
	want(c.do(base, "GET", "/api/markers", nil), 401, "markers without token")

	// Unfollow and delete.
	want(c.do(base, "DELETE", "/api/following/"+bob, nil, "Authorization", A, "Idempotency-Key", "u-1"), 204, "unfollow")
	want(c.do(base, "DELETE", "/api/following/"+bob, nil, "Authorization", A, "Idempotency-Key", "u-1"), 204, "unfollow replay")
	want(c.do(base, "DELETE", "/api/following/"+ana, nil, "Authorization", B, "Idempotency-Key", "u-1"), 204, "unfollow by another caller, same key")
	want(c.do(base, "DELETE", "/api/following/"+bob, nil, "Authorization", B, "Idempotency-Key", "u-1"), 422, "unfollow key reused")
	want(c.do(base, "DELETE", "/api/following/0", nil, "Authorization", A), 400, "unfollow id 0")
	want(c.do(base, "DELETE", "/api/following/999999999", nil, "Authorization", A), 404, "unfollow unknown")
	want(c.do(base, "DELETE", "/api/following/"+bob, nil), 401, "unfollow without token")
	want(c.do(base, "DELETE", "/api/following/"+bob, big, "Authorization", A), 413, "unfollow with a huge body")

	// Muting and blocking: ana mutes, then blocks, cy.
	cy := id(want(c.do(base, "POST", "/api/users", js(map[string]string{"name": "cy"})), 201, "register cy"))
	C := bearer(cy)
	for _, rel := range []string{"muting", "blocking"} {
		p := "/api/" + rel + "/"
		want(c.do(base, "PUT", p+cy, nil, "Authorization", A, "Idempotency-Key", rel+"-1"), 204, rel)
		want(c.do(base, "PUT", p+cy, nil, "Authorization", A, "Idempotency-Key", rel+"-1"), 204, rel+" replay")
		want(c.do(base, "PUT", p+bob, nil, "Authorization", A, "Idempotency-Key", rel+"-1"), 422, rel+" key reused")
		want(c.do(base, "PUT", p+ana, nil, "Authorization", A), 400, rel+" oneself")
		want(c.do(base, "PUT", p+"999999999", nil, "Authorization", A), 404, rel+" an unknown user")
		want(c.do(base, "PUT", p+cy, nil), 401, rel+" without token")
		want(c.do(base, "PUT", p+cy, big, "Authorization", A), 413, rel+" with a huge body")
		if rel == "blocking" {
			want(c.do(base, "PUT", "/api/following/"+ana, nil, "Authorization", C), 403, "follow of one's blocker")
			anas := id(want(c.do(base, "POST", "/api/posts", js(map[string]string{"content": "ana's"}), "Authorization", A), 201, "ana's post"))
			want(c.do(base, "POST", "/api/posts", js(map[string]any{"content": "re", "replyTo": anas}), "Authorization", C), 403, "a reply to one's blocker")
			want(c.do(base, "PUT", "/api/posts/"+anas+"/repost", nil, "Authorization", C), 403, "a repost of one's blocker")
			want(c.do(base, "PUT", "/api/posts/"+anas+"/like", nil, "Authorization", C), 403, "a like of one's blocker")
		}
		want(c.do(base, "DELETE", p+cy, nil, "Authorization", A, "Idempotency-Key", rel+"-2"), 204, "un"+rel)
		want(c.do(base, "DELETE", p+cy, nil, "Authorization", A, "Idempotency-Key", rel+"-2"), 204, "un"+rel+" replay")
		want(c.do(base, "DELETE", p+bob, nil, "Authorization", A, "Idempotency-Key", rel+"-2"), 422, "un"+rel+" key reused")
		want(c.do(base, "DELETE", p+"0", nil, "Authorization", A), 400, "un"+rel+" id 0")
		want(c.do(base, "DELETE", p+"999999999", nil, "Authorization", A), 404, "un"+rel+" an unknown user")
		want(c.do(base, "DELETE", p+cy, nil), 401, "un"+rel+" without token")
		want(c.do(base, "DELETE", p+cy, big, "Authorization", A), 413, "un"+rel+" with a huge body")
	}
	want(c.do(base, "DELETE", "/api/posts/"+post, nil, "Authorization", A), 403, "delete another's post")
	want(c.do(base, "DELETE", "/api/posts/1", nil, "Authorization", A), 404, "delete an unknown post")
	want(c.do(base, "DELETE", "/api/posts/-1", nil, "Authorization", A), 400, "delete a bad id")
	want(c.do(base, "DELETE", "/api/posts/"+post, nil), 401, "delete without token")
	want(c.do(base, "DELETE", "/api/posts/"+post, big, "Authorization", B), 413, "delete with a huge body")
	edit := js(map[string]string{"content": "hello, edited"})
	ex = want(c.do(base, "PATCH", "/api/posts/"+post, edit, "Authorization", B, "Idempotency-Key", "e-1", "If-Match", `"1"`), 200, "edit post")
	if ex.header.Get("ETag") != `"2"` {
		t.Errorf("edit: ETag %q, want \"2\"", ex.header.Get("ETag"))
	}
	want(c.do(base, "PATCH", "/api/posts/"+post, edit, "Authorization", B, "Idempotency-Key", "e-1", "If-Match", `"1"`), 200, "edit replay")
	want(c.do(base, "PATCH", "/api/posts/"+post, js(map[string]string{"content": "x"}), "Authorization", B, "Idempotency-Key", "e-1"), 422, "edit key reused")
	want(c.do(base, "PATCH", "/api/posts/"+post, js(map[string]string{"content": "x"}), "Authorization", B, "If-Match", `"1"`), 409, "edit of a stale version")
	want(c.do(base, "PATCH", "/api/posts/"+post, js(map[string]string{"content": "x"}), "Authorization", A), 403, "edit another's post")
	want(c.do(base, "PATCH", "/api/posts/1", js(map[string]string{"content": "x"}), "Authorization", A), 404, "edit an unknown post")
	want(c.do(base, "PATCH", "/api/posts/-1", js(map[string]string{"content": "x"}), "Authorization", A), 400, "edit a bad id")
	want(c.do(base, "PATCH", "/api/posts/"+post, js(map[string]string{"content": " "}), "Authorization", B), 400, "blank edit")
	want(c.do(base, "PATCH", "/api/posts/"+post, js(map[string]string{"content": "x"})), 401, "edit without token")
	want(c.do(base, "PATCH", "/api/posts/"+post, big, "Authorization", B), 413, "edit with a huge body")
	want(c.do(base, "DELETE", "/api/posts/"+post, nil, "Authorization", B, "Idempotency-Key", "d-1"), 204, "delete")
	want(c.do(base, "PATCH", "/api/posts/"+post, js(map[string]string{"content": "x"}), "Authorization", B), 404, "edit a deleted post")
	want(c.do(base, "GET", "/api/posts/"+post, nil, "Authorization", A), 404, "get a deleted post")
	ex = want(c.do(base, "GET", "/api/posts/"+reply, nil, "Authorization", A), 200, "get a quote of a deleted post")
	if !bytes.Contains(ex.body, []byte(`"quote":{"id":"`+post+`","unavailable":true}`)) {
		t.Errorf("a quote of a deleted post: %s", ex.body)
	}
	want(c.do(base, "DELETE", "/api/posts/"+post, nil, "Authorization", B, "Idempotency-Key", "d-1"), 204, "delete replay")
	other := id(want(c.do(base, "POST", "/api/posts", js(map[string]string{"content": "second"}), "Authorization", B), 201, "second post"))
	want(c.do(base, "DELETE", "/api/posts/"+other, nil, "Authorization", B, "Idempotency-Key", "d-1"), 422, "delete key reused")

	// Operations.
	for _, m := range []string{"GET", "HEAD"} {
		want(c.do(base, m, "/healthz", nil), 200, m+" healthz")
		want(c.do(base, m, "/readyz", nil), 200, m+" readyz")
		want(c.do(base, m, "/openapi.json", nil), 200, m+" openapi.json")
	}
	// The operators' pages are on the admin listener only.
	for _, p := range []string{"/metrics", "/status", "/debug/pprof/"} {
		want(c.do(base, "GET", p, nil), 404, p+" on the public port")
	}
	if ex := c.do(base, "GET", "/openapi.json", nil); !bytes.Equal(ex.body, api.OpenAPI()) {
		t.Error("/openapi.json is not the document")
	}

	// Unknown paths and methods.
	want(c.do(base, "GET", "/api/nothing", nil), 404, "unknown path")
	for path, allow := range map[string]string{
		"/api/posts":           "POST",
		"/api/users/1":         "GET",
		"/api/following/1":     "DELETE, PUT",
		"/api/muting/1":        "DELETE, PUT",
		"/api/blocking/1":      "DELETE, PUT",
		"/healthz":             "GET, HEAD",
		"/api/feed":            "GET",
		"/api/posts/1":         "DELETE, GET, PATCH",
		"/api/posts/1/replies": "GET",
		"/api/posts/1/repost":  "DELETE, PUT",
		"/api/posts/1/like":    "DELETE, PUT",
		"/api/notifications":   "GET",
		"/api/markers":         "GET, PUT",
		"/api/users/1/posts":   "GET",
		"/api/users":           "POST",
		"/openapi.json":        "GET, HEAD",
		"/readyz":              "GET, HEAD",
	} {
		m := "PATCH"
		if strings.Contains(allow, m) {
			m = "PUT"
		}
		ex := want(c.do(base, m, path, nil, "Authorization", A), 405, m+" "+path)
		if got := ex.header.Get("Allow"); got != allow {
			t.Errorf("%s %s: Allow %q, want %q", m, path, got, allow)
		}
	}

	// The live stream: 401, 400, 503 without a hub (the system's server
	// has none), and a 200 on an instance with one, ended by the server
	// (a stream's body lasts until then).
	want(c.do(base, "GET", "/api/feed/stream", nil), 401, "stream, no token")
	want(c.do(base, "GET", "/api/feed/stream", nil, "Authorization", A, "Last-Event-ID", "AQ"), 400, "stream, bad Last-Event-ID")
	want(c.do(base, "GET", "/api/feed/stream?cursor=%21", nil, "Authorization", A), 400, "stream, bad cursor")
	want(c.do(base, "GET", "/api/feed/stream", nil, "Authorization", A), 503, "stream, no hub")
	want(c.do(base, "GET", "/api/notifications/stream", nil), 401, "notifications stream, no token")
	want(c.do(base, "GET", "/api/notifications/stream", nil, "Authorization", A, "Last-Event-ID", "AQ"), 400, "notifications stream, bad Last-Event-ID")
	want(c.do(base, "GET", "/api/notifications/stream", nil, "Authorization", A), 503, "notifications stream, no hub")
	// A stream's 200 on an instance with a hub: its body lasts until the
	// server ends it, which another goroutine does once it is open.
	for _, path := range []string{"/api/feed/stream", "/api/notifications/stream"} {
		streams := startInstance(t, s, api.Config{})
		go func() { // not the test's goroutine: no Fatal here
			for deadline := time.Now().Add(time.Minute); streams.srv.OpenStreams() == 0 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond) // polling OpenStreams, the condition waited on
			}
			streams.srv.CloseStreams()
		}()
		ex = want(c.do(streams.baseURL, "GET", path, nil, "Authorization", A), 200, path)
		if !strings.Contains(string(ex.body), "retry: ") {
			t.Errorf("%s ended by the server: %q, want a retry hint", path, ex.body)
		}
	}

	// 503s: PostgreSQL unreachable, no query side.
	down := downServer(t)
	want(c.do(down, "POST", "/api/users", js(map[string]string{"name": "cy"})), 503, "register, PostgreSQL down")
	for _, r := range []struct{ method, path string }{
		{"GET", "/api/users/" + ana}, {"GET", "/api/users/" + ana + "/posts"}, {"GET", "/api/feed"},
		{"POST", "/api/posts"}, {"PATCH", "/api/posts/" + post}, {"DELETE", "/api/posts/" + post}, {"PUT", "/api/following/" + bob}, {"DELETE", "/api/following/" + bob},
		{"PUT", "/api/muting/" + bob}, {"DELETE", "/api/muting/" + bob}, {"PUT", "/api/blocking/" + bob}, {"DELETE", "/api/blocking/" + bob},
		{"PUT", "/api/posts/" + post + "/repost"}, {"DELETE", "/api/posts/" + post + "/repost"},
		{"PUT", "/api/posts/" + post + "/like"}, {"DELETE", "/api/posts/" + post + "/like"},
		{"GET", "/api/posts/" + post}, {"GET", "/api/posts/" + post + "/replies"},
		{"GET", "/api/notifications"}, {"GET", "/api/markers"}, {"PUT", "/api/markers"},
	} {
		var body []byte
		if r.path == "/api/markers" && r.method == "PUT" {
			body = []byte(`{}`)
		}
		if r.path == "/api/posts" || r.method == "PATCH" {
			body = js(map[string]string{"content": "x"})
		}
		want(c.do(down, r.method, r.path, body, "Authorization", A), 503, r.method+" "+r.path+", PostgreSQL down")
	}
	want(c.do(down, "GET", "/readyz", nil), 503, "readyz, PostgreSQL down")
	want(c.do(down, "HEAD", "/readyz", nil), 503, "HEAD readyz, PostgreSQL down")

	// 429s: a server at its bounds of one read and one write in flight,
	// each held by a request waiting for a PostgreSQL that never answers,
	// sheds every other read and write at once.
	shed := shedServer(t)
	for _, r := range []struct{ method, path string }{
		{"POST", "/api/users"},
		{"GET", "/api/users/" + ana}, {"GET", "/api/users/" + ana + "/posts"}, {"GET", "/api/feed"},
		{"POST", "/api/posts"}, {"PATCH", "/api/posts/" + post}, {"DELETE", "/api/posts/" + post}, {"PUT", "/api/following/" + bob}, {"DELETE", "/api/following/" + bob},
		{"PUT", "/api/muting/" + bob}, {"DELETE", "/api/muting/" + bob}, {"PUT", "/api/blocking/" + bob}, {"DELETE", "/api/blocking/" + bob},
		{"PUT", "/api/posts/" + post + "/repost"}, {"DELETE", "/api/posts/" + post + "/repost"},
		{"PUT", "/api/posts/" + post + "/like"}, {"DELETE", "/api/posts/" + post + "/like"},
		{"GET", "/api/posts/" + post}, {"GET", "/api/posts/" + post + "/replies"},
		{"GET", "/api/notifications"}, {"GET", "/api/markers"}, {"PUT", "/api/markers"},
	} {
		var body []byte
		if r.method != "GET" && r.method != "DELETE" && r.method != "PUT" {
			body = js(map[string]string{"content": "x", "name": "x"})
		}
		ex := want(c.do(shed, r.method, r.path, body, "Authorization", A), 429, r.method+" "+r.path+", shed")
		if ex.header.Get("Retry-After") == "" {
			t.Errorf("%s %s: 429 without Retry-After", r.method, r.path)
		}
	}
	// Health, readiness and metrics are never shed.
	want(c.do(shed, "GET", "/healthz", nil), 200, "healthz while shedding")

	if m := c.missing(); len(m) > 0 {
		t.Errorf("responses of the document never produced (add a request, or to notProduced with the reason):\n%s", strings.Join(m, "\n"))
	}
}

// downServer is an API whose PostgreSQL is unreachable (nothing listens
// on its port) and that has no query side.
func downServer(t *testing.T) string {
	t.Helper()
	pool, cmds, signer, users := writeSideOn(t, "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1", 5)
	srv, err := api.New(api.Config{}, api.Deps{Commands: cmds, Tokens: signer, Users: users,
		Ready: map[string]func(context.Context) error{"postgres": pool.Ping}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

// everyoneExists says every user id is registered, from memory.
type everyoneExists struct{}

func (everyoneExists) UserExists(context.Context, int64) (bool, error) { return true, nil }

// shedServer is an API bounded to one read and one write in flight, with
// both slots taken until the test ends: a read and a write wait for a
// PostgreSQL that accepts connections and never answers them.
func shedServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	pool, cmds, signer, _ := writeSideOn(t, "postgres://postgres@"+l.Addr().String()+"/stuck?sslmode=disable&connect_timeout=30", 6)
	reg := prometheus.NewRegistry()
	// The caller's identity is checked before a slot is taken: the held
	// read must pass it (from memory, as a known user would) to hold its
	// slot waiting for PostgreSQL.
	srv, err := api.New(api.Config{MaxReadsInFlight: 1, MaxWritesInFlight: 1, RequestTimeout: time.Minute},
		api.Deps{Commands: cmds, Tokens: signer, Users: everyoneExists{}, Registry: reg,
			Ready: map[string]func(context.Context) error{"postgres": pool.Ping}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	var held sync.WaitGroup
	t.Cleanup(func() { cancel(); held.Wait(); hs.Close() })
	hold := func(method, path string, body []byte) {
		req, err := http.NewRequestWithContext(ctx, method, hs.URL+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+signer.Sign(1, time.Hour))
		held.Add(1)
		go func() {
			defer held.Done()
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	hold("POST", "/api/users", []byte(`{"name":"held"}`))
	hold("GET", "/api/users/1", nil)
	inFlight := func(class string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "feed_http_in_flight" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "class" && lp.GetValue() == class {
						return m.GetGauge().GetValue()
					}
				}
			}
		}
		return 0
	}
	testenv.Eventually(t, 30*time.Second, "the held read and write in flight", func() bool {
		return inFlight("read") == 1 && inFlight("write") == 1
	})
	return hs.URL
}

// writeSideOn is the pool, commands, token signer and user check of an API
// on the PostgreSQL at dsn, with Snowflake node id node; the pool closes
// when the test ends.
func writeSideOn(t *testing.T, dsn string, node int64) (*pgxpool.Pool, *commands.Commands, *auth.Signer, *auth.Users) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ids, err := snowflake.New(node)
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := commands.New(pool, ids, commands.Config{})
	if err != nil {
		t.Fatal(err)
	}
	signer, err := auth.NewSigner(jwtSecret)
	if err != nil {
		t.Fatal(err)
	}
	users, err := auth.NewUsers(pool, 0)
	if err != nil {
		t.Fatal(err)
	}
	return pool, cmds, signer, users
}
