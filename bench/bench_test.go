package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/procfs"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/procio"
	"github.com/feedco/feed/internal/schedlat"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/seed"
	"github.com/feedco/feed/testkit/testenv"
)

// TestPollWait: a probe polls every base interval until the 5% rule is
// longer, so its overestimate stays within one interval of 5% of the
// latency and a slow post costs tens of polls, not thousands.
func TestPollWait(t *testing.T) {
	base := 10 * time.Millisecond
	for _, c := range []struct{ waited, want time.Duration }{
		{0, base}, {150 * time.Millisecond, base}, {200 * time.Millisecond, base},
		{time.Second, 50 * time.Millisecond}, {10 * time.Second, 500 * time.Millisecond},
	} {
		if got := pollWait(base, c.waited); got != c.want {
			t.Errorf("pollWait(%v, %v) = %v, want %v", base, c.waited, got, c.want)
		}
	}
	// Polls of a probe that waits the whole 30 s timeout.
	polls := 0
	for w := time.Duration(0); w < 30*time.Second; w += pollWait(base, w) {
		polls++
	}
	if polls > 200 {
		t.Errorf("a 30 s probe polls %d times, want under 200 (3,000 at a fixed 10 ms)", polls)
	}
}

// TestPercentile: nearest rank on known data.
func TestPercentile(t *testing.T) {
	t.Parallel()
	v := make([]float64, 1000)
	for i := range v {
		v[i] = float64(i + 1)
	}
	rand.Shuffle(len(v), func(i, j int) { v[i], v[j] = v[j], v[i] })
	s := Summarize(v, 2*time.Second)
	want := Summary{Count: 1000, Rate: 500, Mean: 500.5, P50: 500, P90: 900, P99: 990, P999: 999, Max: 1000}
	if s != want {
		t.Errorf("Summarize(1..1000) = %+v, want %+v", s, want)
	}
	for _, c := range []struct {
		data []float64
		q    float64
		want float64
	}{
		{nil, 0.5, 0},
		{[]float64{7}, 0.99, 7},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.5, 5},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.99, 10},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.1, 1},
		{[]float64{1, 2, 3, 4}, 0.75, 3},
	} {
		if got := Percentile(c.data, c.q); got != c.want {
			t.Errorf("Percentile(%v, %g) = %g, want %g", c.data, c.q, got, c.want)
		}
	}
	count, p50, p99 := perSecond([]sample{{0, 1}, {500 * time.Millisecond, 3}, {1500 * time.Millisecond, 9}}, 3)
	if !slices.Equal(count, []int{2, 1, 0}) || !slices.Equal(p50, []float64{1, 9, 0}) || !slices.Equal(p99, []float64{3, 9, 0}) {
		t.Errorf("perSecond = %v %v %v", count, p50, p99)
	}
}

// fakeAPI is an HTTP server with the API's shapes whose posts become
// visible in feeds exactly delay after the 201 is written.
type fakeAPI struct {
	delay time.Duration
	mu    sync.Mutex
	posts []fakePost
	next  int64
}

type fakePost struct {
	id, createdAt string
	visible       time.Time
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/api/posts":
		f.mu.Lock()
		f.next++
		id := strconv.FormatInt(900000000000+f.next, 10)
		at := time.Now().UTC().Format(events.CreatedAtLayout)
		f.posts = append(f.posts, fakePost{id: id, createdAt: at, visible: time.Now().Add(f.delay)})
		f.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"%s","authorId":"1","content":"x","createdAt":"%s"}`, id, at)
	case r.Method == http.MethodGet && r.URL.Path == "/api/feed":
		now := time.Now()
		var items []string
		f.mu.Lock()
		for i := len(f.posts) - 1; i >= 0; i-- { // newest first
			if p := f.posts[i]; !now.Before(p.visible) {
				items = append(items, `{"id":"`+p.id+`","authorId":"1","createdAt":"`+p.createdAt+`"}`)
			}
		}
		f.mu.Unlock()
		fmt.Fprintf(w, `{"items":[%s],"nextCursor":null}`, strings.Join(items, ","))
	case r.Method == http.MethodPut && (strings.HasSuffix(r.URL.Path, "/repost") || strings.HasSuffix(r.URL.Path, "/like")):
		w.WriteHeader(http.StatusNoContent) // reposts and likes change no feed here
	case r.URL.Path == "/metrics":
		fmt.Fprintln(w, `feed_projection_entries_written_total{projector="inbox"} 42`)
		fmt.Fprintln(w, `feed_cdc_lag_seconds 0.003`)
	default:
		http.NotFound(w, r)
	}
}

// sharesAPI is fakeAPI counting the reposts, likes and replies it is
// sent, and whether each names a post it created.
type sharesAPI struct {
	fakeAPI
	mu                      sync.Mutex
	reposts, likes, replies int
	unknown                 []string
}

func (f *sharesAPI) known(id string) bool {
	f.fakeAPI.mu.Lock()
	defer f.fakeAPI.mu.Unlock()
	return slices.ContainsFunc(f.posts, func(p fakePost) bool { return p.id == id })
}

func (f *sharesAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(r.URL.Path, "/") // "", "api", "posts", id, "repost"
	switch {
	case r.Method == http.MethodPut && len(parts) == 5:
		f.mu.Lock()
		if parts[4] == "repost" {
			f.reposts++
		} else {
			f.likes++
		}
		f.mu.Unlock()
		if !f.known(parts[3]) {
			f.mu.Lock()
			f.unknown = append(f.unknown, parts[3])
			f.mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
		return
	case r.Method == http.MethodPost && r.URL.Path == "/api/posts":
		var body struct {
			ReplyTo string `json:"replyTo"`
		}
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		if json.Unmarshal(b, &body) == nil && body.ReplyTo != "" {
			f.mu.Lock()
			f.replies++
			f.mu.Unlock()
			if !f.known(body.ReplyTo) {
				f.mu.Lock()
				f.unknown = append(f.unknown, body.ReplyTo)
				f.mu.Unlock()
			}
		}
	}
	f.fakeAPI.ServeHTTP(w, r)
}

// TestSharesInTheMix runs a mix of posts, reposts, replies and likes: each
// kind is sent, and each names a post the run created.
func TestSharesInTheMix(t *testing.T) {
	t.Parallel()
	api := &sharesAPI{}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	pop := &Population{Authors: []int64{1, 2, 3}, Followers: map[int64]int64{}, Readers: []int64{10}, Watchers: map[int64][]int64{},
		Churners: []int64{20}, Following: map[int64][]int64{}}
	cfg := Config{BaseURL: srv.URL, Duration: 2 * time.Second, Rate: 60, Clients: 4, ReadRatio: -1, PostShare: 1,
		RepostShare: 0.25, ReplyShare: 0.25, LikeShare: 0.25, BaselineDuration: -1, SampleEvery: 200 * time.Millisecond}
	r, err := New(cfg, pop, func(int64) string { return "token" }, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mixed.ErrorCount != 0 {
		t.Fatalf("errors: %v", rep.Mixed.Errors)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if api.reposts == 0 || api.likes == 0 || api.replies == 0 {
		t.Fatalf("reposts %d, likes %d, replies %d: want each kind", api.reposts, api.likes, api.replies)
	}
	if len(api.unknown) > 0 {
		t.Fatalf("shares of posts the run did not create: %v", api.unknown)
	}
	if got := rep.Mixed.Shares.Count; got != int64(api.reposts+api.likes) {
		t.Fatalf("report counts %d shares, the server saw %d", got, api.reposts+api.likes)
	}
}

// TestPostToVisibleFromThe201 runs the mixed phase against a server that
// makes each post visible 200 ms after its 201, with posts spread over a
// 2 s run: every measurement must be about 200 ms (from the post's own
// 201), not the time since the start of the run (up to 2.2 s). It also
// checks that every dispatched operation is accounted for.
func TestPostToVisibleFromThe201(t *testing.T) {
	t.Parallel()
	const delay = 200 * time.Millisecond
	srv := httptest.NewServer(&fakeAPI{delay: delay})
	t.Cleanup(srv.Close)
	pop := &Population{
		Authors:   []int64{1, 2, 3},
		Followers: map[int64]int64{1: 2, 2: 2, 3: 2},
		Readers:   []int64{10, 11},
		Watchers:  map[int64][]int64{1: {10, 11}, 2: {10, 11}, 3: {10, 11}},
		Churners:  []int64{20},
		Following: map[int64][]int64{},
	}
	cfg := Config{BaseURL: srv.URL, Duration: 2 * time.Second, Rate: 20, Clients: 8, ReadRatio: 0.5, PostShare: 1,
		RepostShare: -1, ReplyShare: -1, LikeShare: -1,
		VisibleRate: 1e9, PollInterval: 5 * time.Millisecond, VisibleTimeout: 5 * time.Second, BaselineDuration: -1, SampleEvery: 200 * time.Millisecond}
	r, err := New(cfg, pop, func(int64) string { return "token" }, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := rep.Mixed
	if m.ErrorCount != 0 {
		t.Fatalf("errors: %v", m.Errors)
	}
	// 2 s at 20/s: exactly 40 operations dispatched, each a read or a post.
	if n := m.Reads.Count + m.Posts.Count; n != 40 {
		t.Errorf("%d reads + posts, want the 40 dispatched", n)
	}
	if m.Posts.Count < 15 || m.PostToVisible.Count != m.Posts.Count {
		t.Fatalf("%d posts, %d probes: want every post probed", m.Posts.Count, m.PostToVisible.Count)
	}
	lastAt := 0.0
	for _, v := range m.Visible {
		lastAt = max(lastAt, v[0])
		// The server starts the delay before its 201 is written; on a
		// loaded machine the client reads that 201 tens of milliseconds
		// later, so a measurement may fall below the delay by as much. A
		// clock started after the post was visible would measure ~0.
		if v[1] < msOf(delay)/2 {
			t.Errorf("post at %.2fs measured visible after %.1f ms, before the server made it visible (%v)", v[0], v[1], delay)
		}
	}
	if lastAt < 1.5 {
		t.Fatalf("posts only in the first %.2f s of the run; the test needs late posts", lastAt)
	}
	// From the start of the run the late posts would measure over 1.7 s;
	// from their 201 they measure the delay plus at most a poll or two.
	if m.PostToVisible.P50 > msOf(delay)+300 {
		t.Errorf("post-to-visible p50 %.1f ms: measured from the start of the run, not from the 201?", m.PostToVisible.P50)
	}
	if m.FanoutPerSec != 0 {
		t.Errorf("fan-out %.1f/s from a constant counter, want 0", m.FanoutPerSec)
	}
	// The CDC reader's lag is scraped with the counter, every sample.
	if len(m.Timeline) < 5 {
		t.Fatalf("%d timeline samples over 2 s at 200 ms, want about 10", len(m.Timeline))
	}
	for _, p := range m.Timeline {
		if p.CDCLagLive == nil || *p.CDCLagLive != 0.003 {
			t.Fatalf("sample at %.2fs: CDC reader's lag %v, want the served 0.003 s", p.T, p.CDCLagLive)
		}
	}
	// The report files are written and readable.
	dir := t.TempDir()
	if err := rep.WriteJSON(filepath.Join(dir, "r.json")); err != nil {
		t.Fatal(err)
	}
	var back Report
	b, _ := os.ReadFile(filepath.Join(dir, "r.json"))
	if err := json.Unmarshal(b, &back); err != nil || back.Mixed.PostToVisible != m.PostToVisible {
		t.Fatalf("JSON round trip: %v", err)
	}
	// The chart, as PNG and SVG: its size, and in the SVG (text as text)
	// the panels' titles and the series' names.
	if err := rep.WriteChart(filepath.Join(dir, "r.png")); err != nil {
		t.Fatal(err)
	}
	pf, err := os.Open(filepath.Join(dir, "r.png"))
	if err != nil {
		t.Fatal(err)
	}
	pngCfg, err := png.DecodeConfig(pf)
	pf.Close()
	if err != nil || pngCfg.Width != 1200 || pngCfg.Height != 940 {
		t.Errorf("chart PNG: %dx%d (%v), want 1200x940", pngCfg.Width, pngCfg.Height, err)
	}
	if err := rep.WriteChart(filepath.Join(dir, "r.svg")); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "r.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "Latency over time", "Latency distribution (CDF)", "feed read p50 / s", "feed read p99 / s",
		"post to visible (each)", "CDC lag (reader)", "feed read (HTTP, mixed)", "Liberation"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("chart SVG lacks %q", want)
		}
	}
	if out := os.Getenv("BENCH_CHART_OUT"); out != "" { // to look at the chart
		if err := rep.WriteChart(out); err != nil {
			t.Fatal(err)
		}
	}
	var sb strings.Builder
	rep.WriteTable(&sb)
	if !strings.Contains(sb.String(), "post-to-visible") {
		t.Errorf("table lacks post-to-visible:\n%s", sb.String())
	}
	if !strings.Contains(sb.String(), "CDC reader's lag (commit to Kafka ack, ") || !strings.Contains(sb.String(), "p50 3.0 ms, max 3.0 ms") {
		t.Errorf("table lacks the CDC reader's lag:\n%s", sb.String())
	}
	if len(back.Mixed.Timeline) == 0 || back.Mixed.Timeline[0].CDCLagLive == nil {
		t.Errorf("JSON lacks the CDC reader's lag")
	}
	// The phase's CPU: this process served and drove it, so its own
	// group used some; the line is on the terminal and in the JSON, with
	// the machine's steal time.
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		if m.CPU == nil || m.CPU.Percent[cpuBench] <= 0 || m.CPU.Seconds < 1.9 {
			t.Errorf("mixed phase CPU %+v, want this process's share over the 2 s phase", m.CPU)
		} else if !strings.Contains(sb.String(), "cpu (% of one core, mixed phase): feed ") || back.Mixed.CPU == nil || back.Mixed.CPU.Total != m.CPU.Total {
			t.Errorf("CPU line or JSON missing:\n%s", sb.String())
		} else if m.CPU.Steal < 0 || !strings.Contains(sb.String(), "; steal ") || back.Mixed.CPU.Steal != m.CPU.Steal {
			// Linux's /proc/stat has had the steal column since 2.6.11.
			t.Errorf("steal %v: want it measured, on the line and in the JSON:\n%s", m.CPU.Steal, sb.String())
		}
	}
}

// TestNewer: the probe's order is the feed's (createdAt, then id).
func TestNewer(t *testing.T) {
	t.Parallel()
	a := feedItem{ID: "915180307647303680", CreatedAt: "2026-11-30T10:00:00.001Z"}
	b := feedItem{ID: "915180307647303681", CreatedAt: "2026-11-30T10:00:00.001Z"}
	c := feedItem{ID: "99", CreatedAt: "2026-11-30T10:00:00.002Z"}
	if !b.newer(a) || a.newer(b) || !c.newer(b) || b.newer(c) || a.newer(a) {
		t.Error("newer disagrees with (createdAt, id) order")
	}
}

// TestParseMetrics reads the inbox projector's counter out of Prometheus
// text, ignoring the other projectors, the CDC reader's lag gauge and the
// process's CPU.
func TestParseMetrics(t *testing.T) {
	t.Parallel()
	text := `# HELP feed_projection_entries_written_total x
# TYPE feed_projection_entries_written_total counter
feed_projection_entries_written_total{projector="inbox"} 1.5e+06
feed_projection_entries_written_total{projector="timelines"} 99
# HELP feed_cdc_lag_seconds Age of the oldest committed transaction not yet fully acknowledged by Kafka (0 when caught up).
feed_cdc_lag_seconds_other 7
feed_cdc_lag_seconds 0.0125
other_metric 3
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 42.5
`
	if got := parseMetrics(strings.NewReader(text)); !reflect.DeepEqual(got, scraped{entries: 1.5e6, cdcLag: 0.0125, cpu: 42.5, io: noIO}) {
		t.Errorf("parseMetrics = %+v, want entries 1.5e6, cdcLag 0.0125, cpu 42.5", got)
	}
	if got := parseMetrics(strings.NewReader("other 1\nfeed_cdc_lag_seconds 0\n")); !reflect.DeepEqual(got, scraped{entries: -1, cdcLag: 0, cpu: -1, io: noIO}) {
		t.Errorf("parseMetrics without the counter = %+v, want entries -1, cdcLag 0 (caught up)", got)
	}
	if got := parseMetrics(strings.NewReader("")); !reflect.DeepEqual(got, scraped{entries: -1, cdcLag: -1, cpu: -1, io: noIO}) {
		t.Errorf("parseMetrics of nothing = %+v, want both absent (-1)", got)
	}
}

// TestLoadPopulation seeds a small graph and checks the population drawn
// from it: readers and churners disjoint, each watcher really follows the
// author it watches, churners' follow lists match the database.
func TestLoadPopulation(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	d, err := seed.Generate(seed.Params{Users: 300, AvgFollows: 20, Posts: 100, Celebrities: 1, Threshold: 100, Days: 1, End: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := seed.Write(ctx, db.Pool, d, seed.WriteConfig{}); err != nil {
		t.Fatal(err)
	}
	p, err := LoadPopulation(ctx, db.Pool, 50, 20, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Authors) != 300 || len(p.Readers) != 50 || len(p.Churners) != 20 || p.Follows != int64(len(d.Edges)) {
		t.Fatalf("population: %d authors, %d readers, %d churners, %d follows", len(p.Authors), len(p.Readers), len(p.Churners), p.Follows)
	}
	for _, c := range p.Churners {
		if _, ok := slices.BinarySearch(p.Readers, c); ok {
			t.Fatalf("user %d is reader and churner", c)
		}
	}
	var pairs int
	for a, ws := range p.Watchers {
		for _, w := range ws {
			var ok bool
			if err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM follows WHERE follower_id = $1 AND followee_id = $2)`, w, a).Scan(&ok); err != nil || !ok {
				t.Fatalf("watcher %d of %d does not follow (%v)", w, a, err)
			}
			pairs++
		}
	}
	var want int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM follows WHERE follower_id = ANY($1)`, p.Readers).Scan(&want); err != nil || pairs != want {
		t.Fatalf("%d watcher pairs, the readers follow %d (%v)", pairs, want, err)
	}
	// The pull SQL baseline runs on this schema.
	rows, err := db.Pool.Query(ctx, PullSQL, p.Readers[0], time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestInFeedPagesDown: a post that newer posts pushed below the first page
// is found by following nextCursor, and the search stops at the first
// entry older than the post (it is not read to the end).
func TestInFeedPagesDown(t *testing.T) {
	t.Parallel()
	var items []feedItem // newest first: ids 300..1, one per millisecond
	for i := 300; i >= 1; i-- {
		items = append(items, feedItem{ID: strconv.Itoa(1000 + i), CreatedAt: fmt.Sprintf("2026-11-30T10:00:00.%03dZ", i)})
	}
	var mu sync.Mutex
	pages := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		pages++
		mu.Unlock()
		from, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		to := min(from+limit, len(items))
		page := map[string]any{"items": items[from:to], "nextCursor": nil}
		if to < len(items) {
			page["nextCursor"] = strconv.Itoa(to)
		}
		_ = json.NewEncoder(w).Encode(page)
	}))
	t.Cleanup(srv.Close)
	r, err := New(Config{BaseURL: srv.URL}, &Population{Authors: []int64{1, 2}, Readers: []int64{1}}, func(int64) string { return "t" }, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Entry 120 from the top (id 1180) is on page 120/probePage + 1.
	rec := &recorder{}
	found, err := r.inFeed(ctx, rec, 1, feedItem{ID: "1180", CreatedAt: "2026-11-30T10:00:00.180Z"})
	if want := 120/probePage + 1; err != nil || !found || pages != want {
		t.Fatalf("found %v after %d pages (%v), want true after %d", found, pages, err, want)
	}
	first := pages
	// A post that is not there, between two entries: stop at the first
	// older entry (id 1230, 70 from the top), not at the end of the feed.
	pages = 0
	found, err = r.inFeed(ctx, rec, 1, feedItem{ID: "999999", CreatedAt: "2026-11-30T10:00:00.230Z"})
	if want := 70/probePage + 1; err != nil || found || pages != want {
		t.Fatalf("found %v after %d pages (%v), want false after %d", found, pages, err, want)
	}
	if n, want := rec.probeReads.Load(), int64(first+pages); n != want {
		t.Errorf("probe reads counted %d, want %d (%d + %d pages)", n, want, first, pages)
	}
}

// An explicit "none" is honoured: ReadRatio or PostShare below 0 gives no
// reads or no posts, where 0 takes the default (20 reads per write, 0.8
// posts).
func TestPickHonoursNone(t *testing.T) {
	count := func(cfg Config) map[opKind]int {
		r := &Runner{cfg: cfg.withDefaults()}
		rng := rand.New(rand.NewPCG(1, 2))
		n := map[opKind]int{}
		for range 20000 {
			n[r.pick(rng)]++
		}
		return n
	}
	if n := count(Config{ReadRatio: -1}); n[opRead] != 0 || n[opPost] < 15000 || n[opFollow] == 0 || n[opUnfollow] == 0 {
		t.Errorf("no reads: %v", n)
	}
	if n := count(Config{ReadRatio: -1, PostShare: -1}); n[opRead] != 0 || n[opPost] != 0 || n[opFollow] < 9000 || n[opUnfollow] < 9000 {
		t.Errorf("follows and unfollows only: %v", n)
	}
	if n := count(Config{}); n[opRead] < 18500 || n[opPost] == 0 {
		t.Errorf("defaults (20 reads per write): %v", n)
	}
	if err := (Config{BaseURL: "http://x", ReadRatio: math.NaN()}).withDefaults().Validate(); err == nil {
		t.Error("NaN read ratio accepted")
	}
}

// TestActivateLeavesRecentRows: activation writes the users without a
// row or with one older than an hour, and leaves rows stamped within the
// hour untouched (same row version), so runs back to back leave no dead
// versions behind.
func TestActivateLeavesRecentRows(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDB(t)
	addUsers(t, db.Pool, 3)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO user_activity (user_id, last_seen_at) VALUES
		(1, now() - interval '10 minutes'), (2, now() - interval '2 hours')`); err != nil {
		t.Fatal(err)
	}
	version := func(id int64) (xmin string, seen time.Time) {
		t.Helper()
		if err := db.Pool.QueryRow(ctx, `SELECT xmin::text, last_seen_at FROM user_activity WHERE user_id = $1`, id).Scan(&xmin, &seen); err != nil {
			t.Fatalf("user %d: %v", id, err)
		}
		return xmin, seen
	}
	x1, s1 := version(1)
	n, err := Activate(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("wrote %d rows, want 2 (user 2 stale, user 3 missing)", n)
	}
	if x, s := version(1); x != x1 || !s.Equal(s1) {
		t.Fatalf("user 1 seen 10 minutes ago was rewritten: xmin %s -> %s, %v -> %v", x1, x, s1, s)
	}
	for _, id := range []int64{2, 3} {
		if _, s := version(id); time.Since(s) > time.Minute {
			t.Fatalf("user %d last seen %v, want now", id, s)
		}
	}
	if n, err := Activate(ctx, db.Pool); err != nil || n != 0 {
		t.Fatalf("second activation wrote %d rows (err %v), want 0", n, err)
	}
}

// TestVacuumIfOff: where autovacuum is off, the tables a run changes are
// vacuumed (the follows' pages all-visible again, so the follower-list
// load is index-only); where it is on, nothing is done.
func TestVacuumIfOff(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDB(t)
	addUsers(t, db.Pool, 400)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO follows (follower_id, followee_id) SELECT a, b FROM generate_series(1, 400) a, generate_series(1, 30) b WHERE a <> b`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `DELETE FROM follows WHERE follower_id % 7 = 0`); err != nil {
		t.Fatal(err)
	}
	var autovacuum string
	if err := db.Pool.QueryRow(ctx, `SHOW autovacuum`).Scan(&autovacuum); err != nil {
		t.Fatal(err)
	}
	tables, err := VacuumIfOff(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if autovacuum == "on" {
		if tables != nil {
			t.Fatalf("autovacuum is on, yet vacuumed %v", tables)
		}
		return
	}
	if !slices.Equal(tables, churnedTables) {
		t.Fatalf("vacuumed %v, want %v", tables, churnedTables)
	}
	// Every page all-visible. Something elsewhere on the server can keep
	// a vacuum from marking a page for a moment (a buffer pinned by the
	// checkpointer or the background writer, which a plain VACUUM skips
	// rather than waits for; a replication slot being created, which holds
	// every database's vacuum horizon back): vacuum again until no page is
	// left, as the next run's vacuum would, for a bounded time.
	var pages, visible int
	for deadline := time.Now().Add(15 * time.Second); ; {
		if err := db.Pool.QueryRow(ctx, `SELECT relpages, relallvisible FROM pg_class WHERE relname = 'follows'`).Scan(&pages, &visible); err != nil {
			t.Fatal(err)
		}
		if pages > 0 && visible == pages || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
		if _, err := VacuumIfOff(ctx, db.Pool); err != nil {
			t.Fatal(err)
		}
	}
	if pages == 0 || visible != pages {
		t.Fatalf("follows after the vacuum: %d of %d pages all-visible", visible, pages)
	}
	// The follower-list load's scan, forced to the index (the table is
	// small enough for the planner to prefer reading it whole).
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET enable_seqscan = off; SET enable_bitmapscan = off`); err != nil {
		t.Fatal(err)
	}
	var plan string
	if err := conn.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) SELECT follower_id FROM follows WHERE followee_id = 3`).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`"Heap Fetches": (\d+)`).FindStringSubmatch(plan)
	if m == nil {
		t.Fatalf("no index-only scan: %s", plan)
	}
	if fetches, _ := strconv.Atoi(m[1]); fetches != 0 {
		t.Fatalf("the follower list fetched %d heap tuples after the vacuum", fetches)
	}
}

// addUsers inserts users 1..n.
func addUsers(t *testing.T, db Querier, n int) {
	t.Helper()
	if _, err := db.Exec(context.Background(), `INSERT INTO users (id, name) SELECT g, 'user' || g FROM generate_series(1, $1::int) g`, n); err != nil {
		t.Fatal(err)
	}
}

// procsAPI serves fakeAPI and records the GOMAXPROCS of the process at
// each feed read.
type procsAPI struct {
	fakeAPI
	mu   sync.Mutex
	seen map[int]int
}

func (p *procsAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/api/feed") {
		p.mu.Lock()
		p.seen[runtime.GOMAXPROCS(0)]++
		p.mu.Unlock()
	}
	p.fakeAPI.ServeHTTP(w, r)
}

// TestMixedPhaseProcs: the mixed phase runs at Procs GOMAXPROCS (default
// 1), and the process has its own back after the run. Not parallel:
// GOMAXPROCS is the process's.
func TestMixedPhaseProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	api := &procsAPI{seen: map[int]int{}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	pop := &Population{
		Authors:   []int64{1, 2},
		Followers: map[int64]int64{1: 1, 2: 1},
		Readers:   []int64{10},
		Watchers:  map[int64][]int64{},
		Churners:  []int64{20},
		Following: map[int64][]int64{},
	}
	cfg := Config{BaseURL: srv.URL, Duration: 500 * time.Millisecond, Rate: 40, Clients: 4, ReadRatio: 1000, PostShare: 1,
		BaselineDuration: -1, SampleEvery: 100 * time.Millisecond}
	r, err := New(cfg, pop, func(int64) string { return "token" }, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if api.seen[1] < 10 {
		t.Errorf("feed reads by GOMAXPROCS: %v; want the mixed phase's (20 at 40/s over 0.5 s) at the default 1", api.seen)
	}
	if n := runtime.GOMAXPROCS(0); n != 3 {
		t.Errorf("GOMAXPROCS %d after the run, want the process's 3 back", n)
	}
}

func TestLimitProcsOverlapping(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	a := limitProcs(1)
	b := limitProcs(1)
	a()
	if n := runtime.GOMAXPROCS(0); n != 1 {
		t.Fatalf("GOMAXPROCS %d while a second phase still runs, want 1", n)
	}
	b()
	if n := runtime.GOMAXPROCS(0); n != 3 {
		t.Fatalf("GOMAXPROCS %d after both phases, want the process's 3", n)
	}
}

// TestServerReads: the API's own histogram of feed reads is read from
// /metrics (the GET /api/feed series only), taken as the difference of two
// scrapes, and summarized as histogram_quantile would.
func TestServerReads(t *testing.T) {
	t.Parallel()
	scrape := func(b1, b10, b25, inf, other int) *serverHist {
		text := fmt.Sprintf(`# TYPE feed_http_request_duration_seconds histogram
feed_http_request_duration_seconds_bucket{method="GET",route="/api/feed",le="0.001"} %d
feed_http_request_duration_seconds_bucket{method="GET",route="/api/feed",le="0.01"} %d
feed_http_request_duration_seconds_bucket{method="GET",route="/api/feed",le="0.025"} %d
feed_http_request_duration_seconds_bucket{method="GET",route="/api/feed",le="+Inf"} %d
feed_http_request_duration_seconds_sum{method="GET",route="/api/feed"} 1
feed_http_request_duration_seconds_count{method="GET",route="/api/feed"} %d
feed_http_request_duration_seconds_bucket{method="POST",route="/api/posts",le="0.001"} 0
feed_http_request_duration_seconds_bucket{method="POST",route="/api/posts",le="0.01"} 0
feed_http_request_duration_seconds_bucket{method="POST",route="/api/posts",le="0.025"} 0
feed_http_request_duration_seconds_bucket{method="POST",route="/api/posts",le="+Inf"} %d
feed_http_request_duration_seconds_sum{method="POST",route="/api/posts"} 1
feed_http_request_duration_seconds_count{method="POST",route="/api/posts"} %d
`, b1, b10, b25, inf, inf, other, other)
		return parseMetrics(strings.NewReader(text)).reads
	}
	before := scrape(100, 100, 100, 100, 7)
	// Then 1,000 reads: 500 within 1 ms, 480 in (1, 10], 10 in (10, 25], 10 over.
	after := scrape(600, 1080, 1090, 1100, 5000)
	sr := after.since(before).summary()
	if sr == nil || sr.Count != 1000 {
		t.Fatalf("summary %+v, want 1000 reads (the POST series left out)", sr)
	}
	// p50: rank 500, the last of the first bucket: 1 ms.
	if math.Abs(sr.P50Ms-1) > 1e-9 {
		t.Errorf("p50 %.4f ms, want 1", sr.P50Ms)
	}
	// p99: rank 990, the 10th of 10 in (10, 25]: 25 ms.
	if math.Abs(sr.P99Ms-25) > 1e-9 {
		t.Errorf("p99 %.4f ms, want 25", sr.P99Ms)
	}
	if math.Abs(sr.Within10ms-0.98) > 1e-9 {
		t.Errorf("within 10 ms %.4f, want 0.98", sr.Within10ms)
	}
	// p99.9 falls in +Inf: the highest finite bound.
	if q := after.since(before).quantile(0.999); q != 0.025 {
		t.Errorf("p99.9 %.4f s, want the highest finite bound 0.025", q)
	}
	// A quantile inside a bucket is linear: rank 740 is the 240th of 480 in (1, 10].
	if q := after.since(before).quantile(0.74); math.Abs(q-0.0055) > 1e-12 {
		t.Errorf("p74 %.6f s, want 0.0055", q)
	}
	if parseMetrics(strings.NewReader("other 1\n")).reads != nil {
		t.Error("a scrape without the histogram has one")
	}
	if got := scrape(0, 0, 0, 0, 0).since(nil); got != nil {
		t.Errorf("since nil = %+v, want nil", got)
	}
}

// TestServerSched reads the API's scheduling latency as the API exports
// it (the schedlat collector through promhttp), then summarizes a known
// difference of two scrapes.
func TestServerSched(t *testing.T) {
	t.Parallel()
	c := schedlat.New()
	if c == nil {
		t.Skip("the runtime has no /sched/latencies:seconds")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	h := parseMetrics(exposition(t, reg)).sched
	if h == nil || len(h.le) != len(schedlat.Buckets)+1 || !math.IsInf(h.le[len(h.le)-1], 1) {
		t.Fatalf("parsed %+v, want the %d buckets of schedlat and +Inf", h, len(schedlat.Buckets))
	}
	if h.total() <= 0 {
		t.Fatalf("no waits sampled in a running test binary: %+v", h)
	}

	scrape := func(b100us, b1ms, b10ms, inf int) *serverHist {
		text := fmt.Sprintf(`# TYPE feed_go_sched_latency_seconds histogram
feed_go_sched_latency_seconds_bucket{le="0.0001"} %d
feed_go_sched_latency_seconds_bucket{le="0.001"} %d
feed_go_sched_latency_seconds_bucket{le="0.01"} %d
feed_go_sched_latency_seconds_bucket{le="+Inf"} %d
feed_go_sched_latency_seconds_sum 1
feed_go_sched_latency_seconds_count %d
`, b100us, b1ms, b10ms, inf, inf)
		return parseMetrics(strings.NewReader(text)).sched
	}
	// Then 10,000 waits: 9,000 within 100 µs, 800 in (0.1, 1] ms, 190 in (1, 10] ms, 10 over.
	ss := scrape(19000, 19800, 19990, 20000).since(scrape(10000, 10000, 10000, 10000)).schedSummary()
	if ss == nil || ss.Samples != 10000 {
		t.Fatalf("summary %+v, want 10000 samples", ss)
	}
	// p50: rank 5,000 of 9,000 in (0, 100 µs].
	if want := 100.0 * 5000 / 9000; math.Abs(ss.P50Us-want) > 1e-9 {
		t.Errorf("p50 %.3f µs, want %.3f", ss.P50Us, want)
	}
	// p99: rank 9,900, the 100th of 190 in (1, 10] ms.
	if want := 1 + 9*100.0/190; math.Abs(ss.P99Ms-want) > 1e-9 {
		t.Errorf("p99 %.4f ms, want %.4f", ss.P99Ms, want)
	}
	// p99.9: rank 9,990, the last in (1, 10] ms.
	if math.Abs(ss.P999Ms-10) > 1e-9 {
		t.Errorf("p99.9 %.4f ms, want 10", ss.P999Ms)
	}
	if math.Abs(ss.Over1ms-0.02) > 1e-9 {
		t.Errorf("over 1 ms %.4f, want 0.02", ss.Over1ms)
	}
	if got := scrape(0, 0, 0, 0).since(scrape(0, 0, 0, 0)).schedSummary(); got != nil {
		t.Errorf("summary of no waits = %+v, want nil", got)
	}
}

// TestIOCalls: the API's read and write calls are read from its /metrics
// (procio's own exposition), and the phase's calls are the difference of
// two snapshots, per request and per entry, with PostgreSQL's backends
// counted from their start when they started in between and left out
// when they ended.
func TestIOCalls(t *testing.T) {
	t.Parallel()
	c := procio.New()
	if c == nil {
		t.Skip("/proc/self/io is not readable here")
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	got := parseMetrics(exposition(t, reg)).io
	if !got.known() || got.read <= 0 || got.write < 0 {
		t.Fatalf("io from the collector's exposition = %+v, want both counters", got)
	}
	text := "# TYPE feed_process_io_syscalls_total counter\n" +
		"feed_process_io_syscalls_total{op=\"read\"} 1000\nfeed_process_io_syscalls_total{op=\"write\"} 400\n"
	if got := parseMetrics(strings.NewReader(text)).io; got != (ioCount{1000, 400}) {
		t.Fatalf("io = %+v, want read 1000, write 400", got)
	}

	before := sutSnapshot{feedIO: ioCount{1000, 400}, redisIO: ioCount{50, 60},
		pgIO: map[int]ioCount{1: {10, 10}, 2: {5, 5}}, pgSwitches: map[int]float64{1: 100, 2: 50, 4: 900}}
	after := sutSnapshot{feedIO: ioCount{4000, 1400}, redisIO: ioCount{2050, 2060},
		pgIO:       map[int]ioCount{1: {110, 60}, 3: {20, 30}}, // 2 ended, 3 started
		pgSwitches: map[int]float64{1: 600, 3: 100, 4: 10}}     // 4's pid was reused
	io := after.ioSince(before, 1000, 50000)
	if io == nil || io.Requests != 1000 || io.Delivered != 50000 {
		t.Fatalf("ioSince = %+v", io)
	}
	want := map[string]IOPart{
		cpuFeed:     {Read: 3000, Write: 1000, PerRequest: 4, PerEntry: 0.08},
		cpuRedis:    {Read: 2000, Write: 2000, PerRequest: 4, PerEntry: 0.08},
		cpuPostgres: {Read: 120, Write: 80, PerRequest: 0.2, PerEntry: 0.004},
	}
	for k, w := range want {
		g := io.Parts[k]
		if g.Read != w.Read || g.Write != w.Write || math.Abs(g.PerRequest-w.PerRequest) > 1e-9 || math.Abs(g.PerEntry-w.PerEntry) > 1e-9 {
			t.Errorf("%s: %+v, want %+v", k, g, w)
		}
	}
	if w := io.PostgresSwitches; w == nil || w.Count != 600 || math.Abs(w.PerRequest-0.6) > 1e-9 || math.Abs(w.PerEntry-0.012) > 1e-9 {
		t.Errorf("postgres context switches %+v, want 600, 0.6 a request, 0.012 an entry", w)
	}
	var out bytes.Buffer
	writeIOCalls(&out, io)
	if line := out.String(); !strings.Contains(line, "feed 4.0 (3000 reads + 1000 writes), 0.080 an entry") ||
		!strings.Contains(line, "postgres files 0.2 (120 reads + 80 writes)") ||
		!strings.Contains(line, "postgres context switches 0.6 (600 of its backends)") {
		t.Errorf("report line %q", line)
	}
	// Nothing known at one end: no figures rather than wrong ones.
	if io := (sutSnapshot{feedIO: noIO, redisIO: noIO}).ioSince(before, 10, 0); io != nil {
		t.Errorf("ioSince with nothing known after = %+v, want nil", io)
	}
}

// A PostgreSQL backend's context switches follow its round trips: it is
// switched out between its client's messages, sleeping until the next
// (an idle machine) or preempted by the client its answer wakes (a busy
// one: in one CI run 300 round trips woke the backend 0 times, every
// switch a preemption). Its read and write calls do not: it reads and
// writes its socket with recv and send.
func TestPostgresSwitchesFollowRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		t.Skip(err)
	}
	p, err := fs.Proc(int(conn.Conn().PgConn().PID()))
	if err != nil {
		t.Skip(err)
	}
	s0, err := switches(p)
	if err != nil {
		t.Skipf("the backend's status is not readable here: %v", err)
	}
	io0, ioErr := p.IO()
	const trips = 300
	for range trips {
		var one int
		if err := conn.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
			t.Fatal(err)
		}
	}
	s1, err := switches(p)
	if err != nil {
		t.Fatal(err)
	}
	// A trip whose next query is there before the backend looks for it,
	// the backend not preempted in between, costs no switch: here a third
	// to all of them cost one.
	t.Logf("%v context switches for %d round trips", s1-s0, trips)
	if d := s1 - s0; d < trips/10 || d > 4*trips {
		t.Fatalf("%v context switches for %d round trips", d, trips)
	}
	// An idle backend is not switched.
	time.Sleep(200 * time.Millisecond)
	if s2, err := switches(p); err != nil || s2-s1 > 3 {
		t.Fatalf("%v context switches of an idle backend in 200 ms (%v)", s2-s1, err)
	}
	if ioErr == nil {
		if io1, err := p.IO(); err == nil && io1.SyscR-io0.SyscR+io1.SyscW-io0.SyscW >= trips {
			t.Fatalf("%d reads and %d writes for %d round trips: the backend's socket calls are counted after all; the report's label is wrong",
				io1.SyscR-io0.SyscR, io1.SyscW-io0.SyscW, trips)
		}
	}
}

// The follower lists of the pushes are read from the inbox projector's
// own counter (its exposition, every source exported from zero) and
// counted over the phase; without the counter there is no figure.
func TestFollowerLists(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	if _, err := projections.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	zero := parseMetrics(exposition(t, reg)).lists
	if len(zero) != 3 || zero["cache"] != 0 || zero["database"] != 0 || zero["uncached"] != 0 {
		t.Fatalf("lists from the projector's exposition = %v, want cache, database and uncached at 0", zero)
	}
	text := "# TYPE feed_projection_follower_lists_total counter\n" +
		"feed_projection_follower_lists_total{source=\"cache\"} 900\n" +
		"feed_projection_follower_lists_total{source=\"database\"} 250\n" +
		"feed_projection_follower_lists_total{source=\"uncached\"} 10\n"
	after := parseMetrics(strings.NewReader(text)).lists
	f := after.since(listCount{"cache": 300, "database": 150, "uncached": 4})
	if f == nil || f.Cache != 600 || f.Database != 100 || f.Uncached != 6 || f.FromPostgres != 106.0/706 {
		t.Fatalf("since = %+v, want 600 from the cache, 100 read and 6 paged from PostgreSQL (106/706)", f)
	}
	var out bytes.Buffer
	writeFollowerLists(&out, f)
	if want := "600 from its cache, 100 read from PostgreSQL, 6 paged uncached: 15.0% from PostgreSQL"; !strings.Contains(out.String(), want) {
		t.Fatalf("printed %q, want it to hold %q", out.String(), want)
	}
	if parseMetrics(strings.NewReader("")).lists.since(zero) != nil || after.since(nil) != nil {
		t.Fatal("a figure without the counter at both ends")
	}
	out.Reset()
	writeFollowerLists(&out, nil)
	if out.Len() != 0 {
		t.Fatalf("printed %q without figures", out.String())
	}
}

// The projectors' retries are read from their own counter (every
// projector exported from zero) and counted over the phase.
func TestProjectorRetries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	if _, err := projections.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	zero := parseMetrics(exposition(t, reg)).retries
	if len(zero) != len(projections.Names()) {
		t.Fatalf("retries from the projectors' exposition = %v, want every projector at 0", zero)
	}
	for _, n := range projections.Names() {
		if v, ok := zero[n]; !ok || v != 0 {
			t.Fatalf("retries of %s = %v, %v; want 0", n, v, ok)
		}
	}
	text := "# TYPE feed_projection_retries_total counter\n" +
		"feed_projection_retries_total{projector=\"inbox\"} 212\n" +
		"feed_projection_retries_total{projector=\"posts\"} 3\n"
	r := parseMetrics(strings.NewReader(text)).retries.since(retryCount{"inbox": 12, "posts": 3})
	if len(r) != 2 || r["inbox"] != 200 || r["posts"] != 0 {
		t.Fatalf("since = %v, want inbox 200, posts 0", r)
	}
	var out bytes.Buffer
	writeRetries(&out, r)
	if want := "projector retries (each applies a message again): inbox 200, posts 0\n"; out.String() != want {
		t.Fatalf("printed %q, want %q", out.String(), want)
	}
	if parseMetrics(strings.NewReader("")).retries.since(zero) != nil {
		t.Fatal("a figure without the counter at both ends")
	}
	out.Reset()
	writeRetries(&out, nil)
	if out.Len() != 0 {
		t.Fatalf("printed %q without figures", out.String())
	}
}

// A slow second is one whose read p99 is over the target; each is paired
// with the sampler's point at its end, and the fan-out of the slow
// seconds and of the others are their medians. A second without reads
// is not counted.
func TestSlowSeconds(t *testing.T) {
	t.Parallel()
	secs := []SecondPoint{
		{Second: 0, Reads: 100, ReadP99: 2},
		{Second: 1, Reads: 100, ReadP99: 40},
		{Second: 2, Reads: 100, ReadP99: 3},
		{Second: 3, Reads: 100, ReadP99: 12},
		{Second: 4, Reads: 100, ReadP99: 10}, // at the target: not over it
		{Second: 5, Reads: 0},
	}
	timeline := []TimePoint{
		{T: 1.001, FanoutPerSec: 60_000},
		{T: 2.002, FanoutPerSec: 130_000},
		{T: 2.999, FanoutPerSec: 58_000},
		{T: 4.0, FanoutPerSec: 110_000},
		{T: 5.001, FanoutPerSec: 62_000},
	}
	got := slowSeconds(secs, timeline)
	want := SlowSeconds{Count: 2, Seconds: 5, FanoutSlow: 120_000, FanoutOther: 60_000}
	if *got != want {
		t.Fatalf("slow seconds = %+v, want %+v", *got, want)
	}
	var out bytes.Buffer
	writeSlowSeconds(&out, got)
	if w := "seconds with a read p99 over 10 ms: 2 of 5; inbox entries/s in them (median) 120000, in the others 60000\n"; out.String() != w {
		t.Fatalf("printed %q, want %q", out.String(), w)
	}
	// Without samples (no /metrics), only the count.
	out.Reset()
	writeSlowSeconds(&out, slowSeconds(secs, nil))
	if w := "seconds with a read p99 over 10 ms: 2 of 5\n"; out.String() != w {
		t.Fatalf("printed %q, want %q", out.String(), w)
	}
	// Samples every 2 s: each covers the two seconds before it.
	two := []TimePoint{{T: 2.001, FanoutPerSec: 100_000}, {T: 4.002, FanoutPerSec: 50_000}, {T: 6.0, FanoutPerSec: 40_000}}
	if got := slowSeconds(secs, two); got.FanoutSlow != 75_000 || got.FanoutOther != 50_000 {
		t.Fatalf("slow seconds over 2 s samples = %+v, want 75000 in them (100000 and 50000), 50000 in the others", *got)
	}
	if m := median([]float64{3, 1, 2, 10}); m != 2.5 {
		t.Fatalf("median = %v, want 2.5", m)
	}
}

// exposition is what reg's /metrics would serve: its families in the
// Prometheus text format.
func exposition(t *testing.T, reg prometheus.Gatherer) *bytes.Buffer {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			t.Fatal(err)
		}
	}
	return &buf
}

// A churner's follow goes to an author it does not follow yet, while one
// is left: a repeated follow changes nothing, and every run draws the
// same sequence. Only a churner who follows everyone repeats one.
func TestFollowTarget(t *testing.T) {
	t.Parallel()
	authors := make([]int64, 50)
	for i := range authors {
		authors[i] = int64(i + 1)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	fl := []int64{}
	for range 49 { // c = 7 follows every other author, one at a time
		tg := followTarget(rng, authors, 7, fl)
		if tg == 7 || slices.Contains(fl, tg) {
			t.Fatalf("target %d with %d followed (%v)", tg, len(fl), fl)
		}
		fl = append(fl, tg)
	}
	if tg := followTarget(rng, authors, 7, fl); tg == 7 || !slices.Contains(fl, tg) {
		t.Fatalf("with everyone followed, target %d: want an author followed already, not c", tg)
	}
}
