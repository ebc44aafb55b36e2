package api_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/bench"
	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/auth"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/internal/testenv"
	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/readmodel"
)

var (
	readUsers    = flag.Int("read.users", 2000, "BenchmarkReadHTTP: users (each follows 100-300 others, Zipf-skewed)")
	readPosts    = flag.Int("read.posts", 60000, "BenchmarkReadHTTP: posts")
	readCelebs   = flag.Int("read.celebs", 3, "BenchmarkReadHTTP: most-followed users treated as celebrities (pulled, not pushed)")
	readClients  = flag.Int("read.clients", 32, "BenchmarkReadHTTP: concurrent closed-loop clients of every phase")
	readDuration = flag.Duration("read.duration", 3*time.Second, "BenchmarkReadHTTP: length of each measured phase")
	readRounds   = flag.Int("read.rounds", 3, "BenchmarkReadHTTP: rounds of the three phases (medians are reported)")
	readWrites   = flag.Int("read.writes", 0, "BenchmarkReadHTTP: inbox writes/s to random readers during every phase (each invalidates a cached inbox; 0: none)")
	readClient   = flag.String("read.client", "raw", "BenchmarkReadHTTP: HTTP load generator, raw (one keep-alive connection per client, wrk-like) or std (net/http.Client)")
	readCache    = flag.Int("read.cache-keys", 0, "BenchmarkReadHTTP: the query side's read cache bound in Redis keys (queries.Config.ReadCacheKeys: 0 the default, -1 off)")
	readPhases   = flag.String("read.phases", "http,sql,redis,static,handler,home", "BenchmarkReadHTTP: the phases to run, a comma list of http, sql, redis, static, handler, home")
)

// BenchmarkReadHTTP measures the home feed read path over HTTP on a seeded
// dataset, beside baselines measured in the same run on the same data
// with the same number of closed-loop clients:
//
//   - http: GET /api/feed (first page, limit 20) through the whole API
//     (JWT auth, routing, metrics, query side, JSON) served by
//     api.Server.Serve (the server `feed api` runs, with its timeouts) on
//     keep-alive connections, each request for a random user;
//   - sql: the naive pull query (bench.PullSQL) for a random user;
//   - redis: the raw two commands a read needs, ZREVRANGEBYSCORE of the
//     inbox (LIMIT 21) then MGET of 20 post bodies;
//   - http, fixed page: the same API answering one real page from memory
//     (no query side, no Redis): the ceiling of this machine for any
//     query side;
//   - handler: the API's http.Handler called in process for the same
//     reads (no socket, no net/http server);
//   - home: Feed.Home called in process.
//
// Every phase also reports the process's CPU time per read (getrusage:
// user + system, the load generator included).
//
// The load generator runs in the same process: -read.client=raw (default)
// is a wrk-like client, one keep-alive connection per client and next to
// no CPU of its own; -read.client=std is net/http's Client (two goroutines
// per connection, header maps), which takes a visible share of two cores.
//
// The data: -read.users users, each following 100-300 others drawn with a
// Zipf skew, -read.posts posts over 30 days, the -read.celebs most-followed
// users as celebrities; the read models are written the way caught-up
// projectors leave them (built inboxes of 500 with ~floor, timelines,
// post cache, following sets, celebrity set). Each phase runs
// -read.duration; -read.rounds rounds; a table of every round and the
// medians is printed. It runs once whatever b.N is:
//
//	go test -run '^$' -bench ReadHTTP -benchtime 1x ./api/
func BenchmarkReadHTTP(b *testing.B) {
	if testing.Short() {
		b.Skip("seeds a large dataset")
	}
	ctx := context.Background()
	db := testenv.NewDB(b)
	r := testenv.NewRedis(b)
	keys := readmodel.Keys{Prefix: r.Prefix}
	start := time.Now()
	users := seedRead(b, ctx, db.Pool, r.Client, keys)
	b.Logf("seeded %d users, %d posts in %v", len(users), *readPosts, time.Since(start).Round(time.Millisecond))

	feedReg := prometheus.NewRegistry()
	feed, err := queries.New(queries.Config{Keys: keys, ReadCacheKeys: *readCache, Registerer: feedReg}, db.Pool, r.Client)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(feed.Close)
	ids, _ := snowflake.New(9)
	cmds, err := commands.New(db.Pool, ids, commands.Config{})
	if err != nil {
		b.Fatal(err)
	}
	signer, _ := auth.NewSigner(secret)
	knownUsers, _ := auth.NewUsers(db.Pool, 0)
	srv, err := api.New(api.Config{}, api.Deps{Commands: cmds, Tokens: signer, Users: knownUsers, Feed: feed, Registry: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	addr := serveForBench(b, srv)
	clients := *readClients
	tokens := make([]string, len(users))
	for i, u := range users {
		tokens[i] = "Bearer " + signer.Sign(u, 24*time.Hour)
	}
	var checked atomic.Int64
	// check decodes the first 200 pages of the phase: 20 items and a cursor.
	check := func(i int, body io.Reader) error {
		if checked.Add(1) > 200 {
			_, err := io.Copy(io.Discard, body)
			return err
		}
		var page queries.Page
		if err := json.NewDecoder(body).Decode(&page); err != nil {
			return err
		}
		if len(page.Items) != 20 || page.NextCursor == nil {
			return fmt.Errorf("user %d: page of %d items", users[i], len(page.Items))
		}
		return nil
	}
	// newHTTPRead returns the closed-loop operation against the API at addr.
	newHTTPRead := func(addr string) func(rng *rand.Rand) error {
		switch *readClient {
		case "std":
			url := "http://" + addr + "/api/feed"
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients, DisableCompression: true}}
			return func(rng *rand.Rand) error {
				i := rng.IntN(len(users))
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Header.Set("Authorization", tokens[i])
				resp, err := client.Do(req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("GET /api/feed: status %d", resp.StatusCode)
				}
				return check(i, resp.Body)
			}
		case "raw":
			reqs := make([][]byte, len(users))
			for i := range users {
				reqs[i] = []byte("GET /api/feed HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: " + tokens[i] + "\r\n\r\n")
			}
			conns := make(chan *rawConn, clients)
			for range clients {
				c, err := dialRaw(addr)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = c.conn.Close() })
				// One request now: an idle connection that never sent one is
				// closed after the server's ReadHeaderTimeout; after one, the
				// IdleTimeout (60 s) applies between phases.
				if _, err := c.get(reqs[0]); err != nil {
					b.Fatal(err)
				}
				conns <- c
			}
			return func(rng *rand.Rand) error {
				i := rng.IntN(len(users))
				c := <-conns
				defer func() { conns <- c }()
				body, err := c.get(reqs[i])
				if err != nil {
					return err
				}
				return check(i, bytes.NewReader(body))
			}
		}
		b.Fatalf("-read.client %q: want raw or std", *readClient)
		return nil
	}
	httpRead := newHTTPRead(addr)
	// The ceiling of this machine for any query side: the same API (auth,
	// routing, metrics, JSON, server) answering one fixed real page from
	// memory, no Redis at all.
	page, err := feed.Home(ctx, users[0], "", 20)
	if err != nil {
		b.Fatal(err)
	}
	static, err := api.New(api.Config{}, api.Deps{Commands: cmds, Tokens: signer, Users: knownUsers, Feed: staticFeed{page}, Registry: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	staticRead := newHTTPRead(serveForBench(b, static))
	// The API's handler called in process (auth, metrics, query side,
	// JSON; no connection, no net/http server): the server's own CPU per
	// read without the sockets and the load generator.
	handler := srv.Handler()
	handlerReqs := make([]*http.Request, len(users))
	for i := range users {
		handlerReqs[i], _ = http.NewRequest(http.MethodGet, "/api/feed", nil)
		handlerReqs[i].Header.Set("Authorization", tokens[i])
	}
	handlerRead := func(rng *rand.Rand) error {
		req := *handlerReqs[rng.IntN(len(users))] // the handler gets its own copy, as net/http gives each request
		w := &discardWriter{header: make(http.Header, 4)}
		handler.ServeHTTP(w, &req)
		if w.status != http.StatusOK || w.n < 1000 {
			return fmt.Errorf("handler: status %d, %d bytes", w.status, w.n)
		}
		return nil
	}
	// The query side alone, called in process: what HTTP adds is the rest.
	homeRead := func(rng *rand.Rand) error {
		p, err := feed.Home(ctx, users[rng.IntN(len(users))], "", 20)
		if err == nil && len(p.Items) != 20 {
			err = fmt.Errorf("page of %d items", len(p.Items))
		}
		return err
	}
	now := time.Now()
	sqlRead := func(rng *rand.Rand) error {
		rows, err := db.Pool.Query(ctx, bench.PullSQL, users[rng.IntN(len(users))], now)
		if err != nil {
			return err
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		if n != 20 {
			return fmt.Errorf("pull query: %d rows (%v)", n, rows.Err())
		}
		return rows.Err()
	}
	redisRead := func(rng *rand.Rand) error {
		u := users[rng.IntN(len(users))]
		m, err := r.Client.ZRevRangeByScore(ctx, keys.Inbox(u), &redis.ZRangeBy{Max: "(+inf", Min: "-inf", Count: 21}).Result()
		if err != nil {
			return err
		}
		if len(m) < 21 {
			return fmt.Errorf("inbox of %d: %d members", u, len(m))
		}
		ks := make([]string, 20)
		for i := range ks {
			id, _ := strconv.ParseInt(m[i], 10, 64)
			ks[i] = keys.Post(id)
		}
		return r.Client.MGet(ctx, ks...).Err()
	}

	// Warm up: connections, the process caches, activity writes.
	if _, err := closedLoop(clients, 2*time.Second, httpRead); err != nil {
		b.Fatal(err)
	}
	var res [][]phaseResult // per phase, per round
	type phase struct {
		short, name string
		op          func(*rand.Rand) error
	}
	var phases []phase
	for _, p := range []phase{{"http", "http GET /api/feed", httpRead}, {"sql", "sql naive pull query", sqlRead}, {"redis", "redis ZREVRANGEBYSCORE+MGET", redisRead},
		{"static", "http, fixed page from memory", staticRead}, {"handler", "API handler in process, no socket", handlerRead},
		{"home", "Feed.Home in process, no HTTP", homeRead}} {
		if slices.Contains(strings.Split(*readPhases, ","), p.short) {
			phases = append(phases, p)
		}
	}
	if len(phases) == 0 || phases[0].short != "http" {
		b.Fatalf("-read.phases %q: the http phase is required", *readPhases)
	}
	rate := func(short string) float64 { // the median rate of a phase, NaN if not run
		for i, p := range phases {
			if p.short == short {
				return median(res[i]).rate
			}
		}
		return math.NaN()
	}
	if *readWrites > 0 {
		stop := make(chan struct{})
		done := make(chan struct{})
		go inboxWriter(ctx, r.Client, keys, users, *readWrites, stop, done)
		defer func() { close(stop); <-done }()
	}
	cacheBefore := readCacheStats(b, feedReg)
	res = make([][]phaseResult, len(phases))
	b.ResetTimer()
	for range *readRounds {
		for i, p := range phases {
			pr, err := closedLoop(clients, *readDuration, p.op)
			if err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			res[i] = append(res[i], pr)
		}
	}
	b.StopTimer()

	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "phase (%d clients)\tround\treads/s\tp50 ms\tp99 ms\tp99.9 ms\tcpu µs/read\t\n", clients)
	med := make([]phaseResult, len(phases))
	for i, p := range phases {
		for j, pr := range res[i] {
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.1f\t\n", p.name, j+1, pr.rate, ms(pr.p50), ms(pr.p99), ms(pr.p999), pr.cpuUs)
		}
		med[i] = median(res[i])
		fmt.Fprintf(tw, "%s\tmedian\t%.0f\t%.2f\t%.2f\t%.2f\t%.1f\t\n", p.name, med[i].rate, ms(med[i].p50), ms(med[i].p99), ms(med[i].p999), med[i].cpuUs)
	}
	_ = tw.Flush()
	fmt.Printf("http/sql = %.1fx (target >= 30x), http/redis = %.2fx (target >= 1x), http p99 = %.2f ms (target < 10 ms)\n",
		med[0].rate/rate("sql"), med[0].rate/rate("redis"), ms(med[0].p99))
	fmt.Printf("ceiling: the API serving a fixed page without Redis = %.2fx raw Redis; the real read = %.2fx of that ceiling\n",
		rate("static")/rate("redis"), med[0].rate/rate("static"))
	fmt.Printf("cpu µs/read is this process's CPU time (user+system, getrusage) over the phase divided by its reads: the server and the in-process load generator (and the inbox writer with -read.writes)\n")
	hyd := feed.Metrics().Hydrations
	fmt.Printf("post bodies hydrated during the run: from process memory %.0f, from Redis %.0f, from PostgreSQL %.0f\n",
		counterValue(hyd.WithLabelValues("process")), counterValue(hyd.WithLabelValues("redis")), counterValue(hyd.WithLabelValues("pg")))
	cacheAfter := readCacheStats(b, feedReg)
	fmt.Printf("read cache (-read.cache-keys, %d inbox writes/s) during the rounds:", *readWrites)
	for _, e := range []string{"hit", "miss", "stored", "dropped", "invalidated", "flush", "generation"} {
		fmt.Printf(" %s %.0f", e, cacheAfter[e]-cacheBefore[e])
	}
	fmt.Println()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(med[0].rate, "http-reads/s")
	b.ReportMetric(ms(med[0].p99), "http-p99-ms")
	b.ReportMetric(med[0].cpuUs, "http-cpu-µs/read")
	b.ReportMetric(rate("sql"), "sql-reads/s")
	b.ReportMetric(rate("redis"), "redis-reads/s")
	b.ReportMetric(med[0].rate/rate("sql"), "x-sql")
	b.ReportMetric(med[0].rate/rate("redis"), "x-redis")
	b.ReportMetric(rate("static"), "static-http-reads/s")
}

// readCacheStats reads feed_query_read_cache_total by event.
func readCacheStats(b *testing.B, reg *prometheus.Registry) map[string]float64 {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "feed_query_read_cache_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "event" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// inboxWriter changes random readers' inboxes, perSec a second, until
// stop: each write adds and removes a member below every post (score
// -inf, so no page shows it), which makes Redis invalidate the inbox as a
// fan-out push does, without changing any page.
func inboxWriter(ctx context.Context, rdb redis.UniversalClient, keys readmodel.Keys, users []int64, perSec int, stop, done chan struct{}) {
	defer close(done)
	rng := rand.New(rand.NewPCG(7, 7))
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	start, sent := time.Now(), 0
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		due := int(time.Since(start).Seconds()*float64(perSec)) - sent
		if due <= 0 {
			continue
		}
		pipe := rdb.Pipeline()
		for range due {
			k := keys.Inbox(users[rng.IntN(len(users))])
			pipe.ZAdd(ctx, k, redis.Z{Score: math.Inf(-1), Member: "~bench-write"})
			pipe.ZRem(ctx, k, "~bench-write")
		}
		_, _ = pipe.Exec(ctx)
		sent += due
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// phaseResult is one measured phase.
type phaseResult struct {
	rate           float64 // operations per second
	p50, p99, p999 time.Duration
	cpuUs          float64 // the process's CPU time per operation, µs
}

// median takes each column's median across rounds.
func median(rs []phaseResult) phaseResult {
	col := func(f func(phaseResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return phaseResult{
		rate:  col(func(r phaseResult) float64 { return r.rate }),
		p50:   time.Duration(col(func(r phaseResult) float64 { return float64(r.p50) })),
		p99:   time.Duration(col(func(r phaseResult) float64 { return float64(r.p99) })),
		p999:  time.Duration(col(func(r phaseResult) float64 { return float64(r.p999) })),
		cpuUs: col(func(r phaseResult) float64 { return r.cpuUs }),
	}
}

// closedLoop runs op from clients goroutines, each issuing the next
// operation when the previous one returned, for d; it returns the rate and
// the latency percentiles of every operation.
func closedLoop(clients int, d time.Duration, op func(*rand.Rand) error) (phaseResult, error) {
	var wg sync.WaitGroup
	var failed atomic.Value
	lat := make([][]time.Duration, clients)
	cpu0 := processCPU()
	start := time.Now()
	deadline := start.Add(d)
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), uint64(start.UnixNano())))
			l := make([]time.Duration, 0, 4096)
			for {
				t0 := time.Now()
				if !t0.Before(deadline) {
					break
				}
				if err := op(rng); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				l = append(l, time.Since(t0))
			}
			lat[c] = l
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	if err, _ := failed.Load().(error); err != nil {
		return phaseResult{}, err
	}
	all := slices.Concat(lat...)
	if len(all) == 0 {
		return phaseResult{}, fmt.Errorf("no operation finished in %v", d)
	}
	slices.Sort(all)
	q := func(p float64) time.Duration { return all[min(len(all)-1, int(math.Ceil(p*float64(len(all))))-1)] }
	return phaseResult{rate: float64(len(all)) / elapsed.Seconds(), p50: q(0.50), p99: q(0.99), p999: q(0.999),
		cpuUs: float64(cpu) / float64(time.Microsecond) / float64(len(all))}, nil
}

// processCPU is the CPU time (user + system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchContent is a seeded post's text, about 100 characters.
func benchContent(id int64) string {
	return "post " + strconv.FormatInt(id, 10) + " lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor"
}

// benchPost is a seeded post.
type benchPost struct {
	id, author, ms int64
}

// seedRead writes the benchmark's dataset into PostgreSQL (users, follows,
// posts) and the read models into Redis as caught-up projectors would, and
// returns the user ids. Deterministic (fixed seed).
func seedRead(b *testing.B, ctx context.Context, pool *pgxpool.Pool, rdb redis.UniversalClient, keys readmodel.Keys) []int64 {
	b.Helper()
	nUsers, nPosts := *readUsers, *readPosts
	rng := rand.New(rand.NewPCG(42, 42))
	zipf := rand.NewZipf(rand.New(rand.NewPCG(43, 43)), 1.1, 2, uint64(nUsers-1))
	users := make([]int64, nUsers)
	for i := range users {
		users[i] = int64(i + 1)
	}
	// Follows: 100-300 distinct followees each, popular accounts first.
	follows := make(map[int64][]int64, nUsers)
	followers := make(map[int64]int, nUsers)
	var followRows [][]any
	for _, u := range users {
		want := 100 + rng.IntN(201)
		seen := map[int64]bool{u: true}
		for tries := 0; len(seen) <= want && tries < 20*want; tries++ {
			v := int64(zipf.Uint64()) + 1
			if tries >= 10*want {
				v = users[rng.IntN(nUsers)] // the tail, when Zipf keeps drawing the head
			}
			if !seen[v] {
				seen[v] = true
				follows[u] = append(follows[u], v)
				followers[v]++
				followRows = append(followRows, []any{u, v})
			}
		}
	}
	// Posts over the last 30 days; popular accounts post more.
	end := time.Now().Add(-time.Hour).UnixMilli()
	span := int64(30 * 24 * time.Hour / time.Millisecond)
	posts := make([]benchPost, 0, nPosts)
	used := map[int64]bool{}
	var postRows [][]any
	for len(posts) < nPosts {
		author := users[rng.IntN(nUsers)]
		if rng.IntN(2) == 0 {
			author = int64(zipf.Uint64()) + 1
		}
		ms := end - rng.Int64N(span)
		id := ms<<12 | int64(len(posts)&0xfff)
		if used[id] {
			continue
		}
		used[id] = true
		posts = append(posts, benchPost{id: id, author: author, ms: ms})
		postRows = append(postRows, []any{id, author, benchContent(id), time.UnixMilli(ms).UTC()})
	}
	var userRows [][]any
	for _, u := range users {
		userRows = append(userRows, []any{u, "user" + strconv.FormatInt(u, 10), int64(followers[u]), int64(len(follows[u]))})
	}
	t0 := time.Now()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	// The generated rows are consistent: skip the per-row foreign key
	// triggers (this session only).
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
		b.Fatal(err)
	}
	copyRows := func(table string, cols []string, rows [][]any) {
		if _, err := conn.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromRows(rows)); err != nil {
			b.Fatalf("copy %s: %v", table, err)
		}
	}
	copyRows("users", []string{"id", "name", "follower_count", "following_count"}, userRows)
	copyRows("follows", []string{"follower_id", "followee_id"}, followRows)
	copyRows("posts", []string{"id", "author_id", "content", "created_at"}, postRows)
	if _, err := conn.Exec(ctx, `SET session_replication_role = origin; ANALYZE users; ANALYZE follows; ANALYZE posts`); err != nil {
		b.Fatal(err)
	}
	b.Logf("PostgreSQL seeded in %v", time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()

	// Celebrities: the most-followed accounts.
	byFollowers := slices.Clone(users)
	slices.SortFunc(byFollowers, func(x, y int64) int { return cmp.Compare(followers[y], followers[x]) })
	celeb := map[int64]bool{}
	for _, c := range byFollowers[:*readCelebs] {
		celeb[c] = true
	}
	// Newest first, ties by id, as every read model orders them.
	slices.SortFunc(posts, func(x, y benchPost) int {
		return events.NewestFirst(events.FeedKey{Ms: x.ms, ID: x.id}, events.FeedKey{Ms: y.ms, ID: y.id})
	})
	byAuthor := map[int64][]benchPost{}
	for _, p := range posts {
		byAuthor[p.author] = append(byAuthor[p.author], p)
	}

	pipe := rdb.Pipeline()
	flush := func() {
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	for i, p := range posts {
		raw, _ := json.Marshal(readmodel.Post{ID: p.id, AuthorID: p.author, Content: benchContent(p.id), CreatedAt: time.UnixMilli(p.ms).UTC().Format(events.CreatedAtLayout)})
		pipe.Set(ctx, keys.Post(p.id), raw, 0)
		if i%1000 == 999 {
			flush()
		}
	}
	flush()
	// writeSet writes a sorted set of newest-first posts bounded to max,
	// with ~built and, when cut, ~floor at the highest score removed.
	writeSet := func(k string, ps []benchPost, max int) {
		zs := make([]redis.Z, 0, min(len(ps), max)+2)
		for _, p := range ps[:min(len(ps), max)] {
			zs = append(zs, redis.Z{Score: float64(p.ms), Member: strconv.FormatInt(p.id, 10)})
		}
		zs = append(zs, redis.Z{Score: math.Inf(1), Member: readmodel.SentinelBuilt})
		if len(ps) > max {
			zs = append(zs, redis.Z{Score: float64(ps[max].ms), Member: readmodel.SentinelFloor})
		}
		pipe.ZAdd(ctx, k, zs...)
	}
	for _, u := range users { // every timeline built, an author without posts' too
		writeSet(keys.Timeline(u), byAuthor[u], 1000)
	}
	flush()
	for _, c := range byFollowers[:*readCelebs] {
		pipe.SAdd(ctx, keys.Celebrities(), strconv.FormatInt(c, 10))
	}
	pipe.SAdd(ctx, keys.Celebrities(), readmodel.SentinelBuilt)
	for i, u := range users {
		args := make([]any, 0, len(follows[u]))
		pushed := make([]bool, nUsers+1) // authors whose posts reach u's inbox
		for _, v := range follows[u] {
			args = append(args, strconv.FormatInt(v, 10))
			pushed[v] = !celeb[v]
		}
		pipe.SAdd(ctx, keys.Following(u), args...)
		pipe.HSet(ctx, keys.FollowingVersions(u), readmodel.SentinelBuilt, 1)
		// posts is newest first: the inbox is its first 501 pushed posts
		// (500 kept, one more to place ~floor).
		var inbox []benchPost
		for _, p := range posts {
			if pushed[p.author] {
				inbox = append(inbox, p)
				if len(inbox) > 500 {
					break
				}
			}
		}
		writeSet(keys.Inbox(u), inbox, 500)
		if i%50 == 49 {
			flush()
		}
	}
	flush()
	b.Logf("Redis seeded in %v", time.Since(t0).Round(time.Millisecond))
	return users
}

// discardWriter is a ResponseWriter that keeps the status and counts the
// body.
type discardWriter struct {
	header http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header { return w.header }
func (w *discardWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
func (w *discardWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(b)
	return len(b), nil
}

// staticFeed answers every read with one page: the API without a query side.
type staticFeed struct{ p queries.Page }

func (s staticFeed) Home(context.Context, int64, string, int) (queries.Page, error) { return s.p, nil }
func (s staticFeed) AuthorPosts(context.Context, int64, string, int) (queries.Page, error) {
	return s.p, nil
}

// serveForBench serves srv the way `feed api` does (api.Server.Serve: its
// timeouts, its handler) on a loopback port, until the benchmark ends.
func serveForBench(b *testing.B, srv *api.Server) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// rawConn is the benchmark's lean HTTP/1.1 client: one keep-alive
// connection, a prebuilt request, a response read by its Content-Length.
// Like wrk, it spends next to no CPU of its own, so on a 2-core machine
// shared with the server the measurement is the server's, not net/http's
// client (two goroutines per connection, header maps, body wrappers).
type rawConn struct {
	conn net.Conn
	br   *bufio.Reader
	body []byte
}

func dialRaw(addr string) (*rawConn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &rawConn{conn: c, br: bufio.NewReaderSize(c, 16<<10)}, nil
}

// get sends req and returns the body of a 200 response (valid until the
// next call).
func (c *rawConn) get(req []byte) ([]byte, error) {
	if _, err := c.conn.Write(req); err != nil {
		return nil, err
	}
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
		return nil, fmt.Errorf("GET /api/feed: %q", bytes.TrimSpace(line))
	}
	n := -1
	for {
		h, err := c.br.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		if len(h) <= 2 {
			break
		}
		if name, v, ok := bytes.Cut(h, []byte(":")); ok && bytes.EqualFold(name, []byte("Content-Length")) {
			if n, err = strconv.Atoi(string(bytes.TrimSpace(v))); err != nil {
				return nil, fmt.Errorf("content-length %q", v)
			}
		}
	}
	if n < 0 {
		return nil, fmt.Errorf("GET /api/feed: response without Content-Length")
	}
	if cap(c.body) < n {
		c.body = make([]byte, n)
	}
	c.body = c.body[:n]
	_, err = io.ReadFull(c.br, c.body)
	return c.body, err
}
