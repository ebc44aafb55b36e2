package api_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// send is do for any goroutine: it returns the error instead of failing
// the test, and how long the answer took.
func (e *env) send(method, path, body string, headers ...string) (response, time.Duration, error) {
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		return response{}, 0, err
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, 0, err
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}, time.Since(start), nil
}

// result is one concurrent request's answer.
type result struct {
	r   response
	d   time.Duration
	err error
}

// launch sends n requests at once, each from its own goroutine, and
// returns the channel their results arrive on.
func (e *env) launch(n int, method, path, body func(i int) string, headers func(i int) []string) <-chan result {
	out := make(chan result, n)
	for i := range n {
		go func() {
			r, d, err := e.send(method(i), path(i), body(i), headers(i)...)
			out <- result{r, d, err}
		}()
	}
	return out
}

func fixed(s string) func(int) string { return func(int) string { return s } }

// wantShed checks that r is the load-shedding answer: 429 problem+json of
// type overloaded with Retry-After.
func wantShed(t *testing.T, r response) {
	t.Helper()
	wantProblem(t, r, http.StatusTooManyRequests, "overloaded")
	if r.Header.Get("Retry-After") != "1" {
		t.Fatalf("429 without Retry-After: %v", r.Header)
	}
}

// metricValue is the value of the series of name with labels in reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// shedFeed is the API with the query side over a redis-server of the
// test's own (which the test freezes), the read cache off (every read
// goes to Redis), and, unless cfg says one, no timeout that would end a
// read waiting on it.
func shedFeed(t *testing.T, cfg api.Config) (*env, *testenv.RedisServer, *queries.Feed) {
	t.Helper()
	srv := testenv.StartRedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: -1, WriteTimeout: -1, PoolSize: 64})
	t.Cleanup(func() { _ = rdb.Close() })
	var feed *queries.Feed
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, 2*time.Minute)
	e := setup(t, options{cfg: cfg, withPool: func(pool *pgxpool.Pool, d *api.Deps) {
		f, err := queries.New(queries.Config{Keys: readmodel.Keys{Prefix: "t:"}, ReadCacheKeys: -1, Logger: testenv.Logger()}, pool, rdb)
		if err != nil {
			t.Fatal(err)
		}
		testenv.Start(t, f.Service())
		feed = f
		d.Feed = f
		d.AfterPostCreated = func(ctx context.Context, p commands.Post) {
			_ = f.PostCreated(ctx, api.NewPostOf(p))
		}
	}})
	return e, srv, feed
}

// With Redis hung (its process stopped), MaxReadsInFlight reads wait on
// it: FullHomeReads of them on the full merge, the others degraded. Every
// read beyond them is answered 429 problem+json with Retry-After without
// waiting; health and metrics still answer. When Redis goes on, the
// admitted reads are 200, the degraded ones marked Feed-Degraded with a
// resume cursor. The metrics count each shed and degraded answer.
func TestShedReadsWhileRedisHangs(t *testing.T) {
	t.Parallel()
	const maxReads, full, extra = 6, 2, 24
	e, srv, feed := shedFeed(t, api.Config{MaxReadsInFlight: maxReads, FullHomeReads: full})
	ana, bo := e.register(t, "ana"), e.register(t, "bo")
	if r := e.do(t, "PUT", "/api/following/"+strconv.FormatInt(ana, 10), "", "Authorization", e.bearer(bo)); r.Status != 204 {
		t.Fatalf("follow: %d %s", r.Status, r.Body)
	}
	for i := range 5 {
		e.post(t, ana, fmt.Sprintf("post %d", i))
	}
	// bo's first read finds its read models cold and rebuilds them: wait
	// until a degraded page can be served from Redis.
	ctx := context.Background()
	testenv.Eventually(t, 30*time.Second, "bo's read models built", func() bool {
		if r := e.do(t, "GET", "/api/feed", "", "Authorization", e.bearer(bo)); r.Status != 200 {
			t.Fatalf("warm-up read: %d %s", r.Status, r.Body)
		}
		p, err := feed.HomeDegraded(ctx, bo, "", 20)
		return err == nil && p.Partial
	})

	srv.Freeze()
	tok := e.bearer(bo)
	admitted := e.launch(maxReads, fixed("GET"), fixed("/api/feed?limit=3"), fixed(""), func(int) []string { return []string{"Authorization", tok} })
	testenv.Eventually(t, 30*time.Second, "the read bound reached", func() bool {
		reads, _ := e.srv.InFlight()
		return reads == maxReads
	})
	if v := metricValue(t, e.srv.Registry(), "feed_http_in_flight", "class", "read"); v != maxReads {
		t.Fatalf("feed_http_in_flight{class=read} %v, want %d", v, maxReads)
	}
	paths := []string{"/api/feed", "/api/feed?after=" + "AQAAAAAAAAABAAAAAAAAAAE", "/api/users/" + strconv.FormatInt(ana, 10) + "/posts", "/api/users/" + strconv.FormatInt(ana, 10)}
	shed := e.launch(extra, fixed("GET"), func(i int) string { return paths[i%len(paths)] }, fixed(""), func(int) []string { return []string{"Authorization", tok} })
	var slowest time.Duration
	for range extra {
		res := <-shed
		if res.err != nil {
			t.Fatal(res.err)
		}
		wantShed(t, res.r)
		slowest = max(slowest, res.d)
	}
	if r := e.do(t, "GET", "/healthz", ""); r.Status != 200 {
		t.Fatalf("/healthz while reads are at their bound: %d", r.Status)
	}
	if r := e.admin(t, "/metrics"); r.Status != 200 {
		t.Fatalf("/metrics while reads are at their bound: %d", r.Status)
	}
	if v := metricValue(t, e.srv.Registry(), "feed_http_shed_total", "class", "read"); v != extra {
		t.Fatalf("feed_http_shed_total{class=read} %v, want %d", v, extra)
	}
	t.Logf("%d reads shed while %d waited on a hung Redis; the slowest 429 took %v", extra, maxReads, slowest)

	srv.Thaw()
	degraded := 0
	for range maxReads {
		res := <-admitted
		if res.err != nil {
			t.Fatal(res.err)
		}
		if res.r.Status != 200 {
			t.Fatalf("an admitted read: %d %s", res.r.Status, res.r.Body)
		}
		var page struct {
			Items      []json.RawMessage `json:"items"`
			NextCursor *string           `json:"nextCursor"`
		}
		if err := json.Unmarshal(res.r.Body, &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Items) != 3 || page.NextCursor == nil {
			t.Fatalf("an admitted read: %s", res.r.Body)
		}
		if res.r.Header.Get("Feed-Degraded") == "true" {
			degraded++
		}
	}
	if degraded != maxReads-full {
		t.Fatalf("%d of %d admitted home reads degraded, want %d (beyond the %d full ones)", degraded, maxReads, maxReads-full, full)
	}
	if v := metricValue(t, e.srv.Registry(), "feed_http_degraded_total", "reason", "load"); v != maxReads-full {
		t.Fatalf("feed_http_degraded_total{reason=load} %v, want %d", v, maxReads-full)
	}
	if reads, _ := e.srv.InFlight(); reads != 0 {
		t.Fatalf("%d reads in flight after all answered", reads)
	}
}

// Of the reads admitted, ReadsRunning run at once and the others wait for
// a turn (counted in flight and in feed_http_reads_waiting), then run in
// their turn: with Redis hung, 2 reads run (wait on it) and 3 wait; when
// Redis goes on, all 5 answer 200. A read whose request times out while
// it waits is 503 problem+json with Retry-After, saying so.
func TestReadsWaitForATurn(t *testing.T) {
	t.Parallel()
	const running, reads = 2, 5
	e, srv, _ := shedFeed(t, api.Config{MaxReadsInFlight: 8, ReadsRunning: running, FullHomeReads: -1})
	ana, bo := e.register(t, "ana"), e.register(t, "bo")
	if r := e.do(t, "PUT", "/api/following/"+strconv.FormatInt(ana, 10), "", "Authorization", e.bearer(bo)); r.Status != 204 {
		t.Fatalf("follow: %d %s", r.Status, r.Body)
	}
	e.post(t, ana, "a post")
	tok := e.bearer(bo)
	if r := e.do(t, "GET", "/api/feed", "", "Authorization", tok); r.Status != 200 {
		t.Fatalf("warm-up read: %d %s", r.Status, r.Body)
	}

	srv.Freeze()
	t.Cleanup(srv.Thaw) // a failure below must not leave the reads hung
	all := e.launch(reads, fixed("GET"), fixed("/api/feed"), fixed(""), func(int) []string { return []string{"Authorization", tok} })
	testenv.Eventually(t, 30*time.Second, "the reads admitted, the ones over the bound waiting", func() bool {
		in, _ := e.srv.InFlight()
		return in == reads && metricValue(t, e.srv.Registry(), "feed_http_reads_waiting") == reads-running
	})
	srv.Thaw()
	for range reads {
		res := <-all
		if res.err != nil {
			t.Fatal(res.err)
		}
		if res.r.Status != 200 {
			t.Fatalf("a read that waited for its turn: %d %s", res.r.Status, res.r.Body)
		}
	}
	if in, _ := e.srv.InFlight(); in != 0 || metricValue(t, e.srv.Registry(), "feed_http_reads_waiting") != 0 {
		t.Fatalf("after the answers: %d in flight, %v waiting", in, metricValue(t, e.srv.Registry(), "feed_http_reads_waiting"))
	}

	t.Run("timed out", func(t *testing.T) {
		e, srv, _ := shedFeed(t, api.Config{ReadsRunning: 1, RequestTimeout: 2 * time.Second})
		ana := e.register(t, "ana")
		tok := e.bearer(ana)
		if r := e.do(t, "GET", "/api/feed", "", "Authorization", tok); r.Status != 200 {
			t.Fatalf("warm-up read: %d %s", r.Status, r.Body)
		}
		srv.Freeze()
		t.Cleanup(srv.Thaw)
		// One runs and waits on the hung Redis (its read has no deadline
		// of its own), the other waits for the turn until its request
		// times out: that one answers first.
		both := e.launch(2, fixed("GET"), fixed("/api/feed"), fixed(""), func(int) []string { return []string{"Authorization", tok} })
		testenv.Eventually(t, 30*time.Second, "one read running, one waiting", func() bool {
			in, _ := e.srv.InFlight()
			return in == 2 && metricValue(t, e.srv.Registry(), "feed_http_reads_waiting") == 1
		})
		res := <-both
		srv.Thaw()
		if res.err != nil {
			t.Fatal(res.err)
		}
		wantProblem(t, res.r, http.StatusServiceUnavailable, "unavailable")
		if !strings.Contains(string(res.r.Body), "did not get its turn") {
			t.Fatalf("a read timed out waiting for its turn: %s", res.r.Body)
		}
		if res := <-both; res.err != nil {
			t.Fatal(res.err)
		}
	})
}

// With the author's row locked in PostgreSQL, MaxWritesInFlight posts wait
// on the lock; every write beyond them is 429 at once and appends
// nothing, while reads still answer. When the lock goes, the admitted
// posts are 201, and a shed post retried with its Idempotency-Key is a
// first attempt (201, not a replay).
func TestShedWritesWhilePostgresLocks(t *testing.T) {
	t.Parallel()
	const maxWrites, extra = 3, 12
	e := setup(t, options{cfg: api.Config{MaxWritesInFlight: maxWrites, RequestTimeout: 2 * time.Minute},
		commands: commands.Config{TxTimeout: 2 * time.Minute}})
	ana := e.register(t, "ana")
	bo := e.register(t, "bo")
	tok := e.bearer(ana)
	ctx := context.Background()
	lock, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	if _, err := lock.Exec(ctx, `SELECT 1 FROM users WHERE id = $1 FOR UPDATE`, ana); err != nil {
		t.Fatal(err)
	}

	admitted := e.launch(maxWrites, fixed("POST"), fixed("/api/posts"), func(i int) string { return fmt.Sprintf(`{"content":"admitted %d"}`, i) },
		func(int) []string { return []string{"Authorization", tok} })
	testenv.Eventually(t, 30*time.Second, "the admitted posts waiting on the lock", func() bool {
		return lockWaiters(t, e.pool) == maxWrites
	})
	if _, writes := e.srv.InFlight(); writes != maxWrites {
		t.Fatalf("%d writes in flight, want %d", writes, maxWrites)
	}
	shed := e.launch(extra, func(i int) string { return []string{"POST", "PUT", "DELETE"}[i%3] },
		func(i int) string {
			switch i % 3 {
			case 0:
				return "/api/posts"
			case 1:
				return "/api/following/" + strconv.FormatInt(bo, 10)
			}
			return "/api/posts/1"
		},
		func(i int) string {
			if i%3 == 0 {
				return `{"content":"shed"}`
			}
			return ""
		},
		func(i int) []string {
			return []string{"Authorization", tok, "Idempotency-Key", "shed-" + strconv.Itoa(i)}
		})
	var slowest time.Duration
	for range extra {
		res := <-shed
		if res.err != nil {
			t.Fatal(res.err)
		}
		wantShed(t, res.r)
		slowest = max(slowest, res.d)
	}
	if r := e.do(t, "GET", "/api/users/"+strconv.FormatInt(ana, 10), "", "Authorization", tok); r.Status != 200 {
		t.Fatalf("a read while writes are at their bound: %d %s", r.Status, r.Body)
	}
	if v := metricValue(t, e.srv.Registry(), "feed_http_shed_total", "class", "write"); v != extra {
		t.Fatalf("feed_http_shed_total{class=write} %v, want %d", v, extra)
	}
	t.Logf("%d writes shed while %d waited on a lock; the slowest 429 took %v", extra, maxWrites, slowest)

	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for range maxWrites {
		res := <-admitted
		if res.err != nil {
			t.Fatal(res.err)
		}
		if res.r.Status != http.StatusCreated {
			t.Fatalf("an admitted post: %d %s", res.r.Status, res.r.Body)
		}
	}
	if n := countRows(t, e.pool, `SELECT count(*) FROM posts WHERE author_id = $1`, ana); n != maxWrites {
		t.Fatalf("%d posts stored, want the %d admitted ones", n, maxWrites)
	}
	if n := countRows(t, e.pool, `SELECT count(*) FROM follows WHERE follower_id = $1`, ana); n != 0 {
		t.Fatalf("a shed follow was stored")
	}
	r := e.do(t, "POST", "/api/posts", `{"content":"shed"}`, "Authorization", tok, "Idempotency-Key", "shed-0")
	if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the retry of a shed post: %d %v %s", r.Status, r.Header, r.Body)
	}
}

// countRows is the count(*) that query returns.
func countRows(t *testing.T, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// lockWaiters counts the test database's backends waiting on a lock.
func lockWaiters(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// With Redis down, home reads come from PostgreSQL, at most FallbackReads
// at once: with that fallback busy (its read waits on a lock of posts),
// every other read is 503 problem+json with Retry-After, never a wait
// without bound nor a 500; readiness names Redis down. When the lock
// goes, the waiting read is 200, marked Feed-Degraded.
func TestRedisDownReadsBeyondTheFallbackAre503(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	e := setup(t, options{withPool: func(pool *pgxpool.Pool, d *api.Deps) {
		f, err := queries.New(queries.Config{Keys: readmodel.Keys{Prefix: "t:"}, FallbackReads: 1, Logger: testenv.Logger()}, pool, rdb)
		if err != nil {
			t.Fatal(err)
		}
		testenv.Start(t, f.Service())
		d.Feed = f
		d.Degradable = map[string]func(context.Context) error{"redis": func(ctx context.Context) error { return rdb.Ping(ctx).Err() }}
	}})
	ana, bo := e.register(t, "ana"), e.register(t, "bo")
	if r := e.do(t, "PUT", "/api/following/"+strconv.FormatInt(ana, 10), "", "Authorization", e.bearer(bo)); r.Status != 204 {
		t.Fatalf("follow: %d %s", r.Status, r.Body)
	}
	e.post(t, ana, "hello")
	tok := e.bearer(bo)
	srv.Stop()
	if r := e.do(t, "GET", "/api/feed", "", "Authorization", tok); r.Status != 200 || r.Header.Get("Feed-Degraded") != "true" {
		t.Fatalf("a read with Redis down: %d %v %s", r.Status, r.Header, r.Body)
	}

	ctx := context.Background()
	lock, err := e.pool.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	if _, err := lock.Exec(ctx, `LOCK TABLE posts IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	waiting := e.launch(1, fixed("GET"), fixed("/api/feed"), fixed(""), func(int) []string { return []string{"Authorization", tok} })
	testenv.Eventually(t, 30*time.Second, "the fallback read waiting on the lock", func() bool { return lockWaiters(t, e.pool) == 1 })
	const extra = 6
	refused := e.launch(extra, fixed("GET"), func(i int) string {
		if i%2 == 0 {
			return "/api/feed"
		}
		return "/api/users/" + strconv.FormatInt(ana, 10) + "/posts"
	}, fixed(""), func(int) []string { return []string{"Authorization", tok} })
	for range extra {
		res := <-refused
		if res.err != nil {
			t.Fatal(res.err)
		}
		wantProblem(t, res.r, http.StatusServiceUnavailable, "unavailable")
		if res.r.Header.Get("Retry-After") != "1" {
			t.Fatalf("503 without Retry-After: %v", res.r.Header)
		}
	}
	r := e.do(t, "GET", "/readyz", "")
	m := r.json(t)
	if r.Status != http.StatusOK || m["status"] != "degraded" || m["checks"].(map[string]any)["redis"] != "down" {
		t.Fatalf("readyz with Redis down: %d %s", r.Status, r.Body)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-waiting
	if res.err != nil || res.r.Status != 200 || res.r.Header.Get("Feed-Degraded") != "true" {
		t.Fatalf("the fallback read after the lock: %v %d %s", res.err, res.r.Status, res.r.Body)
	}
	if v := metricValue(t, e.srv.Registry(), "feed_http_degraded_total", "reason", "redis"); v != 2 {
		t.Fatalf("feed_http_degraded_total{reason=redis} %v, want 2", v)
	}
}

// With the test database refusing connections (ALLOW_CONNECTIONS false,
// its backends terminated) while a client keeps posting: every write is
// 201 or 503 with Retry-After, never another status; readiness is 503;
// and every post answered 201, before, during or after the outage, is
// stored once. Nothing answered 2xx is lost.
func TestPostgresDownWritesAre503AndNothingIsLost(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	ana := e.register(t, "ana")
	tok := e.bearer(ana)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, testenv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	allow := func(on bool) {
		t.Helper()
		if _, err := admin.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS %t`, pgx.Identifier{e.dbName}.Sanitize(), on)); err != nil {
			t.Fatal(err)
		}
		if !on {
			if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, e.dbName); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `ALTER DATABASE `+pgx.Identifier{e.dbName}.Sanitize()+` ALLOW_CONNECTIONS true`)
	})

	var (
		mu       sync.Mutex
		created  []string
		refused  int
		phase    = 0 // 0 up, 1 down, 2 up again
		badState error
	)
	post := func(i int) {
		headers := []string{"Authorization", tok}
		if i%2 == 0 {
			headers = append(headers, "Idempotency-Key", "k-"+strconv.Itoa(i))
		}
		r, _, err := e.send("POST", "/api/posts", fmt.Sprintf(`{"content":"post %d"}`, i), headers...)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			badState = err
		case r.Status == http.StatusCreated:
			var p struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(r.Body, &p); err != nil {
				badState = err
			}
			created = append(created, p.ID)
		case r.Status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") == "1" &&
			strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json"):
			refused++
		default:
			badState = fmt.Errorf("post %d in phase %d: %d %s", i, phase, r.Status, r.Body)
		}
	}
	i := 0
	for range 10 {
		post(i)
		i++
	}
	allow(false)
	mu.Lock()
	phase = 1
	mu.Unlock()
	for range 10 {
		post(i)
		i++
	}
	r := e.do(t, "GET", "/readyz", "")
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") != "1" || r.json(t)["status"] != "unavailable" {
		t.Fatalf("readyz with PostgreSQL refusing: %d %s", r.Status, r.Body)
	}
	mu.Lock()
	during := len(created)
	mu.Unlock()
	allow(true)
	mu.Lock()
	phase = 2
	mu.Unlock()
	for range 10 {
		post(i)
		i++
	}
	if badState != nil {
		t.Fatal(badState)
	}
	if during != 10 || refused != 10 || len(created) != 20 {
		t.Fatalf("%d posts created before the outage's end (want 10), %d refused (want 10), %d in all (want 20)", during, refused, len(created))
	}
	// The outage terminated this pool's idle connections too, and a
	// killed one fails its next query unless the pool pings it first
	// (only after a second idle): check on fresh connections.
	e.pool.Reset()
	rows, err := e.pool.Query(ctx, `SELECT id::text FROM posts WHERE author_id = $1`, ana)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(stored)
	slices.Sort(created)
	if !slices.Equal(stored, created) {
		t.Fatalf("stored posts %v, answered 201 %v", stored, created)
	}
	if n := e.count(t, "type LIKE 'post.created.%'"); n != len(created) {
		t.Fatalf("%d post.created events for %d posts", n, len(created))
	}
}
