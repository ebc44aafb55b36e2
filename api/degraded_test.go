package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// With Redis killed: the home feed is 200 from PostgreSQL with
// Feed-Degraded and the truth's posts, posts are 201 and the write
// circuit opens (so they stop waiting on Redis), readiness says Redis is
// down and the API degraded; no answer is a 5xx.
func TestRedisDownServesDegraded(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	var feed *queries.Feed
	e := setup(t, options{withPool: func(pool *pgxpool.Pool, d *api.Deps) {
		f, err := queries.New(queries.Config{Keys: readmodel.Keys{Prefix: "t:"}, Logger: testenv.Logger()}, pool, rdb)
		if err != nil {
			t.Fatal(err)
		}
		testenv.Start(t, f.Service())
		feed = f
		d.Feed = f
		d.AfterPostCreated = func(ctx context.Context, p commands.Post) {
			_ = f.PostCreated(ctx, api.NewPostOf(p))
		}
		d.Degradable = map[string]func(context.Context) error{"redis": func(ctx context.Context) error { return rdb.Ping(ctx).Err() }}
	}})
	ana, bo := e.register(t, "ana"), e.register(t, "bo")
	if r := e.do(t, "PUT", "/api/following/"+strconv.FormatInt(ana, 10), "", "Authorization", e.bearer(bo)); r.Status != 204 {
		t.Fatalf("follow: %d %s", r.Status, r.Body)
	}
	first := e.post(t, ana, "before the outage")

	srv.Stop()
	var ids []string
	for range 6 {
		ids = append(ids, e.post(t, ana, "during the outage"))
	}
	if s := feed.Circuits().Writes; s != "open" {
		t.Fatalf("write circuit %s after posts with Redis down, want open", s)
	}
	r := e.do(t, "GET", "/api/feed?limit=50", "", "Authorization", e.bearer(bo))
	if r.Status != 200 || r.Header.Get("Feed-Degraded") != "true" {
		t.Fatalf("feed with Redis down: %d %q %s", r.Status, r.Header.Get("Feed-Degraded"), r.Body)
	}
	var page struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	if err := json.Unmarshal(r.Body, &page); err != nil {
		t.Fatal(err)
	}
	want := append([]string{}, ids...)
	for i, j := 0, len(want)-1; i < j; i, j = i+1, j-1 {
		want[i], want[j] = want[j], want[i]
	}
	want = append(want, first)
	if len(page.Items) != len(want) {
		t.Fatalf("degraded feed has %d posts, want %d: %s", len(page.Items), len(want), r.Body)
	}
	for i, it := range page.Items {
		if it.ID != want[i] {
			t.Fatalf("degraded feed post %d is %s, want %s", i, it.ID, want[i])
		}
	}
	if r := e.do(t, "GET", "/api/users/"+strconv.FormatInt(ana, 10)+"/posts?limit=2", "", "Authorization", e.bearer(bo)); r.Status != 200 || r.Header.Get("Feed-Degraded") != "true" {
		t.Fatalf("author posts with Redis down: %d %s", r.Status, r.Body)
	}
	r = e.do(t, "GET", "/readyz", "")
	m := r.json(t)
	if r.Status != http.StatusOK || m["status"] != "degraded" || m["checks"].(map[string]any)["redis"] != "down" || m["checks"].(map[string]any)["postgres"] != "ok" {
		t.Fatalf("readyz with Redis down: %d %s", r.Status, r.Body)
	}
}

// Every backend of the database terminated (pg_terminate_backend) under a
// steady stream of writes: no answer is a 500; each created post exists
// once.
func TestPostgresTerminationsAreNever500(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	ana := e.register(t, "ana")
	ctx := context.Background()
	stop := make(chan struct{})
	done := make(chan struct{})
	var kills atomic.Int64
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			var n int
			_ = e.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`).Scan(&n)
			kills.Add(int64(n))
		}
	}()
	created := 0
	for i := range 60 {
		headers := []string{"Authorization", e.bearer(ana)}
		if i%2 == 0 {
			headers = append(headers, "Idempotency-Key", "k-"+strconv.Itoa(i))
		}
		r := e.do(t, "POST", "/api/posts", `{"content":"under terminations"}`, headers...)
		switch r.Status {
		case http.StatusCreated:
			created++
		case http.StatusServiceUnavailable:
			wantProblem(t, r, 503, typeOf(t, r))
		default:
			t.Fatalf("post %d under terminations: %d %s", i, r.Status, r.Body)
		}
	}
	close(stop)
	<-done
	// The terminations reached this pool's idle connections too, and a
	// killed one fails its next query: check on fresh connections.
	e.pool.Reset()
	var posts, evs int
	if err := e.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM posts WHERE author_id = $1), (SELECT count(*) FROM events WHERE type LIKE 'post.created.%')`, ana).Scan(&posts, &evs); err != nil {
		t.Fatal(err)
	}
	if posts < created || evs != posts {
		t.Fatalf("%d posts and %d post.created events stored, %d answered 201", posts, evs, created)
	}
	t.Logf("%d of 60 posts created, %d backends terminated", created, kills.Load())
	if kills.Load() == 0 {
		t.Fatal("no backend was terminated")
	}
	if created < 30 {
		t.Fatalf("only %d of 60 posts created under terminations: the retries do not work", created)
	}
}

// typeOf is the problem type of r after the base, for wantProblem.
func typeOf(t *testing.T, r response) string {
	t.Helper()
	var p api.Problem
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("problem body %q: %v", r.Body, err)
	}
	typ := strings.TrimPrefix(p.Type, api.ProblemBase)
	if typ != "unavailable" && typ != "outcome-unknown" {
		t.Fatalf("503 of type %q", p.Type)
	}
	return typ
}
