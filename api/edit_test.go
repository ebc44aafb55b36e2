package api_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/events"
)

func TestEditPost(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var hooked []commands.Post
	e := setup(t, options{tweak: func(d *api.Deps) {
		d.AfterPostEdited = func(_ context.Context, p commands.Post) {
			mu.Lock()
			defer mu.Unlock()
			hooked = append(hooked, p)
		}
	}})
	ana, bo := e.register(t, "ana"), e.register(t, "bo")
	created := e.do(t, "POST", "/api/posts", `{"content":"first"}`, "Authorization", e.bearer(ana))
	if created.Status != 201 || created.Header.Get("ETag") != `"1"` {
		t.Fatalf("create: %d, ETag %q", created.Status, created.Header.Get("ETag"))
	}
	id := created.json(t)["id"].(string)
	path := "/api/posts/" + id

	r := e.do(t, "PATCH", path, `{"content":"second"}`, "Authorization", e.bearer(ana), "If-Match", `"1"`)
	if r.Status != 200 || r.Header.Get("ETag") != `"2"` || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("edit: %d %s %v", r.Status, r.Body, r.Header)
	}
	m := r.json(t)
	if m["id"] != id || m["authorId"] != strconv.FormatInt(ana, 10) || m["content"] != "second" || m["createdAt"] != created.json(t)["createdAt"] {
		t.Fatalf("edited post: %s", r.Body)
	}
	at, err := time.Parse(time.RFC3339Nano, m["editedAt"].(string))
	if err != nil || len(m["editedAt"].(string)) != len(events.CreatedAtLayout) || time.Since(at) > time.Minute {
		t.Fatalf("editedAt %v: %v", m["editedAt"], err)
	}

	// Idempotency-Key: the retry replays the first answer and appends
	// nothing; the same key for other content is 422.
	first := e.do(t, "PATCH", path, `{"content":"third"}`, "Authorization", e.bearer(ana), "Idempotency-Key", "k1")
	again := e.do(t, "PATCH", path, `{"content":"third"}`, "Authorization", e.bearer(ana), "Idempotency-Key", "k1")
	if first.Status != 200 || again.Status != 200 || string(first.Body) != string(again.Body) ||
		again.Header.Get("Idempotent-Replayed") != "true" || again.Header.Get("ETag") != `"3"` {
		t.Fatalf("idempotent edit: %d %s / %d %s %v", first.Status, first.Body, again.Status, again.Body, again.Header)
	}
	wantProblem(t, e.do(t, "PATCH", path, `{"content":"other"}`, "Authorization", e.bearer(ana), "Idempotency-Key", "k1"), 422, "idempotency-key-reused")

	// The refusals.
	wantProblem(t, e.do(t, "PATCH", path, `{"content":"x"}`, "Authorization", e.bearer(ana), "If-Match", `"2"`), 409, "version-conflict")
	wantProblem(t, e.do(t, "PATCH", path, `{"content":"x"}`, "Authorization", e.bearer(bo)), 403, "forbidden")
	wantProblem(t, e.do(t, "PATCH", path, `{"content":"   "}`, "Authorization", e.bearer(ana)), 400, "bad-request")
	wantProblem(t, e.do(t, "PATCH", path, `{"content":"`+strings.Repeat("x", 2001)+`"}`, "Authorization", e.bearer(ana)), 400, "bad-request")
	wantProblem(t, e.do(t, "PATCH", path, `{}`, "Authorization", e.bearer(ana)), 400, "bad-request")
	wantProblem(t, e.do(t, "PATCH", path, `{"content":"x","extra":1}`, "Authorization", e.bearer(ana)), 400, "bad-request")
	wantProblem(t, e.do(t, "PATCH", path, ``, "Authorization", e.bearer(ana)), 400, "bad-request")
	for _, im := range []string{`W/"3"`, `3`, `"3", "4"`, `"x"`, `""`} {
		wantProblem(t, e.do(t, "PATCH", path, `{"content":"x"}`, "Authorization", e.bearer(ana), "If-Match", im), 400, "bad-request")
	}
	wantProblem(t, e.do(t, "PATCH", "/api/posts/abc", `{"content":"x"}`, "Authorization", e.bearer(ana)), 400, "bad-request")
	wantProblem(t, e.do(t, "PATCH", "/api/posts/1", `{"content":"x"}`, "Authorization", e.bearer(ana)), 404, "not-found")
	wantProblem(t, e.do(t, "PATCH", path, `{"content":"x"}`), 401, "unauthorized")
	pid, _ := strconv.ParseInt(id, 10, 64)
	if n := e.count(t, "stream_id = $1 AND type = $2", events.PostStream(pid), events.TypePostEdited); n != 2 {
		t.Fatalf("PostEdited events: %d, want 2", n)
	}

	// If-Match * holds for any post that exists.
	if r := e.do(t, "PATCH", path, `{"content":"fourth"}`, "Authorization", e.bearer(ana), "If-Match", "*"); r.Status != 200 || r.Header.Get("ETag") != `"4"` {
		t.Fatalf("If-Match *: %d %s", r.Status, r.Body)
	}
	// A deleted post is 404, and DELETE appends after the edits.
	if r := e.do(t, "DELETE", path, "", "Authorization", e.bearer(ana)); r.Status != 204 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	wantProblem(t, e.do(t, "PATCH", path, `{"content":"x"}`, "Authorization", e.bearer(ana)), 404, "not-found")
	if n := e.count(t, "stream_id = $1 AND type = $2 AND stream_version = 5", events.PostStream(pid), events.TypePostDeleted); n != 1 {
		t.Fatalf("PostDeleted at version 5: %d, want 1", n)
	}
	// Allow lists PATCH.
	if r := e.do(t, "PUT", path, "", "Authorization", e.bearer(ana)); r.Status != 405 || !strings.Contains(r.Header.Get("Allow"), http.MethodPatch) {
		t.Fatalf("PUT: %d, Allow %q", r.Status, r.Header.Get("Allow"))
	}

	mu.Lock()
	defer mu.Unlock()
	if len(hooked) != 3 || hooked[0].Content != "second" || hooked[0].Version != 2 || hooked[0].EditedAt == nil || hooked[2].Version != 4 {
		t.Fatalf("AfterPostEdited calls: %+v (want three, none for the replay)", hooked)
	}
}
