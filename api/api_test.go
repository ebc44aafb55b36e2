package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/auth"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/testkit/testenv"
)

const secret = "test-secret-at-least-16-bytes"

type env struct {
	url string
	// adminURL serves the server's admin handler (Server.Admin).
	adminURL string
	dbName   string
	pool     *pgxpool.Pool
	signer   *auth.Signer
	srv      *api.Server
}

type options struct {
	cfg   api.Config
	tweak func(*api.Deps)
	// usersDB, if set, wraps the database the user checker queries.
	usersDB func(auth.RowQuerier) auth.RowQuerier
	// withPool, if set, completes the deps with the test's database.
	withPool func(*pgxpool.Pool, *api.Deps)
	// commands configures the write side.
	commands commands.Config
}

func setup(t *testing.T, opt options) *env {
	t.Helper()
	db := testenv.NewDB(t)
	ids, err := snowflake.New(3)
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := commands.New(db.Pool, ids, opt.commands)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := auth.NewSigner(secret)
	if err != nil {
		t.Fatal(err)
	}
	var usersDB auth.RowQuerier = db.Pool
	if opt.usersDB != nil {
		usersDB = opt.usersDB(usersDB)
	}
	users, err := auth.NewUsers(usersDB, 0)
	if err != nil {
		t.Fatal(err)
	}
	deps := api.Deps{Commands: cmds, Tokens: signer, Users: users, Ready: map[string]func(context.Context) error{"postgres": db.Pool.Ping}}
	if opt.tweak != nil {
		opt.tweak(&deps)
	}
	if opt.withPool != nil {
		opt.withPool(db.Pool, &deps)
	}
	srv, err := api.New(opt.cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	admin := httptest.NewServer(srv.Admin())
	t.Cleanup(admin.Close)
	return &env{url: hs.URL, adminURL: admin.URL, dbName: db.Name, pool: db.Pool, signer: signer, srv: srv}
}

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("response body %q is not a JSON object: %v", r.Body, err)
	}
	return m
}

// do sends one request. headers alternate name, value.
func (e *env) do(t *testing.T, method, path, body string, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// admin GETs path from the server's admin handler.
func (e *env) admin(t *testing.T, path string) response {
	t.Helper()
	return (&env{url: e.adminURL}).do(t, "GET", path, "")
}

func (e *env) bearer(user int64) string { return "Bearer " + e.signer.Sign(user, time.Hour) }

func (e *env) register(t *testing.T, name string) int64 {
	t.Helper()
	r := e.do(t, "POST", "/api/users", `{"name":"`+name+`"}`)
	if r.Status != 201 {
		t.Fatalf("register: %d %s", r.Status, r.Body)
	}
	id, err := strconv.ParseInt(r.json(t)["id"].(string), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// user registers id directly in the users table, for tests that need a
// caller with a given id and no events.
func (e *env) user(t *testing.T, id int64) {
	t.Helper()
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO users (id, name) VALUES ($1, $2)`, id, "user"+strconv.FormatInt(id, 10)); err != nil {
		t.Fatal(err)
	}
}

func (e *env) post(t *testing.T, author int64, content string) string {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"content": content})
	r := e.do(t, "POST", "/api/posts", string(b), "Authorization", e.bearer(author))
	if r.Status != 201 {
		t.Fatalf("create post: %d %s", r.Status, r.Body)
	}
	return r.json(t)["id"].(string)
}

func (e *env) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE `+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func wantProblem(t *testing.T, r response, status int, typ string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d; body %s", r.Status, status, r.Body)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q, want application/problem+json", ct)
	}
	var p api.Problem
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("problem body %q: %v", r.Body, err)
	}
	if status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") == "" {
		t.Fatalf("503 without Retry-After; body %s", r.Body)
	}
	if p.Type != api.ProblemBase+typ || p.Status != status || p.Title == "" {
		t.Fatalf("problem %+v, want type %s status %d", p, api.ProblemBase+typ, status)
	}
	if bytes.Contains(r.Body, []byte("goroutine")) || bytes.Contains(r.Body, []byte(".go:")) {
		t.Fatalf("problem leaks a stack trace: %s", r.Body)
	}
}

var createdAtRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

func TestUsers(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	r := e.do(t, "POST", "/api/users", `{"name":"ana"}`)
	if r.Status != 201 {
		t.Fatalf("register: %d %s", r.Status, r.Body)
	}
	u := r.json(t)
	if u["id"] != "1" || u["name"] != "ana" || u["followerCount"] != 0.0 || u["followingCount"] != 0.0 {
		t.Fatalf("user: %v", u)
	}
	bo := e.register(t, "bo")
	if r := e.do(t, "PUT", "/api/following/1", "", "Authorization", e.bearer(bo)); r.Status != 204 {
		t.Fatalf("follow: %d %s", r.Status, r.Body)
	}
	r = e.do(t, "GET", "/api/users/1", "", "Authorization", e.bearer(bo))
	if r.Status != 200 || r.json(t)["followerCount"] != 1.0 {
		t.Fatalf("get user: %d %s", r.Status, r.Body)
	}
	r = e.do(t, "GET", "/api/users/"+strconv.FormatInt(bo, 10), "", "Authorization", e.bearer(bo))
	if r.Status != 200 || r.json(t)["followingCount"] != 1.0 || r.json(t)["id"] != strconv.FormatInt(bo, 10) {
		t.Fatalf("get user: %d %s", r.Status, r.Body)
	}
	wantProblem(t, e.do(t, "GET", "/api/users/999", "", "Authorization", e.bearer(bo)), 404, "not-found")
	if n := e.count(t, "type = $1", events.TypeUserRegistered); n != 2 {
		t.Fatalf("UserRegistered events: %d", n)
	}
}

func TestCreatePost(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	ana := e.register(t, "ana")
	r := e.do(t, "POST", "/api/posts", `{"content":"olá 👋"}`, "Authorization", e.bearer(ana))
	if r.Status != 201 || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	p := r.json(t)
	id, err := strconv.ParseInt(p["id"].(string), 10, 64)
	if err != nil || p["authorId"] != strconv.FormatInt(ana, 10) || p["content"] != "olá 👋" {
		t.Fatalf("post: %v", p)
	}
	ca := p["createdAt"].(string)
	if !createdAtRE.MatchString(ca) || ca != snowflake.Time(id).Format(events.CreatedAtLayout) {
		t.Fatalf("createdAt %q: want the snowflake's millisecond %v in RFC 3339 UTC with ms", ca, snowflake.Time(id))
	}
	if n := e.count(t, "stream_id = $1 AND type = $2", events.PostStream(id), events.TypePostCreated); n != 1 {
		t.Fatalf("PostCreated events: %d", n)
	}
	// Exactly MaxContentChars runes of a 2-byte character is accepted.
	if r := e.do(t, "POST", "/api/posts", `{"content":"`+strings.Repeat("é", 2000)+`"}`, "Authorization", e.bearer(ana)); r.Status != 201 {
		t.Fatalf("2000 characters: %d %s", r.Status, r.Body)
	}
	// A post by a token of a user that does not exist: no identity.
	wantProblem(t, e.do(t, "POST", "/api/posts", `{"content":"x"}`, "Authorization", e.bearer(999)), 401, "unauthorized")
}

func TestBadInputs(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	ana, bo := e.register(t, "ana"), e.register(t, "bo")
	anaPost := e.post(t, ana, "mine")
	other, _ := auth.NewSigner("another-secret-of-16-bytes")
	expired := e.signer.Sign(ana, -time.Minute)
	auth := e.bearer(ana)
	before := e.count(t, "true")
	cases := []struct {
		name, method, path, body string
		headers                  []string
		status                   int
		typ                      string
	}{
		{"bad JSON", "POST", "/api/posts", `{"content":`, []string{"Authorization", auth}, 400, "bad-request"},
		{"not an object", "POST", "/api/posts", `["x"]`, []string{"Authorization", auth}, 400, "bad-request"},
		{"wrong type", "POST", "/api/posts", `{"content":5}`, []string{"Authorization", auth}, 400, "bad-request"},
		{"unknown field", "POST", "/api/posts", `{"content":"x","author":"2"}`, []string{"Authorization", auth}, 400, "bad-request"},
		{"trailing data", "POST", "/api/posts", `{"content":"x"} {}`, []string{"Authorization", auth}, 400, "bad-request"},
		{"empty body", "POST", "/api/posts", ``, []string{"Authorization", auth}, 400, "bad-request"},
		{"empty content", "POST", "/api/posts", `{"content":""}`, []string{"Authorization", auth}, 400, "bad-request"},
		{"blank content", "POST", "/api/posts", `{"content":"  \n "}`, []string{"Authorization", auth}, 400, "bad-request"},
		{"missing content", "POST", "/api/posts", `{}`, []string{"Authorization", auth}, 400, "bad-request"},
		{"over-long content", "POST", "/api/posts", `{"content":"` + strings.Repeat("é", 2001) + `"}`, []string{"Authorization", auth}, 400, "bad-request"},
		{"non-UTF-8 content", "POST", "/api/posts", "{\"content\":\"a\xff\xfeb\"}", []string{"Authorization", auth}, 400, "bad-request"},
		{"lone surrogate escape", "POST", "/api/posts", `{"content":"a\ud800b"}`, []string{"Authorization", auth}, 400, "bad-request"},
		{"NUL content", "POST", "/api/posts", `{"content":"a\u0000"}`, []string{"Authorization", auth}, 400, "bad-request"},
		{"empty name", "POST", "/api/users", `{"name":""}`, nil, 400, "bad-request"},
		{"bad JSON register", "POST", "/api/users", `{name:"x"}`, nil, 400, "bad-request"},
		{"non-numeric post id", "DELETE", "/api/posts/abc", ``, []string{"Authorization", auth}, 400, "bad-request"},
		{"zero post id", "DELETE", "/api/posts/0", ``, []string{"Authorization", auth}, 400, "bad-request"},
		{"negative post id", "DELETE", "/api/posts/-5", ``, []string{"Authorization", auth}, 400, "bad-request"},
		{"overflowing user id", "GET", "/api/users/99999999999999999999", ``, []string{"Authorization", auth}, 400, "bad-request"},
		{"non-numeric followee", "PUT", "/api/following/bo", ``, []string{"Authorization", auth}, 400, "bad-request"},
		{"plus-signed followee", "PUT", "/api/following/+2", ``, []string{"Authorization", auth}, 400, "bad-request"},
		{"self follow", "PUT", "/api/following/" + strconv.FormatInt(ana, 10), ``, []string{"Authorization", auth}, 400, "bad-request"},
		{"idempotency key too long", "POST", "/api/posts", `{"content":"x"}`, []string{"Authorization", auth, "Idempotency-Key", strings.Repeat("k", 201)}, 400, "bad-request"},
		{"empty idempotency key", "POST", "/api/posts", `{"content":"x"}`, []string{"Authorization", auth, "Idempotency-Key", ""}, 400, "bad-request"},
		{"missing token", "POST", "/api/posts", `{"content":"x"}`, nil, 401, "unauthorized"},
		{"missing token on read", "GET", "/api/users/1", ``, nil, 401, "unauthorized"},
		{"forged token", "POST", "/api/posts", `{"content":"x"}`, []string{"Authorization", "Bearer " + other.Sign(ana, time.Hour)}, 401, "unauthorized"},
		{"expired token", "POST", "/api/posts", `{"content":"x"}`, []string{"Authorization", "Bearer " + expired}, 401, "unauthorized"},
		{"garbage token", "PUT", "/api/following/2", ``, []string{"Authorization", "Bearer abc.def.ghi"}, 401, "unauthorized"},
		{"basic auth", "PUT", "/api/following/2", ``, []string{"Authorization", "Basic YTpi"}, 401, "unauthorized"},
		{"X-User-Id ignored in jwt mode", "PUT", "/api/following/2", ``, []string{"X-User-Id", "1"}, 401, "unauthorized"},
		{"another user's post", "DELETE", "/api/posts/" + anaPost, ``, []string{"Authorization", e.bearer(bo)}, 403, "forbidden"},
		{"unknown post", "DELETE", "/api/posts/12345", ``, []string{"Authorization", auth}, 404, "not-found"},
		{"unknown followee", "PUT", "/api/following/999", ``, []string{"Authorization", auth}, 404, "not-found"},
		{"unknown unfollowee", "DELETE", "/api/following/999", ``, []string{"Authorization", auth}, 404, "not-found"},
		{"unknown route", "GET", "/api/nope", ``, []string{"Authorization", auth}, 404, "not-found"},
		{"wrong method", "PATCH", "/api/posts", `{}`, []string{"Authorization", auth}, 405, "method-not-allowed"},
		{"wrong method on user", "DELETE", "/api/users/1", ``, []string{"Authorization", auth}, 405, "method-not-allowed"},
		{"oversized body", "POST", "/api/posts", `{"content":"` + strings.Repeat("a", 70<<10) + `"}`, []string{"Authorization", auth}, 413, "payload-too-large"},
		{"oversized register", "POST", "/api/users", `{"name":"` + strings.Repeat("a", 70<<10) + `"}`, nil, 413, "payload-too-large"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(t, tc.method, tc.path, tc.body, tc.headers...)
			wantProblem(t, r, tc.status, tc.typ)
			if tc.status == 401 && !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("401 without WWW-Authenticate: %v", r.Header)
			}
		})
	}
	if after := e.count(t, "true"); after != before {
		t.Fatalf("rejected requests appended %d events", after-before)
	}
}

func TestDeletePost(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	ana := e.register(t, "ana")
	id := e.post(t, ana, "bye")
	for i := range 2 {
		if r := e.do(t, "DELETE", "/api/posts/"+id, "", "Authorization", e.bearer(ana)); r.Status != 204 || len(r.Body) != 0 {
			t.Fatalf("delete %d: %d %s", i, r.Status, r.Body)
		}
	}
	pid, _ := strconv.ParseInt(id, 10, 64)
	if n := e.count(t, "stream_id = $1 AND type = $2", events.PostStream(pid), events.TypePostDeleted); n != 1 {
		t.Fatalf("PostDeleted events: %d, want 1", n)
	}
}

func TestFollowUnfollow(t *testing.T) {
	t.Parallel()
	// More concurrent writes than the default bound: no shedding here. The
	// 50 transactions queue on the pair's rows one after another, seconds
	// in all on a loaded machine (a full suite beside it): the request
	// deadline is not what this tests.
	e := setup(t, options{cfg: api.Config{MaxWritesInFlight: -1, RequestTimeout: time.Minute}})
	ana, bo := e.register(t, "ana"), e.register(t, "bo")
	path := "/api/following/" + strconv.FormatInt(bo, 10)
	steps := []string{"PUT", "PUT", "DELETE", "DELETE", "PUT"}
	for _, m := range steps {
		if r := e.do(t, m, path, "", "Authorization", e.bearer(ana)); r.Status != 204 {
			t.Fatalf("%s: %d %s", m, r.Status, r.Body)
		}
	}
	rows, err := e.pool.Query(context.Background(), `SELECT type, stream_version FROM events WHERE stream_id = $1 ORDER BY stream_version`, events.FollowStream(ana, bo))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var typ string
		var v int64
		if err := rows.Scan(&typ, &v); err != nil {
			t.Fatal(err)
		}
		got = append(got, typ+"@"+strconv.FormatInt(v, 10))
	}
	want := []string{events.TypeFollowed + "@1", events.TypeUnfollowed + "@2", events.TypeFollowed + "@3"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("follow stream %v, want %v", got, want)
	}
}

func TestConcurrentIdenticalFollows(t *testing.T) {
	t.Parallel()
	// More concurrent writes than the default bound: no shedding here.
	e := setup(t, options{cfg: api.Config{MaxWritesInFlight: -1}})
	ana, bo := e.register(t, "ana"), e.register(t, "bo")
	path := "/api/following/" + strconv.FormatInt(bo, 10)
	tok := e.bearer(ana)
	statuses := make([]int, 50)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { statuses[i] = e.do(t, "PUT", path, "", "Authorization", tok).Status })
	}
	wg.Wait()
	for i, s := range statuses {
		if s != 204 {
			t.Fatalf("request %d: status %d", i, s)
		}
	}
	if n := e.count(t, "stream_id = $1", events.FollowStream(ana, bo)); n != 1 {
		t.Fatalf("Followed events: %d, want exactly 1", n)
	}
	r := e.do(t, "GET", "/api/users/"+strconv.FormatInt(bo, 10), "", "Authorization", tok)
	if r.json(t)["followerCount"] != 1.0 {
		t.Fatalf("follower count: %s", r.Body)
	}
}

func TestIdempotency(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	ana := e.register(t, "ana")
	tok := e.bearer(ana)
	first := e.do(t, "POST", "/api/posts", `{"content":"once"}`, "Authorization", tok, "Idempotency-Key", "k-1")
	again := e.do(t, "POST", "/api/posts", `{"content":"once"}`, "Authorization", tok, "Idempotency-Key", "k-1")
	if first.Status != 201 || again.Status != 201 || !bytes.Equal(first.Body, again.Body) {
		t.Fatalf("replay differs: %d %s / %d %s", first.Status, first.Body, again.Status, again.Body)
	}
	if again.Header.Get("Idempotent-Replayed") != "true" || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("Idempotent-Replayed headers: first %q, again %q", first.Header.Get("Idempotent-Replayed"), again.Header.Get("Idempotent-Replayed"))
	}
	if n := e.count(t, "type = $1", events.TypePostCreated); n != 1 {
		t.Fatalf("PostCreated events: %d", n)
	}
	wantProblem(t, e.do(t, "POST", "/api/posts", `{"content":"different"}`, "Authorization", tok, "Idempotency-Key", "k-1"), 422, "idempotency-key-reused")

	// 204 responses replay too, and a failed first attempt stores nothing.
	wantProblem(t, e.do(t, "PUT", "/api/following/77", "", "Authorization", tok, "Idempotency-Key", "f"), 404, "not-found")
	bo := e.register(t, "bo")
	wantProblem(t, e.do(t, "PUT", "/api/following/77", "", "Authorization", tok, "Idempotency-Key", "f"), 404, "not-found")
	path := "/api/following/" + strconv.FormatInt(bo, 10)
	if r := e.do(t, "PUT", path, "", "Authorization", tok, "Idempotency-Key", "f2"); r.Status != 204 {
		t.Fatalf("follow: %d %s", r.Status, r.Body)
	}
	if r := e.do(t, "PUT", path, "", "Authorization", tok, "Idempotency-Key", "f2"); r.Status != 204 || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("follow replay: %d %v", r.Status, r.Header)
	}

	// Registration has no identity: keys are scoped to actor 0.
	u1 := e.do(t, "POST", "/api/users", `{"name":"cy"}`, "Idempotency-Key", "reg")
	u2 := e.do(t, "POST", "/api/users", `{"name":"cy"}`, "Idempotency-Key", "reg")
	if u1.Status != 201 || !bytes.Equal(u1.Body, u2.Body) {
		t.Fatalf("register replay: %s / %s", u1.Body, u2.Body)
	}
	if n := e.count(t, "type = $1", events.TypeUserRegistered); n != 3 {
		t.Fatalf("UserRegistered events: %d, want 3", n)
	}
}

func TestConcurrentIdempotentWrites(t *testing.T) {
	t.Parallel()
	// More concurrent writes than the default bound: no shedding here.
	e := setup(t, options{cfg: api.Config{MaxWritesInFlight: -1}})
	ana := e.register(t, "ana")
	tok := e.bearer(ana)
	res := make([]response, 50)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			res[i] = e.do(t, "POST", "/api/posts", `{"content":"exactly once"}`, "Authorization", tok, "Idempotency-Key", "same-key")
		})
	}
	wg.Wait()
	for i, r := range res {
		if r.Status != 201 || !bytes.Equal(r.Body, res[0].Body) {
			t.Fatalf("request %d: %d %s; request 0: %d %s", i, r.Status, r.Body, res[0].Status, res[0].Body)
		}
	}
	if n := e.count(t, "type = $1", events.TypePostCreated); n != 1 {
		t.Fatalf("PostCreated events: %d, want exactly 1", n)
	}
}

func TestTrustedHeader(t *testing.T) {
	t.Parallel()
	e := setup(t, options{cfg: api.Config{AuthMode: api.AuthTrustedHeader}, tweak: func(d *api.Deps) { d.Tokens = nil }})
	ana := e.register(t, "ana")
	r := e.do(t, "POST", "/api/posts", `{"content":"hi"}`, "X-User-Id", strconv.FormatInt(ana, 10))
	if r.Status != 201 || r.json(t)["authorId"] != strconv.FormatInt(ana, 10) {
		t.Fatalf("trusted header post: %d %s", r.Status, r.Body)
	}
	for _, bad := range []string{"", "abc", "0", "-1", "+1", "1.5", "99999999999999999999"} {
		wantProblem(t, e.do(t, "POST", "/api/posts", `{"content":"hi"}`, "X-User-Id", bad), 401, "unauthorized")
	}
	// A bearer token means nothing in this mode.
	wantProblem(t, e.do(t, "POST", "/api/posts", `{"content":"hi"}`, "Authorization", e.bearer(ana)), 401, "unauthorized")
}

func TestNewRefusesMissingDeps(t *testing.T) {
	t.Parallel()
	if _, err := api.New(api.Config{}, api.Deps{}); err == nil {
		t.Fatal("New without commands succeeded")
	}
	db := testenv.NewDB(t)
	ids, _ := snowflake.New(1)
	cmds, _ := commands.New(db.Pool, ids, commands.Config{})
	if _, err := api.New(api.Config{}, api.Deps{Commands: cmds}); err == nil {
		t.Fatal("jwt mode without a token verifier succeeded")
	}
	if _, err := api.New(api.Config{AuthMode: "none"}, api.Deps{Commands: cmds}); err == nil {
		t.Fatal("unknown auth mode accepted")
	}
	signer, _ := auth.NewSigner(secret)
	if _, err := api.New(api.Config{}, api.Deps{Commands: cmds, Tokens: signer}); err == nil {
		t.Fatal("New without a user checker succeeded")
	}
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	e := setup(t, options{tweak: func(d *api.Deps) {
		d.Ready["redis"] = func(ctx context.Context) error { return rd.Client.Ping(ctx).Err() }
	}})
	if r := e.do(t, "GET", "/healthz", ""); r.Status != 200 {
		t.Fatalf("healthz: %d", r.Status)
	}
	r := e.do(t, "GET", "/readyz", "")
	if r.Status != 200 || r.json(t)["checks"].(map[string]any)["redis"] != "ok" {
		t.Fatalf("readyz: %d %s", r.Status, r.Body)
	}
}

// deadPool is a pool whose server is not there: PostgreSQL is "down".
func deadPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:1/feed?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func TestPostgresDown(t *testing.T) {
	t.Parallel()
	pool := deadPool(t)
	ids, _ := snowflake.New(1)
	cmds, err := commands.New(pool, ids, commands.Config{})
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := auth.NewSigner(secret)
	users, _ := auth.NewUsers(pool, 0)
	srv, err := api.New(api.Config{}, api.Deps{Commands: cmds, Tokens: signer, Users: users, Ready: map[string]func(context.Context) error{"postgres": pool.Ping}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	e := &env{url: hs.URL, signer: signer}
	wantProblem(t, e.do(t, "POST", "/api/users", `{"name":"ana"}`), 503, "unavailable")
	wantProblem(t, e.do(t, "PUT", "/api/following/2", "", "Authorization", e.bearer(1)), 503, "unavailable")
	wantProblem(t, e.do(t, "GET", "/api/users/1", "", "Authorization", e.bearer(1)), 503, "unavailable")
	r := e.do(t, "GET", "/readyz", "")
	if r.Status != 503 || r.json(t)["checks"].(map[string]any)["postgres"] != "down" {
		t.Fatalf("readyz with PostgreSQL down: %d %s", r.Status, r.Body)
	}
	if r := e.do(t, "GET", "/healthz", ""); r.Status != 200 {
		t.Fatalf("healthz must not depend on PostgreSQL: %d", r.Status)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	ana := e.register(t, "ana")
	e.post(t, ana, "x")
	e.do(t, "DELETE", "/api/posts/abc", "", "Authorization", e.bearer(ana))
	e.do(t, "GET", "/nope", "")
	r := e.admin(t, "/metrics")
	for _, want := range []string{
		`feed_http_requests_total{code="201",method="POST",route="/api/posts"} 1`,
		`feed_http_requests_total{code="201",method="POST",route="/api/users"} 1`,
		`feed_http_requests_total{code="400",method="DELETE",route="/api/posts/{id}"} 1`,
		`feed_http_requests_total{code="404",method="GET",route="unmatched"} 1`,
		`feed_http_request_duration_seconds_count{method="POST",route="/api/posts"} 1`,
	} {
		if !strings.Contains(string(r.Body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestEventMetadata(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	ana := e.register(t, "ana")
	r := e.do(t, "POST", "/api/posts", `{"content":"traced"}`, "Authorization", e.bearer(ana), "X-Request-Id", "req-123", "X-Correlation-Id", "flow-9")
	if r.Header.Get("X-Request-Id") != "req-123" {
		t.Fatalf("request id not echoed: %v", r.Header)
	}
	var meta events.Metadata
	if err := e.pool.QueryRow(context.Background(), `SELECT metadata FROM events WHERE type = $1`, events.TypePostCreated).Scan(&meta); err != nil {
		t.Fatal(err)
	}
	if meta != (events.Metadata{CorrelationID: "flow-9", CausationID: "req-123", Actor: strconv.FormatInt(ana, 10)}) {
		t.Fatalf("metadata %+v", meta)
	}
	// Without headers the server makes a request id and uses it for both.
	r = e.do(t, "PUT", "/api/following/1", "", "Authorization", e.bearer(e.register(t, "bo")))
	if id := r.Header.Get("X-Request-Id"); len(id) != 36 {
		t.Fatalf("generated request id %q", id)
	}
}

func TestAfterPostCreatedHook(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []commands.Post
	e := setup(t, options{tweak: func(d *api.Deps) {
		d.AfterPostCreated = func(_ context.Context, p commands.Post) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, p)
		}
	}})
	ana := e.register(t, "ana")
	for range 2 {
		e.do(t, "POST", "/api/posts", `{"content":"hook"}`, "Authorization", e.bearer(ana), "Idempotency-Key", "h")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0].AuthorID != ana || seen[0].Content != "hook" || seen[0].ID == 0 {
		t.Fatalf("hook calls: %+v (want one, not for the replay)", seen)
	}
}

// stubFeed stands in for the query side (another package, tested there):
// it records what the API passed and answers what the test wants.
type stubFeed struct {
	mu          sync.Mutex
	user        int64
	cursor      string
	limit       int
	err         error
	panicOnRead bool
	// entered, when set, receives a value as a read begins; the read then
	// waits until release is closed.
	entered chan struct{}
	release chan struct{}
}

func (f *stubFeed) Home(ctx context.Context, user int64, cursor string, limit int) (queries.Page, error) {
	return f.read(ctx, user, cursor, limit)
}

func (f *stubFeed) HomeDegraded(ctx context.Context, user int64, cursor string, limit int) (queries.Page, error) {
	return f.read(ctx, user, "degraded:"+cursor, limit)
}

func (f *stubFeed) AuthorPosts(ctx context.Context, _, author int64, cursor string, limit int) (queries.Page, error) {
	return f.read(ctx, author, cursor, limit)
}

func (f *stubFeed) HomeAfter(ctx context.Context, user int64, after string, limit int) (queries.Page, error) {
	return f.read(ctx, user, "after:"+after, limit)
}

func (f *stubFeed) AuthorPostsAfter(ctx context.Context, _, author int64, after string, limit int) (queries.Page, error) {
	return f.read(ctx, author, "after:"+after, limit)
}

func (f *stubFeed) PostView(context.Context, int64, int64) (queries.PostView, error) {
	return queries.PostView{}, queries.ErrPostNotFound
}

func (f *stubFeed) Replies(context.Context, int64, int64, string, int) (queries.PostViewPage, error) {
	return queries.PostViewPage{}, queries.ErrPostNotFound
}

func (f *stubFeed) read(ctx context.Context, user int64, cursor string, limit int) (queries.Page, error) {
	if f.panicOnRead {
		panic("boom")
	}
	if f.entered != nil {
		f.entered <- struct{}{}
		<-f.release
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.user, f.cursor, f.limit = user, cursor, limit
	if f.err != nil {
		return queries.Page{}, f.err
	}
	next := "c2"
	return queries.Page{Items: []queries.Post{{ID: "5", AuthorID: "1", Content: "x", CreatedAt: "2026-11-30T09:41:12.345Z"}}, NextCursor: &next}, nil
}

type cursorErr struct{}

func (cursorErr) Error() string   { return "bad cursor" }
func (cursorErr) BadCursor() bool { return true }

func TestFeedEndpoints(t *testing.T) {
	t.Parallel()
	feed := &stubFeed{}
	e := setup(t, options{tweak: func(d *api.Deps) { d.Feed = feed }})
	e.user(t, 7)
	tok := e.bearer(7)
	r := e.do(t, "GET", "/api/feed", "", "Authorization", tok)
	if r.Status != 200 || feed.user != 7 || feed.limit != api.DefaultLimit || feed.cursor != "" {
		t.Fatalf("feed: %d %s; reader got user %d limit %d cursor %q", r.Status, r.Body, feed.user, feed.limit, feed.cursor)
	}
	if m := r.json(t); m["nextCursor"] != "c2" || len(m["items"].([]any)) != 1 {
		t.Fatalf("page: %s", r.Body)
	}
	r = e.do(t, "GET", "/api/users/9/posts?limit=50&cursor=abc%2Bdef", "", "Authorization", tok)
	if r.Status != 200 || feed.user != 9 || feed.limit != 50 || feed.cursor != "abc+def" {
		t.Fatalf("author posts: %d; reader got user %d limit %d cursor %q", r.Status, feed.user, feed.limit, feed.cursor)
	}
	for _, q := range []string{"limit=0", "limit=51", "limit=abc", "limit=-1", "limit=+5", "cursor=" + strings.Repeat("c", queries.MaxCursorLen+1)} {
		wantProblem(t, e.do(t, "GET", "/api/feed?"+q, "", "Authorization", tok), 400, "bad-request")
	}
	wantProblem(t, e.do(t, "GET", "/api/users/x/posts", "", "Authorization", tok), 400, "bad-request")
	wantProblem(t, e.do(t, "GET", "/api/feed", ""), 401, "unauthorized")
	feed.err = cursorErr{}
	wantProblem(t, e.do(t, "GET", "/api/feed?cursor=zzz", "", "Authorization", tok), 400, "bad-request")
	feed.err = queries.ErrInvalidLimit
	wantProblem(t, e.do(t, "GET", "/api/feed", "", "Authorization", tok), 400, "bad-request")
	feed.err = errors.New("an unexpected error")
	wantProblem(t, e.do(t, "GET", "/api/feed", "", "Authorization", tok), 500, "internal")
	// A connection dropped under the read (EOF) is a dependency down: 503.
	feed.err = io.ErrUnexpectedEOF
	wantProblem(t, e.do(t, "GET", "/api/feed", "", "Authorization", tok), 503, "unavailable")

	noFeed := setup(t, options{})
	noFeed.user(t, 1)
	wantProblem(t, noFeed.do(t, "GET", "/api/feed", "", "Authorization", noFeed.bearer(1)), 503, "unavailable")
}

func TestPanicRecovery(t *testing.T) {
	t.Parallel()
	e := setup(t, options{tweak: func(d *api.Deps) { d.Feed = &stubFeed{panicOnRead: true} }})
	e.user(t, 1)
	wantProblem(t, e.do(t, "GET", "/api/feed", "", "Authorization", e.bearer(1)), 500, "internal")
	// The server still serves.
	if r := e.do(t, "GET", "/healthz", ""); r.Status != 200 {
		t.Fatalf("after panic: %d", r.Status)
	}
	if r := e.admin(t, "/metrics"); !strings.Contains(string(r.Body), `feed_http_requests_total{code="500",method="GET",route="/api/feed"} 1`) {
		t.Fatal("the panic was not counted as a 500")
	}
}

func TestSharedRegistry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector()) // already there: New must tolerate it
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "feed_other_component_total", Help: "A collector of another component."})
	reg.MustRegister(other)
	other.Inc()
	e := setup(t, options{tweak: func(d *api.Deps) { d.Registry = reg }})
	r := e.admin(t, "/metrics")
	if !strings.Contains(string(r.Body), "feed_other_component_total 1") || !strings.Contains(string(r.Body), "go_goroutines") {
		t.Fatalf("shared registry not served:\n%s", r.Body)
	}
	if e.srv.Registry() != reg {
		t.Fatal("Registry() is not the one passed in Deps")
	}
}

// GET /api/feed goes through mux like every route: request ids, the
// route's metrics labels, and mux's 405 and 404 for the methods and paths
// near it.
func TestFeedRoute(t *testing.T) {
	t.Parallel()
	e := setup(t, options{tweak: func(d *api.Deps) { d.Feed = &stubFeed{} }})
	e.user(t, 7)
	tok := e.bearer(7)
	r := e.do(t, "GET", "/api/feed?limit=5", "", "Authorization", tok, "X-Request-Id", "req-hot")
	if r.Status != 200 || r.Header.Get("X-Request-Id") != "req-hot" || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /api/feed: %d %v %s", r.Status, r.Header, r.Body)
	}
	if r = e.do(t, "GET", "/api/feed", "", "Authorization", tok); len(r.Header.Get("X-Request-Id")) != 36 {
		t.Fatalf("no request id generated: %v", r.Header)
	}
	wantProblem(t, e.do(t, "POST", "/api/feed", "{}", "Authorization", tok), 405, "method-not-allowed")
	if r = e.do(t, "HEAD", "/api/feed", "", "Authorization", tok); r.Status != 405 {
		t.Fatalf("HEAD /api/feed: %d", r.Status)
	}
	wantProblem(t, e.do(t, "GET", "/api/feed/", "", "Authorization", tok), 404, "not-found")
	m := string(e.admin(t, "/metrics").Body)
	for _, want := range []string{
		`feed_http_requests_total{code="200",method="GET",route="/api/feed"} 2`,
		`feed_http_requests_total{code="405",method="POST",route="unmatched"} 1`,
		`feed_http_request_duration_seconds_count{method="GET",route="/api/feed"} 2`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
