package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
)

// LagSample is one reading of the pipeline's lags.
type LagSample struct {
	// CDCLagBytes and CDCLagSeconds are the replication slot's lag.
	CDCLagBytes   int64   `json:"cdcLagBytes"`
	CDCLagSeconds float64 `json:"cdcLagSeconds"`
	// ConsumerLag is each projector's consumer-group lag in messages.
	ConsumerLag map[string]int64 `json:"consumerLag"`
}

// Sampler reads the lags (what `feed status` shows).
type Sampler func(ctx context.Context) (LagSample, error)

// Tokens returns a bearer token for a user.
type Tokens func(userID int64) string

// Deps are the runner's optional collaborators: without DB and Redis the
// baselines, the activation and the vacuum are skipped; without Sampler
// no lags.
type Deps struct {
	DB    Querier
	Redis redis.UniversalClient
	Keys  readmodel.Keys
	// Inboxes are the inbox operations, for the raw Redis baseline and the
	// inbox sample; nil: those under Keys with the default policy.
	Inboxes *homefeed.Inboxes
	Sampler Sampler
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// HTTP, when set, is the client of every request; nil uses the
	// benchmark's lean HTTP/1.1 client (httpc.go) for the API's requests
	// and a net/http client sized for Clients for /metrics.
	HTTP *http.Client
}

// inboxes returns Inboxes, or those under Keys with the default policy.
func (d Deps) inboxes() homefeed.Inboxes {
	if d.Inboxes != nil {
		return *d.Inboxes
	}
	return homefeed.NewInboxes(d.Keys, readmodel.Policy{})
}

// rawInboxRead names the raw baseline's inbox read.
func rawInboxRead(homefeed.Inboxes) string { return "GET + GETRANGE 21" }

// Runner runs one benchmark.
type Runner struct {
	cfg    Config
	pop    *Population
	tokens Tokens
	deps   Deps
	client *http.Client
	lean   *leanClient // nil when Deps.HTTP is given

	churnMu sync.Mutex
}

// New checks the configuration and builds a runner.
func New(cfg Config, pop *Population, tokens Tokens, deps Deps) (*Runner, error) {
	if pop == nil || len(pop.Readers) == 0 || len(pop.Authors) < 2 {
		return nil, errors.New("bench: empty population")
	}
	if tokens == nil {
		return nil, errors.New("bench: nil token source")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if deps.Log == nil {
		deps.Log = io.Discard
	}
	c := deps.HTTP
	if c == nil {
		c = &http.Client{Timeout: cfg.RequestTimeout, Transport: &http.Transport{
			MaxIdleConns: 4 * cfg.Clients, MaxIdleConnsPerHost: 4 * cfg.Clients,
			IdleConnTimeout: time.Minute, DisableCompression: true,
		}}
	}
	r := &Runner{cfg: cfg, pop: pop, tokens: tokens, deps: deps, client: c}
	if deps.HTTP == nil {
		lc, err := newLeanClient(cfg.BaseURL, cfg.RequestTimeout, 4*cfg.Clients)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		lc.plain = cfg.PlainSockets
		r.lean = lc
	}
	return r, nil
}

// recorder collects the samples of the mixed phase.
type recorder struct {
	mu                                                sync.Mutex
	reads, posts, shares, follows, unfollows, visible []sample // shares: reposts and likes (their 204s)
	readsAtSocket                                     []sample // reads timed to their response's arrival at the socket
	errs                                              map[string]int64
	lateStarts                                        int64
	probeReads                                        atomic.Int64 // feed pages the probes read
}

func (r *recorder) add(dst *[]sample, s sample) {
	r.mu.Lock()
	*dst = append(*dst, s)
	r.mu.Unlock()
}

func (r *recorder) fail(kind string) {
	r.mu.Lock()
	r.errs[kind]++
	r.mu.Unlock()
}

// errKind names an error for the "errors by type" table.
func errKind(op string, status int, err error) string {
	if err == nil {
		return op + ": HTTP " + strconv.Itoa(status)
	}
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return op + ": timeout"
	case strings.Contains(err.Error(), "connection refused"):
		return op + ": connection refused"
	case strings.Contains(err.Error(), "connection reset"), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return op + ": connection reset"
	}
	return op + ": " + err.Error()
}

// do sends one request and reads the whole body: with the lean client
// (httpc.go), or with Deps.HTTP when one is given.
func (r *Runner) do(ctx context.Context, method, path string, user int64, body string) (int, []byte, error) {
	if r.lean != nil {
		return r.lean.do(ctx, method, path, r.auth(user), body)
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.cfg.BaseURL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if a := r.auth(user); a != "" {
		req.Header.Set("Authorization", a)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// auth is the Authorization header of user's requests ("" for user 0:
// none).
func (r *Runner) auth(user int64) string {
	if user <= 0 {
		return ""
	}
	return "Bearer " + r.tokens(user)
}

// readFeed reads user's first page; ok is a 200.
func (r *Runner) readFeed(ctx context.Context, user int64) (int, []byte, error) {
	return r.do(ctx, http.MethodGet, "/api/feed?limit=20", user, "")
}

// readFeedAt is readFeed that also returns when the response reached the
// client's socket (leanClient.doAt): the zero Time without the lean
// client's raw sockets or where the kernel stamped nothing.
func (r *Runner) readFeedAt(ctx context.Context, user int64) (int, time.Time, error) {
	if r.lean == nil {
		st, _, err := r.readFeed(ctx, user)
		return st, time.Time{}, err
	}
	st, _, at, err := r.lean.doAt(ctx, http.MethodGet, "/api/feed?limit=20", r.auth(user), "")
	return st, at, err
}

// Activate gives every user a user_activity row of now and returns how
// many rows it wrote. Rows stamped within the hour are left as they are:
// each rewrite leaves a dead row version (last_seen_at is indexed, so no
// HOT update), and where autovacuum is off, runs back to back would pile
// them up under the inbox projector's follower-list join.
func Activate(ctx context.Context, db Querier) (int64, error) {
	tag, err := db.Exec(ctx, `INSERT INTO user_activity (user_id, last_seen_at) SELECT id, now() FROM users
		ON CONFLICT (user_id) DO UPDATE SET last_seen_at = excluded.last_seen_at
		WHERE user_activity.last_seen_at < excluded.last_seen_at - interval '1 hour'`)
	if err != nil {
		return 0, fmt.Errorf("activate users: %w", err)
	}
	return tag.RowsAffected(), nil
}

// churnedTables are the tables a run changes: follows and unfollows
// (follows, users' counts), posts, and activity.
var churnedTables = []string{"follows", "users", "posts", "user_activity"}

// VacuumIfOff runs VACUUM (ANALYZE) on the tables a run changes when the
// server's autovacuum is off, and returns the tables vacuumed (none when
// it is on). Each change clears its heap page's all-visible bit, and the
// inbox projector's follower-list load is an index-only scan of follows
// that fetches the heap for every follower on such a page: where nothing
// vacuums, runs back to back (thousands of follows and unfollows in a
// 180 s full mix) turn most of it into heap fetches, and PostgreSQL's
// share of a run then depends on the runs before it.
func VacuumIfOff(ctx context.Context, db Querier) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT current_setting('autovacuum')`)
	if err != nil {
		return nil, fmt.Errorf("read autovacuum: %w", err)
	}
	on, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read autovacuum: %w", err)
	}
	if on == "on" {
		return nil, nil
	}
	for _, t := range churnedTables {
		if _, err := db.Exec(ctx, "VACUUM (ANALYZE) "+t); err != nil {
			return nil, fmt.Errorf("vacuum %s: %w", t, err)
		}
	}
	return churnedTables, nil
}

// Run activates and warms up, runs the baselines, the mixed phase and the
// baselines again, and returns the report.
func (r *Runner) Run(ctx context.Context) (*Report, error) {
	if r.lean != nil {
		defer r.lean.closeIdle()
	}
	rep := &Report{Config: r.cfg, StartedAt: time.Now().UTC(), LoadBefore: loadAvg(),
		Users: len(r.pop.Authors), Follows: r.pop.Follows, Readers: len(r.pop.Readers), Churners: len(r.pop.Churners)}
	if r.cfg.Activate && r.deps.DB != nil {
		t := time.Now()
		n, err := Activate(ctx, r.deps.DB)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(r.deps.Log, "bench: marked %d users active in %s (%d already were, seen within the hour)\n",
			n, time.Since(t).Round(time.Millisecond), int64(len(r.pop.Authors))-n)
	}
	if r.cfg.Vacuum && r.deps.DB != nil {
		t := time.Now()
		tables, err := VacuumIfOff(ctx, r.deps.DB)
		if err != nil {
			return nil, err
		}
		if len(tables) > 0 {
			fmt.Fprintf(r.deps.Log, "bench: autovacuum is off: vacuumed %s in %s\n", strings.Join(tables, ", "), time.Since(t).Round(time.Millisecond))
		}
	}
	warm, err := r.warmUp(ctx)
	if err != nil {
		return nil, err
	}
	rep.WarmUp = warm
	if r.deps.Redis != nil {
		enc, err := inboxEncoding(ctx, r.deps.Redis, r.deps.Keys, r.deps.inboxes(), r.pop.Readers)
		if err != nil {
			return nil, fmt.Errorf("inbox encodings: %w", err)
		}
		rep.Inboxes = &enc
	}
	if r.baselines() {
		rep.BaselineBefore = r.runBaselines(ctx)
	}
	mixed, err := r.mixed(ctx)
	if err != nil {
		return nil, err
	}
	rep.Mixed = mixed
	if r.baselines() {
		rep.BaselineAfter = r.runBaselines(ctx)
		if mixed.Posts.Count > 0 {
			if rep.RawPush, err = r.runRawPush(ctx); err != nil {
				return nil, err
			}
		}
		if mixed.Reads.Count > 0 {
			rate := float64(mixed.Reads.Count) / mixed.Seconds
			if rep.RawHTTP, err = r.runRawHTTP(ctx, rate); err != nil {
				return nil, err
			}
			rep.RawHTTP.compare(mixed)
		}
	}
	rep.LoadAfter = loadAvg()
	rep.FinishedAt = time.Now().UTC()
	return rep, nil
}

func (r *Runner) baselines() bool {
	return r.deps.DB != nil && r.deps.Redis != nil && r.cfg.BaselineDuration > 0
}

// warmUp reads every reader's feed once (which builds a cold inbox and
// marks the reader active), Clients at a time.
func (r *Runner) warmUp(ctx context.Context) (Summary, error) {
	fmt.Fprintf(r.deps.Log, "bench: warming %d readers (one feed read each)\n", len(r.pop.Readers))
	start := time.Now()
	var (
		mu   sync.Mutex
		ms   []float64
		next atomic.Int64
		bad  atomic.Int64
		wg   sync.WaitGroup
	)
	for range r.cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(r.pop.Readers) || ctx.Err() != nil {
					return
				}
				t := time.Now()
				st, _, err := r.readFeed(ctx, r.pop.Readers[i])
				// A warm-up read the API shed (429: more reads in flight
				// than it takes at once) is sent again, as a client honouring
				// Retry-After would, after a short pause.
				for try := 0; err == nil && st == http.StatusTooManyRequests && try < 20 && ctx.Err() == nil; try++ {
					time.Sleep(50 * time.Millisecond)
					st, _, err = r.readFeed(ctx, r.pop.Readers[i])
				}
				if err != nil || st != http.StatusOK {
					bad.Add(1)
					continue
				}
				mu.Lock()
				ms = append(ms, msOf(time.Since(t)))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Summary{}, err
	}
	if n := bad.Load(); n > int64(len(r.pop.Readers))/10 {
		return Summary{}, fmt.Errorf("warm-up: %d of %d feed reads failed (is the API at %s up?)", n, len(r.pop.Readers), r.cfg.BaseURL)
	}
	s := Summarize(ms, time.Since(start))
	fmt.Fprintf(r.deps.Log, "bench: warm-up done in %s (p50 %.1f ms, p99 %.1f ms)\n", time.Since(start).Round(time.Millisecond), s.P50, s.P99)
	return s, nil
}

// opKind is one operation of the mix.
type opKind int

const (
	opRead opKind = iota
	opPost
	opFollow
	opUnfollow
)

// shareKind is what a post operation does: a plain post, or a repost,
// reply or like of a recent post (Config.RepostShare and the others).
type shareKind int

const (
	sharePost shareKind = iota
	shareRepost
	shareReply
	shareLike
)

func (r *Runner) pickShare(rng *rand.Rand) shareKind {
	f := rng.Float64()
	for _, s := range []struct {
		k     shareKind
		share float64
	}{{shareRepost, r.cfg.RepostShare}, {shareReply, r.cfg.ReplyShare}, {shareLike, r.cfg.LikeShare}} {
		if f < max(s.share, 0) {
			return s.k
		}
		f -= max(s.share, 0)
	}
	return sharePost
}

// postID is the id of a 201's post.
func postID(body []byte) (int64, bool) {
	var p feedItem
	if json.Unmarshal(body, &p) != nil {
		return 0, false
	}
	id, err := strconv.ParseInt(p.ID, 10, 64)
	return id, err == nil
}

// recentPosts are the ids of the run's last posts, the targets of its
// reposts, replies and likes.
type recentPosts struct {
	mu  sync.Mutex
	ids [1024]int64
	n   int
}

func (p *recentPosts) add(id int64) {
	p.mu.Lock()
	p.ids[p.n%len(p.ids)] = id
	p.n++
	p.mu.Unlock()
}

// pick returns one of them (0: none yet).
func (p *recentPosts) pick(rng *rand.Rand) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		return 0
	}
	return p.ids[rng.IntN(min(p.n, len(p.ids)))]
}

func (r *Runner) pick(rng *rand.Rand) opKind {
	if rr := r.cfg.readRatio(); rng.Float64() < rr/(rr+1) {
		return opRead
	}
	w, ps := rng.Float64(), r.cfg.postShare()
	switch {
	case w < ps:
		return opPost
	case w < ps+(1-ps)/2:
		return opFollow
	}
	return opUnfollow
}

// procs keeps the process's own GOMAXPROCS (prev) while mixed phases
// that limit it run (held of them).
var procs struct {
	sync.Mutex
	held, prev int
}

// limitProcs sets GOMAXPROCS to n and returns the function that gives
// the process back its own once every mixed phase that limits it is done
// (runs in one process, as the tests', may overlap).
func limitProcs(n int) (restore func()) {
	procs.Lock()
	defer procs.Unlock()
	if p := runtime.GOMAXPROCS(n); procs.held == 0 {
		procs.prev = p
	}
	procs.held++
	return func() {
		procs.Lock()
		defer procs.Unlock()
		if procs.held--; procs.held == 0 {
			runtime.GOMAXPROCS(procs.prev)
		}
	}
}

// mixed runs the mixed phase and returns its measurements.
func (r *Runner) mixed(ctx context.Context) (*Mixed, error) {
	rec := &recorder{errs: map[string]int64{}}
	mode := fmt.Sprintf("open loop at %.0f ops/s, %d workers", r.cfg.Rate, r.cfg.Clients)
	if r.cfg.ClosedLoop {
		mode = fmt.Sprintf("closed loop, %d clients", r.cfg.Clients)
	}
	if r.cfg.Procs > 0 {
		mode += fmt.Sprintf(", GOMAXPROCS %d", r.cfg.Procs)
	}
	fmt.Fprintf(r.deps.Log, "bench: mixed phase %s, %s, %g reads per write\n", r.cfg.Duration, mode, r.cfg.readRatio())
	if n := r.cfg.Procs; n > 0 {
		defer limitProcs(n)()
	}
	var streams *liveStreams
	streamsCtx, stopStreams := context.WithCancel(ctx)
	defer stopStreams()
	if r.cfg.Streams > 0 {
		streams = r.newLiveStreams()
		streams.open(streamsCtx)
		// Each stream the server opened reads once more shortly after
		// (the API's StreamStartRead, 2 s by default): those reads, all at
		// once, are the open's cost, not the mix's.
		fmt.Fprintf(r.deps.Log, "bench: %s for the streams' start reads\n", streamSettle)
		select {
		case <-time.After(streamSettle):
		case <-ctx.Done():
		}
	}
	start := time.Now()
	end := start.Add(r.cfg.Duration)
	var probes sync.WaitGroup
	var nextProbe atomic.Int64 // unix nanos of the next allowed probe
	probeEvery := time.Duration(0)
	if r.cfg.VisibleRate > 0 {
		probeEvery = time.Duration(float64(time.Second) / r.cfg.VisibleRate)
	}

	// The sampler runs through the phase and until the probes finish.
	sctx, stopSampler := context.WithCancel(ctx)
	var timeline []TimePoint
	sdone := make(chan struct{})
	go func() {
		defer close(sdone)
		timeline = r.sample(sctx, start)
	}()

	var idx atomic.Int64
	var recent recentPosts
	work := func(rng *rand.Rand) {
		op := r.pick(rng)
		switch op {
		case opRead:
			u := r.pop.Readers[rng.IntN(len(r.pop.Readers))]
			t := time.Now()
			st, arrived, err := r.readFeedAt(ctx, u)
			if err != nil || st != http.StatusOK {
				rec.fail(errKind("read", st, err))
				return
			}
			done := time.Now()
			rec.add(&rec.reads, sample{at: t.Sub(start), ms: msOf(done.Sub(t))})
			if !arrived.IsZero() && !arrived.Before(t) && !arrived.After(done) {
				rec.add(&rec.readsAtSocket, sample{at: t.Sub(start), ms: msOf(arrived.Sub(t))})
			}
		case opPost:
			a := r.pop.Authors[rng.IntN(len(r.pop.Authors))]
			n := idx.Add(1)
			content := `{"content":"bench post ` + strconv.FormatInt(n, 10) + ` from the mixed workload"`
			share, target := r.pickShare(rng), int64(0)
			if share != sharePost {
				if target = recent.pick(rng); target == 0 {
					share = sharePost
				}
			}
			t := time.Now()
			switch share {
			case shareRepost, shareLike:
				path, what := "/api/posts/"+strconv.FormatInt(target, 10)+"/repost", "repost"
				if share == shareLike {
					path, what = "/api/posts/"+strconv.FormatInt(target, 10)+"/like", "like"
				}
				st, _, err := r.do(ctx, http.MethodPut, path, a, "")
				if err != nil || st != http.StatusNoContent {
					rec.fail(errKind(what, st, err))
					return
				}
				rec.add(&rec.shares, sample{at: t.Sub(start), ms: msOf(time.Since(t))})
				return
			case shareReply:
				content += `,"replyTo":"` + strconv.FormatInt(target, 10) + `"`
			}
			st, body, err := r.do(ctx, http.MethodPost, "/api/posts", a, content+"}")
			if err != nil || st != http.StatusCreated {
				rec.fail(errKind("post", st, err))
				return
			}
			t201 := time.Now()
			rec.add(&rec.posts, sample{at: t.Sub(start), ms: msOf(t201.Sub(t))})
			if id, ok := postID(body); ok {
				recent.add(id)
			}
			// A reply shows only to followers who follow its parent's
			// author too (the home feed's reply rule): only plain posts
			// are probed, and expected on streams.
			celeb := r.pop.Followers[a] >= r.cfg.CelebrityThreshold
			var post feedItem
			var onStream []int64
			if streams != nil && share == sharePost {
				onStream = streams.follows[a]
			}
			if len(onStream) > 0 {
				if err := json.Unmarshal(body, &post); err != nil || post.ID == "" {
					rec.fail("post: 201 without an id and createdAt")
					return
				}
				streams.m.expect(post.ID, t201, t.Sub(start), celeb, onStream)
			}
			if probeEvery == 0 || share == shareReply || celeb || len(r.pop.Watchers[a]) == 0 {
				return
			}
			for {
				np := nextProbe.Load()
				if t201.UnixNano() < np {
					return // probes are rate-limited to VisibleRate
				}
				if nextProbe.CompareAndSwap(np, t201.UnixNano()+int64(probeEvery)) {
					break
				}
			}
			if err := json.Unmarshal(body, &post); err != nil || post.ID == "" || post.CreatedAt == "" {
				rec.fail("post: 201 without an id and createdAt")
				return
			}
			// With streams, a probe polls a follower who holds one when
			// there is such a follower: the same (post, follower) is then
			// timed both ways (Streams.Paired).
			w := r.pop.Watchers[a][rng.IntN(len(r.pop.Watchers[a]))]
			var onVisible func(ms float64)
			if len(onStream) > 0 {
				w = onStream[rng.IntN(len(onStream))]
				onVisible = func(ms float64) { streams.m.polled(post.ID, w, ms) }
			}
			probes.Add(1)
			go func() {
				defer probes.Done()
				r.probe(ctx, rec, start, t201, w, post, onVisible)
			}()
		case opFollow, opUnfollow:
			r.churn(ctx, rec, rng, start, op)
		}
	}

	sutBefore := r.sutCPU(ctx)
	cpu := startCPUMeter("/proc")
	var wg sync.WaitGroup
	if r.cfg.ClosedLoop {
		for i := range r.cfg.Clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(i)+100))
				for time.Now().Before(end) && ctx.Err() == nil {
					work(rng)
				}
			}()
		}
	} else {
		ch := make(chan time.Time, r.cfg.Clients)
		for i := range r.cfg.Clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(i)+100))
				for due := range ch {
					if time.Since(due) > 10*time.Millisecond {
						rec.mu.Lock()
						rec.lateStarts++
						rec.mu.Unlock()
					}
					work(rng)
				}
			}()
		}
		interval := time.Duration(float64(time.Second) / r.cfg.Rate)
	dispatch:
		for i := int64(0); ; i++ {
			due := start.Add(time.Duration(i) * interval)
			if !due.Before(end) {
				break
			}
			if d := time.Until(due); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					break dispatch
				}
			}
			select {
			case ch <- due:
			default:
				rec.fail("client: saturated (operation not sent: every worker busy)")
			}
		}
		close(ch)
	}
	wg.Wait()
	elapsed := time.Since(start)
	used, cpuErr := cpu.end()
	sutAfter := r.sutCPU(ctx)
	if cpuErr != nil {
		fmt.Fprintf(r.deps.Log, "bench: no CPU by process (%v)\n", cpuErr)
	}
	fmt.Fprintf(r.deps.Log, "bench: mixed phase done; waiting for %s of visibility probes at most\n", r.cfg.VisibleTimeout)
	probes.Wait()
	if streams != nil {
		streams.m.wait(ctx, r.cfg.VisibleTimeout)
		stopStreams()
		streams.wg.Wait()
	}
	stopSampler()
	<-sdone
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m := r.summarizeMixed(rec, elapsed, timeline)
	m.CPU = used
	if streams != nil {
		m.Streams = streams.summary(elapsed)
		_, s50, _ := perSecond(streams.m.samples, len(m.PerSecond))
		for i := range m.PerSecond {
			m.PerSecond[i].StreamP50 = s50[i]
		}
	}
	m.ServerReads = sutAfter.reads.since(sutBefore.reads).summary()
	m.ServerSched = sutAfter.sched.since(sutBefore.sched).schedSummary()
	if sutBefore.entries >= 0 && sutAfter.entries >= 0 {
		m.Delivered = int64(sutAfter.entries - sutBefore.entries)
		m.SystemCPU = sutAfter.since(sutBefore)
		m.CPUPerEntry = m.SystemCPU.perEntry(m.Delivered)
	}
	m.IOCalls = sutAfter.ioSince(sutBefore, m.requests(), m.Delivered)
	m.FollowerLists = sutAfter.lists.since(sutBefore.lists)
	m.Retries = sutAfter.retries.since(sutBefore.retries)
	return m, nil
}

// churn follows or unfollows for a random churner.
func (r *Runner) churn(ctx context.Context, rec *recorder, rng *rand.Rand, start time.Time, op opKind) {
	c := r.pop.Churners[rng.IntN(len(r.pop.Churners))]
	r.churnMu.Lock()
	fl := r.pop.Following[c]
	var target int64
	if op == opUnfollow && len(fl) > 0 {
		i := rng.IntN(len(fl))
		target = fl[i]
		fl[i] = fl[len(fl)-1]
		r.pop.Following[c] = fl[:len(fl)-1]
	} else {
		op = opFollow
		target = followTarget(rng, r.pop.Authors, c, fl)
		r.pop.Following[c] = append(fl, target)
	}
	r.churnMu.Unlock()
	method, name, dst := http.MethodPut, "follow", &rec.follows
	if op == opUnfollow {
		method, name, dst = http.MethodDelete, "unfollow", &rec.unfollows
	}
	t := time.Now()
	st, _, err := r.do(ctx, method, "/api/following/"+strconv.FormatInt(target, 10), c, "")
	if err != nil || st != http.StatusNoContent {
		rec.fail(errKind(name, st, err))
		return
	}
	rec.add(dst, sample{at: t.Sub(start), ms: msOf(time.Since(t))})
}

// followTarget picks an author for c to follow: not c, and not one c
// follows already (fl) while others are left, so that a follow changes
// the graph as an unfollow does. Every run draws the same sequence (the
// seed is fixed), so a pick among all authors would mostly repeat the
// follows of the runs before, which changed nothing, while the unfollows
// kept removing: the graph shrank run after run, and with it the authors
// near the celebrity threshold.
func followTarget(rng *rand.Rand, authors []int64, c int64, fl []int64) int64 {
	for range 64 {
		t := authors[rng.IntN(len(authors))]
		if t != c && !slices.Contains(fl, t) {
			return t
		}
	}
	for _, t := range authors { // (c follows nearly everyone)
		if t != c && !slices.Contains(fl, t) {
			return t
		}
	}
	for { // (c follows everyone: a repeated follow, which changes nothing)
		if t := authors[rng.IntN(len(authors))]; t != c {
			return t
		}
	}
}

// probe polls watcher's feed until the post shows up. The latency is from
// t201 (the moment the bench received the post's 201, i.e. after its
// commit) to the receipt of the page that contains the post: an upper
// bound, by at most one poll interval plus one poll, of the moment the
// post became visible. The interval is PollInterval, or pollPrecision of
// the time waited so far when that is longer (see pollWait), so a probe
// of a post that takes seconds does not poll a hundred times a second:
// otherwise a slow pipeline makes probes pile up and their reads become
// most of the load being measured. A poll reads pages of probePage from
// the top, following nextCursor while every entry is still newer than the
// post, so a post that newer posts pushed off the first page is still
// found.
//
// onVisible, when not nil, is called with the latency once the post is
// seen.
func (r *Runner) probe(ctx context.Context, rec *recorder, start, t201 time.Time, watcher int64, post feedItem, onVisible func(ms float64)) {
	deadline := t201.Add(r.cfg.VisibleTimeout)
	for {
		found, err := r.inFeed(ctx, rec, watcher, post)
		now := time.Now()
		if found {
			rec.add(&rec.visible, sample{at: t201.Sub(start), ms: msOf(now.Sub(t201))})
			if onVisible != nil {
				onVisible(msOf(now.Sub(t201)))
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			rec.fail("visible: " + err.Error())
			return
		}
		if now.After(deadline) {
			rec.fail("visible: not in the follower's feed within " + r.cfg.VisibleTimeout.String())
			return
		}
		time.Sleep(pollWait(r.cfg.PollInterval, now.Sub(t201)))
	}
}

// pollPrecision bounds a probe's overestimate, past its first
// PollInterval/pollPrecision of waiting, to this fraction of the latency.
const pollPrecision = 0.05

// pollWait is the time to the next poll of a probe that has waited for
// waited: every base, or pollPrecision of waited when that is longer
// (10 ms up to 200 ms, 50 ms at 1 s, 500 ms at 10 s).
func pollWait(base, waited time.Duration) time.Duration {
	return max(base, time.Duration(float64(waited)*pollPrecision))
}

// feedItem is the part of a post the probe looks at.
type feedItem struct {
	ID        string `json:"id"`
	CreatedAt string `json:"createdAt"`
}

// newer orders feed entries like the feed (events.FeedKey).
func (a feedItem) newer(b feedItem) bool { return a.key().Newer(b.key()) }

// key is the entry's position in the feed; an entry whose createdAt or id
// does not parse sorts below every real post.
func (a feedItem) key() events.FeedKey {
	at, err := time.Parse(events.CreatedAtLayout, a.CreatedAt)
	if err != nil {
		return events.FeedKey{Ms: math.MinInt64}
	}
	id, _ := strconv.ParseInt(a.ID, 10, 64)
	return events.KeyOf(at, id)
}

// Probe pages. A probed post is almost always among a follower's newest
// few entries (a follower of ~300 authors gets about one new post a second
// at 200 posts/s), so small pages keep the probes' share of the server's
// work small (each entry is hydrated and encoded); the cursor reaches the
// deeper ones, down to probePage*probePages entries (the inbox bound).
const (
	probePage  = 10
	probePages = 50
)

// inFeed pages through watcher's feed from the top while entries are newer
// than post, and reports whether post is there. Transient HTTP failures
// count as "not yet" (the probe retries); at most probePages pages are
// read.
func (r *Runner) inFeed(ctx context.Context, rec *recorder, watcher int64, post feedItem) (bool, error) {
	cursor := ""
	for range probePages {
		path := "/api/feed?limit=" + strconv.Itoa(probePage)
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		st, body, err := r.do(ctx, http.MethodGet, path, watcher, "")
		rec.probeReads.Add(1)
		if err != nil || st != http.StatusOK {
			return false, nil
		}
		var page struct {
			Items      []feedItem `json:"items"`
			NextCursor *string    `json:"nextCursor"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return false, fmt.Errorf("decode feed page: %w", err)
		}
		for _, it := range page.Items {
			if it.ID == post.ID {
				return true, nil
			}
			if !it.newer(post) {
				return false, nil // past where the post would be
			}
		}
		if page.NextCursor == nil {
			return false, nil
		}
		cursor = *page.NextCursor
	}
	return false, nil
}

// sample reads lags, fan-out entries, the CDC reader's own lag and the load
// average every SampleEvery until ctx ends.
func (r *Runner) sample(ctx context.Context, start time.Time) []TimePoint {
	var out []TimePoint
	tick := time.NewTicker(r.cfg.SampleEvery)
	defer tick.Stop()
	prev, prevAt := r.scrapeMetrics(ctx), time.Now()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
		p := TimePoint{T: time.Since(start).Seconds(), Load1: loadAvg()[0]}
		if r.deps.Sampler != nil {
			sctx, cancel := context.WithTimeout(ctx, r.cfg.SampleEvery*3)
			ls, err := r.deps.Sampler(sctx)
			cancel()
			if err == nil {
				p.Lag = &ls
			}
		}
		cur, now := r.scrapeMetrics(ctx), time.Now()
		if ctx.Err() != nil {
			// The run ended while this sample was read: its reads were cut
			// short, so it would show lags and metrics as missing.
			return out
		}
		if cur.entries >= 0 && prev.entries >= 0 {
			p.FanoutPerSec = (cur.entries - prev.entries) / now.Sub(prevAt).Seconds()
		}
		if cur.cdcLag >= 0 {
			v := cur.cdcLag
			p.CDCLagLive = &v
		}
		prev, prevAt = cur, now
		out = append(out, p)
	}
}

// scraped is what the benchmark reads from the API's /metrics; -1 where a
// metric is absent (or /metrics is unreachable).
type scraped struct {
	entries float64     // feed_projection_entries_written_total of the inbox projector
	cdcLag  float64     // feed_cdc_lag_seconds: present when CDC runs in the API's process (feed dev)
	cpu     float64     // process_cpu_seconds_total of the API's process
	reads   *serverHist // the API's latency histogram of feed reads; nil when absent
	sched   *serverHist // the API's Go scheduling latency histogram; nil when absent
	io      ioCount     // feed_process_io_syscalls_total of the API's process
	lists   listCount   // feed_projection_follower_lists_total by source; nil when absent
	retries retryCount  // feed_projection_retries_total by projector; nil when absent
}

// scrapeMetrics reads the API's /metrics on its admin listener (feed dev
// serves every role's metrics there).
func (r *Runner) scrapeMetrics(parent context.Context) scraped {
	ctx, cancel := context.WithTimeout(parent, 2*time.Second)
	defer cancel()
	none := scraped{entries: -1, cdcLag: -1, cpu: -1, io: noIO}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cmp.Or(r.cfg.MetricsURL, r.cfg.BaseURL)+"/metrics", nil)
	if err != nil {
		return none
	}
	resp, err := r.client.Do(req)
	if err != nil {
		if parent.Err() == nil { // (a sampler stopped mid-scrape is no news)
			fmt.Fprintf(r.deps.Log, "bench: reading %s/metrics: %v\n", cmp.Or(r.cfg.MetricsURL, r.cfg.BaseURL), err)
		}
		return none
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(r.deps.Log, "bench: reading %s/metrics: %s\n", cmp.Or(r.cfg.MetricsURL, r.cfg.BaseURL), resp.Status)
		return none
	}
	out := parseMetrics(resp.Body)
	if out.entries < 0 {
		fmt.Fprintf(r.deps.Log, "bench: %s/metrics has no feed_projection_entries_written_total{projector=\"inbox\"}: no CPU per delivered entry\n", cmp.Or(r.cfg.MetricsURL, r.cfg.BaseURL))
	}
	return out
}

// parseMetrics reads, from Prometheus text, the sum of
// feed_projection_entries_written_total for the inbox projector and the
// CDC reader's feed_cdc_lag_seconds gauge (the age of the oldest committed
// transaction Kafka has not yet acknowledged, updated every second). What
// the text holds before a syntax error still counts.
func parseMetrics(rd io.Reader) scraped {
	out := scraped{entries: -1, cdcLag: -1, cpu: -1, io: noIO}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, _ := parser.TextToMetricFamilies(rd)
	if mf, ok := families["feed_projection_entries_written_total"]; ok {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "projector" && l.GetValue() == "inbox" {
					out.entries = max(out.entries, 0) + sampleValue(m)
				}
			}
		}
	}
	if mf, ok := families["process_cpu_seconds_total"]; ok && len(mf.GetMetric()) > 0 {
		out.cpu = sampleValue(mf.GetMetric()[0])
	}
	if mf, ok := families["feed_cdc_lag_seconds"]; ok && len(mf.GetMetric()) > 0 {
		out.cdcLag = sampleValue(mf.GetMetric()[len(mf.GetMetric())-1])
	}
	out.reads = feedReadHist(families)
	out.sched = schedHist(families)
	out.io = ioCountOf(families)
	out.lists = listCountOf(families)
	out.retries = retryCountOf(families)
	return out
}

// sampleValue is a counter's, gauge's or untyped metric's value.
func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	default:
		return m.GetUntyped().GetValue()
	}
}

// loadAvg reads the 1, 5 and 15 minute load averages (zeros when
// /proc/loadavg is unreadable).
func loadAvg() [3]float64 {
	pfs, err := procfs.NewDefaultFS()
	if err != nil {
		return [3]float64{}
	}
	l, err := pfs.LoadAvg()
	if err != nil {
		return [3]float64{}
	}
	return [3]float64{l.Load1, l.Load5, l.Load15}
}
