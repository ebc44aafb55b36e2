package api_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
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
	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/events"
	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/internal/auth"
	"github.com/feedco/feed/internal/redisinfo"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
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
	readLayouts  = flag.String("read.layouts", "packed", "BenchmarkReadHTTP: the inbox layouts seeded (packed, the product's; zset, a sorted set per inbox that only the raw redis phase reads), a comma list")
	readLoadgen  = flag.String("read.loadgen", "process", "BenchmarkReadHTTP: where the http phases' raw load generator runs: process (a child process, so the CPU per read is the server's alone) or inprocess (beside the server)")
	readProfile  = flag.String("read.cpuprofile", "", "BenchmarkReadHTTP: write a CPU profile of the http phases alone (every round) to this file")
)

// BenchmarkReadHTTP measures the home feed read path over HTTP on a seeded
// dataset, beside baselines measured in the same run on the same data
// with the same number of closed-loop clients:
//
//   - http: GET /api/feed (first page, limit 20) through the whole API
//     (JWT auth, routing, metrics, query side, JSON) served by
//     api.Server.Serve (the server `feed api` runs, with its timeouts) on
//     keep-alive connections, each request for a random user;
//   - sql: the naive pull query (pullSQL) for a random user;
//   - redis: the raw two commands a read needs, ZREVRANGEBYSCORE of the
//     inbox (LIMIT 21) then MGET of 20 post bodies;
//   - http, fixed page: the same API answering one real page from memory
//     (no query side, no Redis): the ceiling of this machine for any
//     query side;
//   - handler: the API's http.Handler called in process for the same
//     reads (no socket, no net/http server);
//   - home: Feed.Home called in process.
//
// The http, handler and home phases run once per inbox layout of
// -read.layouts (both are seeded with the same posts), and with the packed
// layout the redis phase also reads its first page raw (GET of the buffer
// and GETRANGE of the sealed string's newest ids, then the MGET).
//
// Every phase reports the process's CPU time per read (getrusage: user +
// system) and Redis's (INFO cpu). The http phases' load generator runs in
// a child process by default (-read.loadgen=process), so the process's
// CPU is the server's alone and the child's is reported beside it;
// -read.loadgen=inprocess runs it beside the server, as -read.client=std
// always does. -read.client=raw (default) is a wrk-like client, one
// keep-alive connection per client and next to no CPU of its own; std is
// net/http's Client (two goroutines per connection, header maps).
// -read.cpuprofile=FILE profiles each http phase of the first round
// (FILE.zset, FILE.packed, FILE.static): with the child load generator,
// the server's samples alone.
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

	ids, _ := snowflake.New(9)
	cmds, err := commands.New(db.Pool, ids, commands.Config{})
	if err != nil {
		b.Fatal(err)
	}
	signer, _ := auth.NewSigner(secret)
	knownUsers, _ := auth.NewUsers(db.Pool, 0)
	clients := *readClients
	tokens := make([]string, len(users))
	for i, u := range users {
		tokens[i] = "Bearer " + signer.Sign(u, 24*time.Hour)
	}
	var checked atomic.Int64
	check := func(i int, body io.Reader) error { return checkPage(&checked, users[i], body) }
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
			op, err := rawReads(addr, tokens, clients, check)
			if err != nil {
				b.Fatal(err)
			}
			return op
		}
		b.Fatalf("-read.client %q: want raw or std", *readClient)
		return nil
	}
	// newHTTPPhase returns the http phase against addr: the load generator
	// in this process (-read.loadgen=inprocess, or -read.client=std), or in
	// a child process, so that this process's CPU is the server's.
	tokenFile := ""
	newHTTPPhase := func(addr string) func() (phaseResult, error) {
		if *readLoadgen == "inprocess" || *readClient == "std" {
			op := newHTTPRead(addr)
			return func() (phaseResult, error) { return closedLoop(clients, *readDuration, op) }
		}
		if *readLoadgen != "process" {
			b.Fatalf("-read.loadgen %q: want process or inprocess", *readLoadgen)
		}
		if tokenFile == "" {
			tokenFile = filepath.Join(b.TempDir(), "tokens")
			ids := make([]string, len(users))
			for i, u := range users {
				ids[i] = strconv.FormatInt(u, 10) + " " + tokens[i]
			}
			if err := os.WriteFile(tokenFile, []byte(strings.Join(ids, "\n")), 0o600); err != nil {
				b.Fatal(err)
			}
		}
		return func() (phaseResult, error) { return childLoad(addr, tokenFile, clients, *readDuration) }
	}

	// One query side and API per inbox layout, each over the same data.
	type side struct {
		layout  string
		feed    *queries.Feed
		reg     *prometheus.Registry
		srv     *api.Server
		addr    string
		handler http.Handler
	}
	var sides []side
	for _, l := range strings.Split(*readLayouts, ",") {
		if l != "packed" {
			continue // the query side reads packed inboxes only
		}
		reg := prometheus.NewRegistry()
		feed, err := queries.New(queries.Config{Keys: keys, ReadCacheKeys: *readCache, Registerer: reg}, db.Pool, r.Client)
		if err != nil {
			b.Fatal(err)
		}
		testenv.Start(b, feed.Service())
		srv, err := api.New(api.Config{}, api.Deps{Commands: cmds, Tokens: signer, Users: knownUsers, Feed: feed, Registry: prometheus.NewRegistry()})
		if err != nil {
			b.Fatal(err)
		}
		sides = append(sides, side{layout: l, feed: feed, reg: reg, srv: srv, addr: serveForBench(b, srv), handler: srv.Handler()})
	}
	// The ceiling of this machine for any query side: the same API (auth,
	// routing, metrics, JSON, server) answering one fixed real page from
	// memory, no Redis at all.
	page, err := sides[0].feed.Home(ctx, users[0], "", 20)
	if err != nil {
		b.Fatal(err)
	}
	static, err := api.New(api.Config{}, api.Deps{Commands: cmds, Tokens: signer, Users: knownUsers, Feed: staticFeed{page}, Registry: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	staticAddr := serveForBench(b, static)
	// The API's handler called in process (auth, metrics, query side,
	// JSON; no connection, no net/http server): the server's own CPU per
	// read without the sockets and the load generator.
	handlerReqs := make([]*http.Request, len(users))
	for i := range users {
		handlerReqs[i], _ = http.NewRequest(http.MethodGet, "/api/feed", nil)
		handlerReqs[i].Header.Set("Authorization", tokens[i])
	}
	handlerRead := func(handler http.Handler) func(rng *rand.Rand) error {
		return func(rng *rand.Rand) error {
			req := *handlerReqs[rng.IntN(len(users))] // the handler gets its own copy, as net/http gives each request
			w := &discardWriter{header: make(http.Header, 4)}
			handler.ServeHTTP(w, &req)
			if w.status != http.StatusOK || w.n < 1000 {
				return fmt.Errorf("handler: status %d, %d bytes", w.status, w.n)
			}
			return nil
		}
	}
	// The query side alone, called in process: what HTTP adds is the rest.
	homeRead := func(feed *queries.Feed) func(rng *rand.Rand) error {
		return func(rng *rand.Rand) error {
			p, err := feed.Home(ctx, users[rng.IntN(len(users))], "", 20)
			if err == nil && len(p.Items) != 20 {
				err = fmt.Errorf("page of %d items", len(p.Items))
			}
			return err
		}
	}
	now := time.Now()
	sqlRead := func(rng *rand.Rand) error {
		rows, err := db.Pool.Query(ctx, pullSQL, users[rng.IntN(len(users))], now)
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
	mgetPage := func(ids []int64) error {
		ks := make([]string, 20)
		for i := range ks {
			ks[i] = keys.Post(ids[i])
		}
		return r.Client.MGet(ctx, ks...).Err()
	}
	redisRead := func(rng *rand.Rand) error {
		u := users[rng.IntN(len(users))]
		m, err := r.Client.ZRevRangeByScore(ctx, zsetInboxKey(keys, u), &redis.ZRangeBy{Max: "(+inf", Min: "-inf", Count: 21}).Result()
		if err != nil {
			return err
		}
		if len(m) < 21 {
			return fmt.Errorf("inbox of %d: %d members", u, len(m))
		}
		ids := make([]int64, 20)
		for i := range ids {
			ids[i], _ = strconv.ParseInt(m[i], 10, 64)
		}
		return mgetPage(ids)
	}
	// The packed inbox's first page as the query side reads it (GET of the
	// buffer and GETRANGE of the sealed string's newest ids and header in
	// one pipeline), then the MGET.
	packedInboxes := homefeed.NewInboxes(keys, readmodel.Policy{})
	redisPackedRead := func(rng *rand.Rand) error {
		u := users[rng.IntN(len(users))]
		pipe := r.Client.Pipeline()
		rd := packedInboxes.QueueRead(ctx, pipe, u, readmodel.MaxScoreMs, 21)
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		p, err := rd.Result()
		if err != nil {
			return err
		}
		if len(p.Entries) < 21 {
			return fmt.Errorf("packed inbox of %d: %d entries", u, len(p.Entries))
		}
		ids := make([]int64, 20)
		for i := range ids {
			ids[i] = p.Entries[i].ID
		}
		return mgetPage(ids)
	}

	// Warm up: every reader once per layout (the activity writes, one per
	// reader per ActivityWriteInterval, and their inbox EXPIREs, which
	// invalidate the read cache), then connections and the process caches.
	for _, sd := range sides {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for i := int(next.Add(1)) - 1; i < len(users); i = int(next.Add(1)) - 1 {
					w := &discardWriter{header: make(http.Header, 4)}
					req := *handlerReqs[i]
					sd.handler.ServeHTTP(w, &req)
				}
			})
		}
		wg.Wait()
		if _, err := closedLoop(clients, 2*time.Second, newHTTPRead(sd.addr)); err != nil {
			b.Fatal(err)
		}
	}
	type phase struct {
		short, name string
		http        bool   // served over a socket: profiled with -read.cpuprofile
		profile     string // the profile's file suffix
		run         func() (phaseResult, error)
	}
	loop := func(op func(*rand.Rand) error) func() (phaseResult, error) {
		return func() (phaseResult, error) { return closedLoop(clients, *readDuration, op) }
	}
	var all []phase
	for _, sd := range sides {
		all = append(all, phase{"http", "http GET /api/feed, " + sd.layout, true, sd.layout, newHTTPPhase(sd.addr)})
	}
	all = append(all, phase{"sql", "sql naive pull query", false, "", loop(sqlRead)},
		phase{"redis", "redis ZREVRANGEBYSCORE+MGET", false, "", loop(redisRead)})
	if slices.Contains(strings.Split(*readLayouts, ","), "packed") {
		all = append(all, phase{"redis", "redis packed GET+GETRANGE, MGET", false, "", loop(redisPackedRead)})
	}
	all = append(all, phase{"static", "http, fixed page from memory", true, "static", newHTTPPhase(staticAddr)})
	for _, sd := range sides {
		all = append(all, phase{"handler", "API handler in process, " + sd.layout, false, "", loop(handlerRead(sd.handler))})
	}
	for _, sd := range sides {
		all = append(all, phase{"home", "Feed.Home in process, " + sd.layout, false, "", loop(homeRead(sd.feed))})
	}
	var phases []phase
	for _, p := range all {
		if slices.Contains(strings.Split(*readPhases, ","), p.short) {
			phases = append(phases, p)
		}
	}
	if len(phases) == 0 || phases[0].short != "http" {
		b.Fatalf("-read.phases %q: the http phase is required", *readPhases)
	}
	var res [][]phaseResult             // per phase, per round
	rate := func(name string) float64 { // the median rate of a phase, NaN if not run
		for i, p := range phases {
			if p.name == name {
				return median(res[i]).rate
			}
		}
		return math.NaN()
	}
	if *readWrites > 0 {
		stop := make(chan struct{})
		done := make(chan struct{})
		go inboxWriter(ctx, r.Client, keys, strings.Split(*readLayouts, ","), users, *readWrites, stop, done)
		defer func() { close(stop); <-done }()
	}
	cacheBefore := make([]map[string]float64, len(sides))
	for i, sd := range sides {
		cacheBefore[i] = readCacheStats(b, sd.reg)
	}
	res = make([][]phaseResult, len(phases))
	b.ResetTimer()
	for round := range *readRounds {
		for i, p := range phases {
			// -read.cpuprofile: each http phase of the first round to a
			// file of its own (FILE.zset, FILE.packed, FILE.static)
			profiled := *readProfile != "" && p.http && round == 0
			if profiled {
				startProfile(b, *readProfile+"."+p.profile)
			}
			cpu0 := redisCPU(ctx, b, r.Client)
			var ms0 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			pr, err := p.run()
			var ms1 runtime.MemStats
			runtime.ReadMemStats(&ms1)
			if profiled {
				pprof.StopCPUProfile()
			}
			if err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			pr.redisUs = float64(redisCPU(ctx, b, r.Client)-cpu0) / float64(time.Microsecond) / (pr.rate * pr.elapsed.Seconds())
			pr.allocs = float64(ms1.Mallocs-ms0.Mallocs) / (pr.rate * pr.elapsed.Seconds())
			res[i] = append(res[i], pr)
		}
	}
	b.StopTimer()

	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "phase (%d clients)\tround\treads/s\tp50 ms\tp99 ms\tp99.9 ms\tcpu µs/read\tload gen µs/read\tredis µs/read\tallocs/read\t\n", clients)
	med := make([]phaseResult, len(phases))
	for i, p := range phases {
		for j, pr := range res[i] {
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", p.name, j+1, pr.rate, ms(pr.p50), ms(pr.p99), ms(pr.p999), pr.cpuUs, pr.genUs, pr.redisUs, pr.allocs)
		}
		med[i] = median(res[i])
		fmt.Fprintf(tw, "%s\tmedian\t%.0f\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", p.name, med[i].rate, ms(med[i].p50), ms(med[i].p99), ms(med[i].p999), med[i].cpuUs, med[i].genUs, med[i].redisUs, med[i].allocs)
	}
	_ = tw.Flush()
	rawRedis := rate("redis ZREVRANGEBYSCORE+MGET")
	for i, p := range phases {
		if p.short == "http" && p.name != "http, fixed page from memory" {
			fmt.Printf("%s: http/sql = %.1fx (target >= 30x), http/redis = %.2fx (target >= 1x), http p99 = %.2f ms (target < 10 ms), the real read = %.2fx of the fixed page\n",
				p.name, med[i].rate/rate("sql naive pull query"), med[i].rate/rawRedis, ms(med[i].p99), med[i].rate/rate("http, fixed page from memory"))
		}
	}
	fmt.Printf("ceiling: the API serving a fixed page without Redis = %.2fx raw Redis\n", rate("http, fixed page from memory")/rawRedis)
	if *readLoadgen == "process" && *readClient == "raw" {
		fmt.Printf("cpu µs/read is this process's CPU time (user+system, getrusage) over the phase divided by its reads: the server's (the http phases' load generator runs in a child process: its own CPU is the load gen column)\n")
	} else {
		fmt.Printf("cpu µs/read is this process's CPU time (user+system, getrusage) over the phase divided by its reads: the server and the in-process load generator (and the inbox writer with -read.writes)\n")
	}
	fmt.Printf("allocs/read is this process's heap allocations (runtime.MemStats.Mallocs) over the phase divided by its reads\n")
	fmt.Printf("redis µs/read is Redis's CPU (INFO cpu, user+system) over the phase divided by its reads (a shared Redis counts its other clients too)\n")
	for i, sd := range sides {
		hyd := sd.feed.Metrics().Hydrations
		fmt.Printf("%s: post bodies hydrated during the run: from process memory %.0f, from Redis %.0f, from PostgreSQL %.0f\n", sd.layout,
			counterValue(hyd.WithLabelValues("process")), counterValue(hyd.WithLabelValues("redis")), counterValue(hyd.WithLabelValues("pg")))
		cacheAfter := readCacheStats(b, sd.reg)
		fmt.Printf("%s: read cache (-read.cache-keys, %d inbox writes/s) during the rounds:", sd.layout, *readWrites)
		for _, e := range []string{"hit", "miss", "stored", "dropped", "invalidated", "flush", "generation"} {
			fmt.Printf(" %s %.0f", e, cacheAfter[e]-cacheBefore[i][e])
		}
		fmt.Println()
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(med[0].rate, "http-reads/s")
	b.ReportMetric(ms(med[0].p99), "http-p99-ms")
	b.ReportMetric(med[0].cpuUs, "http-cpu-µs/read")
	b.ReportMetric(rate("sql naive pull query"), "sql-reads/s")
	b.ReportMetric(rawRedis, "redis-reads/s")
	b.ReportMetric(med[0].rate/rate("sql naive pull query"), "x-sql")
	b.ReportMetric(med[0].rate/rawRedis, "x-redis")
	b.ReportMetric(rate("http, fixed page from memory"), "static-http-reads/s")
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

// inboxWriter changes random readers' inboxes of every layout, perSec a
// second each, until stop. Each write changes an inbox as a fan-out push
// does, which makes Redis invalidate it, without changing any page: in a
// sorted set it adds and removes a member below every post (score -inf); in
// a packed inbox it appends an id below the floor to the buffer (the merge
// a full buffer asks for drops it, readers skip it).
func inboxWriter(ctx context.Context, rdb redis.UniversalClient, keys readmodel.Keys, layouts []string, users []int64, perSec int, stop, done chan struct{}) {
	defer close(done)
	rng := rand.New(rand.NewPCG(7, 7))
	packed := homefeed.NewInboxes(keys, readmodel.Policy{})
	below := packed.NewPush(1)
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
		var pushed []int64
		var replies []*redis.IntCmd
		for range due {
			u := users[rng.IntN(len(users))]
			for _, l := range layouts {
				switch l {
				case "zset":
					k := zsetInboxKey(keys, u)
					pipe.ZAdd(ctx, k, redis.Z{Score: math.Inf(-1), Member: "~bench-write"})
					pipe.ZRem(ctx, k, "~bench-write")
				case "packed":
					pushed = append(pushed, u)
					replies = append(replies, packed.QueuePush(ctx, pipe, u, below))
				}
			}
		}
		_, _ = pipe.Exec(ctx)
		if len(pushed) > 0 {
			pipe = rdb.Pipeline()
			for i, u := range pushed {
				packed.FollowUp(ctx, pipe, u, replies[i])
			}
			if pipe.Len() > 0 {
				_, _ = pipe.Exec(ctx)
			}
		}
		sent += due
	}
}

// redisCPU is Redis's CPU time so far (redisinfo.CPU).
func redisCPU(ctx context.Context, b *testing.B, rdb redis.UniversalClient) time.Duration {
	d, err := redisinfo.CPU(ctx, rdb)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func startProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.Close() })
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
}

// checkPage decodes the first 200 pages of a phase (checked counts them):
// 20 items and a cursor. The rest are read and dropped.
func checkPage(checked *atomic.Int64, user int64, body io.Reader) error {
	if checked.Add(1) > 200 {
		_, err := io.Copy(io.Discard, body)
		return err
	}
	var page queries.Page
	if err := json.NewDecoder(body).Decode(&page); err != nil {
		return err
	}
	if len(page.Items) != 20 || page.NextCursor == nil {
		return fmt.Errorf("user %d: page of %d items", user, len(page.Items))
	}
	return nil
}

// rawReads returns the closed-loop operation of the raw load generator
// against addr: clients keep-alive connections, each operation a GET
// /api/feed of a random user's token (the i-th token is user i's), checked
// by check.
func rawReads(addr string, tokens []string, clients int, check func(i int, body io.Reader) error) (func(rng *rand.Rand) error, error) {
	reqs := make([][]byte, len(tokens))
	for i, t := range tokens {
		reqs[i] = []byte("GET /api/feed HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: " + t + "\r\n\r\n")
	}
	conns := make(chan *rawConn, clients)
	for range clients {
		c, err := dialRaw(addr)
		if err != nil {
			return nil, err
		}
		// One request now: an idle connection that never sent one is
		// closed after the server's ReadHeaderTimeout; after one, the
		// IdleTimeout (60 s) applies between phases.
		if _, err := c.get(reqs[0]); err != nil {
			return nil, err
		}
		conns <- c
	}
	return func(rng *rand.Rand) error {
		i := rng.IntN(len(reqs))
		c := <-conns
		defer func() { conns <- c }()
		body, err := c.get(reqs[i])
		if err != nil {
			return err
		}
		return check(i, bytes.NewReader(body))
	}, nil
}

// loadgenEnv marks the test binary run as the http phases' load generator
// (TestMain): FEED_READ_LOADGEN_ADDR, _TOKENS (a file of "user token"
// lines), _CLIENTS and _DURATION say what to run; it prints its
// phaseResult as one JSON line.
const loadgenEnv = "FEED_READ_LOADGEN"

func TestMain(m *testing.M) {
	if os.Getenv(idleClientsEnv) == "1" {
		os.Exit(idleClientsChild())
	}
	testenv.ChildMain(m, loadgenEnv, loadgenChild)
}

// childResult is the load generator's report to the benchmark.
type childResult struct {
	Rate           float64
	P50, P99, P999 time.Duration
	Elapsed        time.Duration
	CPUUs          float64
}

func loadgenChild() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "load generator:", err); return 1 }
	raw, err := os.ReadFile(os.Getenv(loadgenEnv + "_TOKENS"))
	if err != nil {
		return fail(err)
	}
	var users []int64
	var tokens []string
	for _, line := range strings.Split(string(raw), "\n") {
		u, t, _ := strings.Cut(line, " ")
		id, err := strconv.ParseInt(u, 10, 64)
		if err != nil {
			return fail(fmt.Errorf("tokens file: %q", line))
		}
		users, tokens = append(users, id), append(tokens, t)
	}
	clients, err := strconv.Atoi(os.Getenv(loadgenEnv + "_CLIENTS"))
	if err != nil {
		return fail(err)
	}
	d, err := time.ParseDuration(os.Getenv(loadgenEnv + "_DURATION"))
	if err != nil {
		return fail(err)
	}
	var checked atomic.Int64
	op, err := rawReads(os.Getenv(loadgenEnv+"_ADDR"), tokens, clients, func(i int, body io.Reader) error { return checkPage(&checked, users[i], body) })
	if err != nil {
		return fail(err)
	}
	pr, err := closedLoop(clients, d, op)
	if err != nil {
		return fail(err)
	}
	out, _ := json.Marshal(childResult{Rate: pr.rate, P50: pr.p50, P99: pr.p99, P999: pr.p999, Elapsed: pr.elapsed, CPUUs: pr.cpuUs})
	fmt.Println(string(out))
	return 0
}

// childLoad runs the raw load generator against addr in a child process
// for d and returns its result, with cpuUs this process's CPU per read
// over the child's whole life (the server's alone) and genUs the child's
// own.
func childLoad(addr, tokenFile string, clients int, d time.Duration) (phaseResult, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), loadgenEnv+"=1", loadgenEnv+"_ADDR="+addr, loadgenEnv+"_TOKENS="+tokenFile,
		loadgenEnv+"_CLIENTS="+strconv.Itoa(clients), loadgenEnv+"_DURATION="+d.String())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cpu0 := processCPU()
	if err := cmd.Run(); err != nil {
		return phaseResult{}, fmt.Errorf("load generator: %w: %s", err, stderr.Bytes())
	}
	cpu := processCPU() - cpu0
	var cr childResult
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &cr); err != nil {
		return phaseResult{}, fmt.Errorf("load generator's report %q: %w", stdout.Bytes(), err)
	}
	reads := cr.Rate * cr.Elapsed.Seconds()
	return phaseResult{rate: cr.Rate, p50: cr.P50, p99: cr.P99, p999: cr.P999, elapsed: cr.Elapsed,
		cpuUs: float64(cpu) / float64(time.Microsecond) / reads, genUs: cr.CPUUs}, nil
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
	elapsed        time.Duration
	cpuUs          float64 // the process's CPU time per operation, µs
	genUs          float64 // the child load generator's CPU per operation, µs (0: none)
	redisUs        float64 // Redis's CPU per operation, µs
	allocs         float64 // this process's heap allocations per operation
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
		rate:    col(func(r phaseResult) float64 { return r.rate }),
		p50:     time.Duration(col(func(r phaseResult) float64 { return float64(r.p50) })),
		p99:     time.Duration(col(func(r phaseResult) float64 { return float64(r.p99) })),
		p999:    time.Duration(col(func(r phaseResult) float64 { return float64(r.p999) })),
		elapsed: time.Duration(col(func(r phaseResult) float64 { return float64(r.elapsed) })),
		cpuUs:   col(func(r phaseResult) float64 { return r.cpuUs }),
		genUs:   col(func(r phaseResult) float64 { return r.genUs }),
		redisUs: col(func(r phaseResult) float64 { return r.redisUs }),
		allocs:  col(func(r phaseResult) float64 { return r.allocs }),
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
	return phaseResult{rate: float64(len(all)) / elapsed.Seconds(), p50: q(0.50), p99: q(0.99), p999: q(0.999), elapsed: elapsed,
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
		// a Snowflake of that millisecond, as the packed inbox needs
		id := (ms-snowflake.Epoch.UnixMilli())<<22 | int64(len(posts)&(1<<22-1))
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
	packed := homefeed.NewInboxes(keys, readmodel.Policy{})
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
		writeSet(zsetInboxKey(keys, u), inbox, 500)
		if i%50 == 49 {
			flush()
		}
		// The packed layout's inbox of the same posts, as a rebuild
		// leaves it (its floor at the oldest one kept).
		es := make([]readmodel.Entry, min(len(inbox), 500))
		for j := range es {
			es[j] = readmodel.Entry{ID: inbox[j].id, Ms: inbox[j].ms}
		}
		if err := packed.WriteRebuilt(ctx, rdb, u, es); err != nil {
			b.Fatal(err)
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
func (s staticFeed) HomeDegraded(context.Context, int64, string, int) (queries.Page, error) {
	return s.p, nil
}
func (s staticFeed) AuthorPosts(context.Context, int64, int64, string, int) (queries.Page, error) {
	return s.p, nil
}
func (s staticFeed) HomeAfter(context.Context, int64, string, int) (queries.Page, error) {
	return s.p, nil
}
func (s staticFeed) AuthorPostsAfter(context.Context, int64, int64, string, int) (queries.Page, error) {
	return s.p, nil
}
func (s staticFeed) PostView(context.Context, int64, int64) (queries.PostView, error) {
	return queries.PostView{}, queries.ErrPostNotFound
}
func (s staticFeed) Replies(context.Context, int64, int64, string, int) (queries.PostViewPage, error) {
	return queries.PostViewPage{}, queries.ErrPostNotFound
}

// serveForBench serves srv the way `feed api` does (api.Server.Serve: its
// timeouts, its handler) on a loopback port, until the benchmark ends.
func serveForBench(b *testing.B, srv *api.Server) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	serveOn(b, srv, ln)
	return ln.Addr().String()
}

// serveOn serves srv on ln until the test or benchmark ends, and reports
// Serve's error.
func serveOn(tb testing.TB, srv *api.Server, ln net.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("serve: %v", err)
		}
	})
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

// pullSQL is the plain fan-out-on-read query, the baseline the read side
// must beat (the load generator's pull SQL baseline is the same query):
// the 20 newest non-deleted posts of the authors the user follows, older
// than $2.
const pullSQL = `SELECT p.id, p.created_at
FROM posts p
WHERE p.author_id IN (SELECT followee_id FROM follows WHERE follower_id = $1)
  AND p.created_at < $2
  AND p.deleted = false
ORDER BY p.created_at DESC
LIMIT 20`

// zsetInboxKey is u's inbox as a sorted set: the raw baseline of -read.layouts
// zset (the product's inboxes are packed).
func zsetInboxKey(keys readmodel.Keys, u int64) string {
	return keys.Prefix + "feed:{" + strconv.FormatInt(u, 10) + "}"
}
