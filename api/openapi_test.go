package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/events"
	"github.com/feedco/feed/queries"
)

// Every route of the router is an operation of the OpenAPI document, and
// every operation of the document is a route: a route added without its
// description (or a description left after its route) fails here. The
// responses themselves are validated against the document, on the whole
// system, by e2e's TestOpenAPIResponses.
func TestOpenAPIRoutes(t *testing.T) {
	e := setup(t, options{})
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("the OpenAPI document is invalid: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Fatalf("openapi %q, want 3.1.x", doc.OpenAPI)
	}
	routes := e.srv.Routes()
	if len(routes) < 10 {
		t.Fatalf("only %d routes: %v", len(routes), routes)
	}
	routed := map[string]bool{}
	for _, r := range routes {
		routed[r.Method+" "+r.Path] = true
		item := doc.Paths.Value(r.Path)
		if item == nil || item.GetOperation(r.Method) == nil {
			t.Errorf("route %s %s is not in the OpenAPI document", r.Method, r.Path)
		}
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if !routed[method+" "+path] {
				t.Errorf("the document's %s %s (%s) is not a route", method, path, op.OperationID)
			}
			if op.OperationID == "" {
				t.Errorf("%s %s has no operationId", method, path)
			}
		}
	}
	// Every problem type of the server is in the document's enum, spelled
	// under ProblemBase.
	enum := fmt.Sprint(doc.Components.Schemas["Problem"].Value.Properties["type"].Value.Enum)
	for _, typ := range []string{"bad-request", "unauthorized", "forbidden", "not-found", "method-not-allowed", "version-conflict",
		"payload-too-large", "idempotency-key-reused", "post-unavailable", "internal", "unavailable", "outcome-unknown", "request-timeout", "rate-limited"} {
		if !strings.Contains(enum, api.ProblemBase+typ+" ") && !strings.Contains(enum, api.ProblemBase+typ+"]") {
			t.Errorf("problem type %s is not in the document", typ)
		}
	}

	// Served as it is embedded.
	r := e.do(t, "GET", "/openapi.json", "")
	if r.Status != 200 || r.Header.Get("Content-Type") != "application/json" || !bytes.Equal(r.Body, api.OpenAPI()) {
		t.Fatalf("GET /openapi.json: %d %s", r.Status, r.Header)
	}
}

// A 405 names the path's methods in Allow; a 201 names what it created in
// Location, on a replay too.
func TestAllowAndLocation(t *testing.T) {
	e := setup(t, options{})
	for _, c := range []struct{ method, path, allow string }{
		{"GET", "/api/posts", "POST"},
		{"POST", "/api/users/7", "GET"},
		{"GET", "/api/following/7", "DELETE, PUT"},
		{"POST", "/healthz", "GET, HEAD"},
		{"DELETE", "/api/feed", "GET"},
		{"PUT", "/api/posts/9", "DELETE, GET, PATCH"},
		{"POST", "/api/posts/9/replies", "GET"},
	} {
		r := e.do(t, c.method, c.path, "")
		if r.Status != 405 || r.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d, Allow %q, want 405 and %q", c.method, c.path, r.Status, r.Header.Get("Allow"), c.allow)
		}
	}
	if r := e.do(t, "GET", "/api/nope", ""); r.Status != 404 || r.Header.Get("Allow") != "" {
		t.Errorf("unknown path: %d, Allow %q", r.Status, r.Header.Get("Allow"))
	}
	for range 2 {
		r := e.do(t, "POST", "/api/users", `{"name":"ana"}`, "Idempotency-Key", "k1")
		id := r.json(t)["id"].(string)
		if r.Status != 201 || r.Header.Get("Location") != "/api/users/"+id {
			t.Fatalf("register: %d, Location %q", r.Status, r.Header.Get("Location"))
		}
	}
	ana := e.register(t, "bob")
	r := e.do(t, "POST", "/api/posts", `{"content":"hi"}`, "Authorization", e.bearer(ana))
	if id := r.json(t)["id"].(string); r.Status != 201 || r.Header.Get("Location") != "/api/posts/"+id {
		t.Fatalf("create post: %d, Location %q", r.Status, r.Header.Get("Location"))
	}
}

// Every shape a feed item takes (a post with each optional field, a
// quote hydrated or unavailable, a quote's own quote by id, a repost
// entry) matches the Page schema as the query side encodes it, and an
// item missing what the schema requires does not: the schema is no
// catch-all. The e2e's shares tests validate such pages from the whole
// system.
func TestOpenAPIFeedItems(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	page := doc.Components.Schemas["Page"].Value
	at := "2026-11-30T09:49:48.318Z"
	item := func(id string) queries.Post {
		return queries.Post{ID: id, AuthorID: "2", Author: queries.Author{ID: "2", Name: "bob"}, Content: "so true", CreatedAt: at,
			Counts: &queries.Counts{Likes: 1}, Viewer: &queries.ViewerState{Liked: true}}
	}
	full := item("11")
	full.EditedAt = at
	full.Media = []events.Media{{URL: "https://cdn.example/a.jpg", MIMEType: "image/jpeg", Alt: "a cat", Width: 10, Height: 20}}
	full.ReplyTo = &queries.PostRef{ID: "9", AuthorID: "1"}
	quoted := item("8")
	quoted.Quote = &queries.Quote{ID: "7"}
	full.Quote = &queries.Quote{ID: "8", Post: &quoted}
	gone := item("12")
	gone.Quote = &queries.Quote{ID: "6", Unavailable: true}
	original := item("5")
	repost := queries.Post{ID: "13", AuthorID: "3", Author: queries.Author{ID: "3", Name: "cy"}, CreatedAt: at, RepostOf: &original}
	next := "cursor"
	valid := queries.Page{Items: []queries.Post{full, gone, repost, item("4")}, NextCursor: &next, PrevCursor: &next}
	check := func(what string, p queries.Page, want bool) {
		t.Helper()
		var v any
		if err := json.Unmarshal(p.AppendJSON(nil), &v); err != nil {
			t.Fatal(err)
		}
		if err := page.VisitJSON(v); (err == nil) != want {
			t.Errorf("%s: %s: valid %v, want %v (%v)", what, p.AppendJSON(nil), err == nil, want, err)
		}
	}
	check("every shape", valid, true)
	noCounts := item("1")
	noCounts.Counts = nil
	check("a post without counts", queries.Page{Items: []queries.Post{noCounts}}, false)
	bare := repost
	bare.RepostOf = nil
	check("a repost entry without its original", queries.Page{Items: []queries.Post{bare}}, false)
	nested := item("2")
	inner := item("3")
	inner.Quote = &queries.Quote{ID: "4", Post: &quoted}
	nested.Quote = &queries.Quote{ID: "3", Post: &inner}
	check("a quote's own quote hydrated", queries.Page{Items: []queries.Post{nested}}, false)
}
