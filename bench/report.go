package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/feedco/feed/homefeed"
)

// Report is everything a run measured; it is written as JSON as is.
type Report struct {
	Command    string     `json:"command,omitempty"`
	Config     Config     `json:"config"`
	StartedAt  time.Time  `json:"startedAt"`
	FinishedAt time.Time  `json:"finishedAt"`
	LoadBefore [3]float64 `json:"loadAverageBefore"`
	LoadAfter  [3]float64 `json:"loadAverageAfter"`
	Users      int        `json:"users"`
	Follows    int64      `json:"follows"`
	Readers    int        `json:"readers"`
	Churners   int        `json:"churners"`
	// WarmUp is the readers' first reads (cold inbox builds).
	WarmUp Summary `json:"warmUp"`
	// Inboxes is how Redis held the readers' inboxes after the warm-up
	// (nil without a Redis client).
	Inboxes        *InboxEncoding `json:"inboxes,omitempty"`
	BaselineBefore *Baselines     `json:"baselineBefore,omitempty"`
	Mixed          *Mixed         `json:"mixed"`
	BaselineAfter  *Baselines     `json:"baselineAfter,omitempty"`
	// RawPush is the raw cost of pushes like the mixed phase's, measured
	// after it (nil without posts or baselines).
	RawPush *RawPush `json:"rawPush,omitempty"`
	// RawHTTP is the raw cost of serving the API's page over HTTP with
	// net/http's server at the mixed phase's read rate (nil without reads,
	// baselines or a server).
	RawHTTP *RawHTTP `json:"rawHttp,omitempty"`
}

// Mixed is the mixed phase's measurements.
type Mixed struct {
	Seconds float64 `json:"seconds"`
	Reads   Summary `json:"reads"`
	// ReadsAtSocket is the same reads timed from their start to their
	// response's arrival at the load generator's socket (the kernel's
	// receive timestamp): without the time the load generator took to
	// run once the response was there. Only the reads the kernel stamped
	// (nil with --plain-sockets).
	ReadsAtSocket *Summary `json:"readsAtSocket,omitempty"`
	Posts         Summary  `json:"posts"`
	Follows       Summary  `json:"follows"`
	Unfollows     Summary  `json:"unfollows"`
	Shares        Summary  `json:"shares"` // reposts and likes
	// WritesPerSec is posts, follows and unfollows per second together.
	WritesPerSec float64 `json:"writesPerSecond"`
	// PostToVisible: from the post's 201 at the client to the receipt of
	// the first page of a follower that shows it (see probe).
	PostToVisible Summary `json:"postToVisible"`
	// Streams is what the live streams measured (nil without
	// Config.Streams): post-to-stream beside PostToVisible.
	Streams *Streams `json:"streams,omitempty"`
	// FanoutPerSec is the mean of the inbox projector's entries/s samples
	// taken during the phase.
	FanoutPerSec float64 `json:"fanoutEntriesPerSecond"`
	// LateStarts counts open-loop operations started over 10 ms after
	// their scheduled time (the client could not keep up).
	LateStarts int64 `json:"lateStarts"`
	// ProbeReadsPerSec is the feed pages the visibility probes read (the
	// probes still running after the phase included) per second of the
	// phase: load on top of the measured reads.
	ProbeReadsPerSec float64          `json:"probeReadsPerSecond"`
	Errors           map[string]int64 `json:"errors"`
	ErrorCount       int64            `json:"errorCount"`
	// PerSecond is the reads' count and latency per second of the phase.
	PerSecond []SecondPoint `json:"perSecond"`
	Timeline  []TimePoint   `json:"timeline"`
	// Visible lists every probe: post time since start and latency.
	Visible [][2]float64 `json:"visibleSamples"`
	// CPU is the machine's CPU by process group from the phase's first
	// operation to its last (the probes' wait after it not included); nil
	// where /proc cannot be read.
	CPU *CPU `json:"cpu,omitempty"`
	// Delivered is how many inbox entries the inbox projector wrote over
	// the same window as CPU (its entries counter, scraped at both ends).
	Delivered int64 `json:"deliveredEntries"`
	// SystemCPU is the system under test's own CPU over the same window:
	// the API's process (feed dev: every role), its Redis and the
	// PostgreSQL backends of its database (sutcpu.go); unlike CPU it
	// leaves out other work on the machine.
	SystemCPU *CPU `json:"systemCpu,omitempty"`
	// CPUPerEntry is SystemCPU's feed, redis and postgres, and their sum
	// ("system"), in CPU-µs per delivered entry: with a write-only mix,
	// what an entry costs with every per-write cost included (nil
	// without entries).
	CPUPerEntry map[string]float64 `json:"cpuUsPerDeliveredEntry,omitempty"`
	// ServerReads is the API's own latency of the phase's feed reads
	// (its /metrics histogram; nil when it has none).
	ServerReads *ServerReads `json:"serverReads,omitempty"`
	// ServerSched is how long the API's goroutines waited for a core
	// over the phase (its /metrics; nil when it has none).
	ServerSched *ServerSched `json:"serverSched,omitempty"`
	// IOCalls is the system under test's read and write calls over the
	// same window as SystemCPU (iocalls.go; nil when none could be read).
	IOCalls *IOCalls `json:"ioCalls,omitempty"`
	// FollowerLists is where the inbox projector's pushes found their
	// follower lists over the same window (followerlists.go; nil when the
	// API's /metrics has no such counter).
	FollowerLists *FollowerLists `json:"followerLists,omitempty"`
	// SlowSeconds counts the seconds whose read p99 was over the target,
	// with the fan-out in them and in the others (slowseconds.go).
	SlowSeconds *SlowSeconds `json:"slowSeconds,omitempty"`
	// Retries is the projectors' handler retries over the same window as
	// SystemCPU, by projector (nil when the API's /metrics has none).
	Retries map[string]float64 `json:"projectorRetries,omitempty"`

	readMs, visibleMs []float64
}

// SecondPoint is one second of the mixed phase.
type SecondPoint struct {
	Second     int     `json:"second"`
	Reads      int     `json:"reads"`
	ReadP50    float64 `json:"readP50Ms"`
	ReadP99    float64 `json:"readP99Ms"`
	Posts      int     `json:"posts"`
	VisibleP50 float64 `json:"visibleP50Ms"`
	// StreamP50 is the post-to-stream median of the posts written that
	// second (Config.Streams; 0 without).
	StreamP50 float64 `json:"streamP50Ms,omitempty"`
}

// TimePoint is one sample of the pipeline during the phase.
type TimePoint struct {
	T   float64    `json:"t"`
	Lag *LagSample `json:"lag,omitempty"`
	// CDCLagLive is the CDC reader's own lag (feed_cdc_lag_seconds from the
	// API's /metrics: the age of the oldest committed transaction Kafka has
	// not yet acknowledged, updated every second); absent when CDC does not
	// run in the API's process. The slot's CDCLagSeconds comes from a
	// progress row written once a second, so it is about a second coarse.
	CDCLagLive   *float64 `json:"cdcLagSecondsLive,omitempty"`
	FanoutPerSec float64  `json:"fanoutEntriesPerSecond"`
	Load1        float64  `json:"loadAverage1m"`
}

func (r *Runner) summarizeMixed(rec *recorder, elapsed time.Duration, timeline []TimePoint) *Mixed {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	m := &Mixed{Seconds: elapsed.Seconds(), Errors: rec.errs, LateStarts: rec.lateStarts, Timeline: timeline,
		ProbeReadsPerSec: float64(rec.probeReads.Load()) / elapsed.Seconds()}
	secs := int(elapsed/time.Second) + 1
	rc, r50, r99 := perSecond(rec.reads, secs)
	pc, _, _ := perSecond(rec.posts, secs)
	_, v50, _ := perSecond(rec.visible, secs)
	for i := range secs {
		m.PerSecond = append(m.PerSecond, SecondPoint{Second: i, Reads: rc[i], ReadP50: r50[i], ReadP99: r99[i], Posts: pc[i], VisibleP50: v50[i]})
	}
	for _, v := range rec.visible {
		m.Visible = append(m.Visible, [2]float64{v.at.Seconds(), v.ms})
	}
	m.readMs = latencies(rec.reads)
	m.visibleMs = latencies(rec.visible)
	m.Reads = Summarize(m.readMs, elapsed)
	if len(rec.readsAtSocket) > 0 {
		at := Summarize(latencies(rec.readsAtSocket), elapsed)
		m.ReadsAtSocket = &at
	}
	m.Posts = Summarize(latencies(rec.posts), elapsed)
	m.Follows = Summarize(latencies(rec.follows), elapsed)
	m.Unfollows = Summarize(latencies(rec.unfollows), elapsed)
	m.Shares = Summarize(latencies(rec.shares), elapsed)
	m.WritesPerSec = m.Posts.Rate + m.Shares.Rate + m.Follows.Rate + m.Unfollows.Rate
	m.PostToVisible = Summarize(m.visibleMs, elapsed)
	var n int
	for _, p := range timeline {
		if p.T <= elapsed.Seconds()+0.5 && p.FanoutPerSec > 0 {
			m.FanoutPerSec += p.FanoutPerSec
			n++
		}
	}
	// Seconds with no entries count too: average over the phase's samples.
	var inPhase int
	for _, p := range timeline {
		if p.T <= elapsed.Seconds()+0.5 {
			inPhase++
		}
	}
	if inPhase > 0 {
		m.FanoutPerSec /= float64(inPhase)
	}
	for _, v := range rec.errs {
		m.ErrorCount += v
	}
	// Whole seconds only: the last, partial one holds a few reads.
	m.SlowSeconds = slowSeconds(m.PerSecond[:min(len(m.PerSecond), int(elapsed/time.Second))], timeline)
	return m
}

// WriteJSON writes the report to path.
func (rep *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// WriteTable prints the report for a terminal.
func (rep *Report) WriteTable(w io.Writer) {
	m := rep.Mixed
	fmt.Fprintf(w, "feedbench: %d users, %d follows, %d readers, %d churners; load average %.1f before, %.1f after\n",
		rep.Users, rep.Follows, rep.Readers, rep.Churners, rep.LoadBefore[0], rep.LoadAfter[0])
	fmt.Fprintf(w, "mixed phase %.0f s; warm-up (first reads, cold builds) p50 %.1f ms p99 %.1f ms\n", m.Seconds, rep.WarmUp.P50, rep.WarmUp.P99)
	if e := rep.Inboxes; e != nil {
		limit := "unknown"
		if e.ZsetMaxListpackEntries >= 0 {
			limit = strconv.Itoa(e.ZsetMaxListpackEntries)
		}
		per := "unknown bytes per entry"
		if b := e.BytesPerEntry(); b > 0 {
			per = fmt.Sprintf("%.1f bytes per entry", b)
		}
		if e.Layout == homefeed.Layout {
			fmt.Fprintf(w, "inboxes: packed, %d sampled, %s\n", e.Sampled, per)
		} else {
			fmt.Fprintf(w, "inboxes: %d of %d sampled listpack, %d skiplist (zset-max-listpack-entries %s), %s\n",
				e.Listpack, e.Sampled, e.Skiplist, limit, per)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-34s %10s %9s %9s %9s %9s %9s\n", "measure", "count", "per s", "p50 ms", "p99 ms", "p99.9 ms", "max ms")
	row := func(name string, s Summary) {
		fmt.Fprintf(w, "%-34s %10d %9.1f %9.2f %9.2f %9.2f %9.2f\n", name, s.Count, s.Rate, s.P50, s.P99, s.P999, s.Max)
	}
	row("feed read (HTTP, mixed)", m.Reads)
	if m.ReadsAtSocket != nil {
		row("  the same, at the socket", *m.ReadsAtSocket)
	}
	row("post (HTTP 201)", m.Posts)
	row("repost or like (HTTP 204)", m.Shares)
	row("follow (HTTP 204)", m.Follows)
	row("unfollow (HTTP 204)", m.Unfollows)
	row("post-to-visible (201 -> feed)", m.PostToVisible)
	if st := m.Streams; st != nil {
		row("post-to-stream (201 -> event)", st.PostToStream)
		if st.Celebrity.Count > 0 {
			row("  the same, celebrities' posts", st.Celebrity)
		}
	}
	for _, b := range []struct {
		name string
		b    *Baselines
	}{{"before", rep.BaselineBefore}, {"after", rep.BaselineAfter}} {
		if b.b != nil {
			row("baseline pull SQL ("+b.name+")", b.b.PullSQL)
			row("baseline raw Redis 2 cmds ("+b.name+")", b.b.RawRedis)
		}
	}
	fmt.Fprintf(w, "\nwrites/s %.1f (posts %.1f); fan-out entries/s (inbox projector) %.0f; late open-loop starts %d; probe reads/s %.0f\n",
		m.WritesPerSec, m.Posts.Rate, m.FanoutPerSec, m.LateStarts, m.ProbeReadsPerSec)
	writeStreams(w, m.Streams)
	var maxCDC, maxCDCs float64
	var live []float64
	maxCons := map[string]int64{}
	for _, p := range m.Timeline {
		if p.CDCLagLive != nil {
			live = append(live, *p.CDCLagLive*1000)
		}
		if p.Lag == nil {
			continue
		}
		maxCDC, maxCDCs = max(maxCDC, float64(p.Lag.CDCLagBytes)), max(maxCDCs, p.Lag.CDCLagSeconds)
		for k, v := range p.Lag.ConsumerLag {
			maxCons[k] = max(maxCons[k], v)
		}
	}
	fmt.Fprintf(w, "max CDC lag %.0f bytes / %.1f s (slot, ~1 s coarse); max consumer lag:", maxCDC, maxCDCs)
	for _, k := range slices.Sorted(maps.Keys(maxCons)) {
		fmt.Fprintf(w, " %s %d", k, maxCons[k])
	}
	fmt.Fprintln(w)
	if len(live) > 0 {
		slices.Sort(live)
		fmt.Fprintf(w, "CDC reader's lag (commit to Kafka ack, %d samples): p50 %.1f ms, max %.1f ms\n",
			len(live), Percentile(live, 0.5), live[len(live)-1])
	}
	if sr := m.ServerReads; sr != nil {
		fmt.Fprintf(w, "the API's own feed reads (its latency histogram, probes included, %d reads): p50 %.2f ms, p99 %.2f ms (within buckets), %.2f%% within 10 ms\n",
			sr.Count, sr.P50Ms, sr.P99Ms, sr.Within10ms*100)
	}
	if ss := m.ServerSched; ss != nil {
		fmt.Fprintf(w, "the API's goroutines waiting for a core (Go's scheduling latency, %d sampled waits): p50 %.1f µs, p99 %.2f ms, p99.9 %.2f ms, %.2f%% over 1 ms\n",
			ss.Samples, ss.P50Us, ss.P99Ms, ss.P999Ms, ss.Over1ms*100)
	}
	if m.CPU != nil {
		fmt.Fprintf(w, "cpu (%% of one core, mixed phase): %s\n", m.CPU)
	}
	if e := m.CPUPerEntry; e != nil {
		c := m.SystemCPU.Percent
		fmt.Fprintf(w, "system cpu (%% of one core, same window: the API's process, its Redis, its database's backends): feed %.1f, redis %.1f, postgres %.1f = %.1f\n",
			c[cpuFeed], c[cpuRedis], c[cpuPostgres], m.SystemCPU.Total)
		fmt.Fprintf(w, "cpu per delivered entry (µs, %d entries): feed %.2f, redis %.2f, postgres %.2f = %.2f\n",
			m.Delivered, e[cpuFeed], e[cpuRedis], e[cpuPostgres], e[cpuSystem])
	}
	writeIOCalls(w, m.IOCalls)
	writeFollowerLists(w, m.FollowerLists)
	writeRetries(w, m.Retries)
	writeSlowSeconds(w, m.SlowSeconds)
	if h := rep.RawHTTP; h != nil {
		fmt.Fprintf(w, "raw HTTP (net/http serving the API's %d-byte page, open loop, %d requests at %.0f/s, %d errors): server %.1f µs/request",
			h.BodyBytes, h.Requests, h.Rate, h.Errors, h.ServerUsPer)
		if h.PerReadFeed > 0 {
			fmt.Fprintf(w, "; the API's feed CPU per read %.1f µs (%.2fx raw)", h.PerReadFeed, h.PerReadRatio)
		}
		fmt.Fprintln(w)
	}
	if p := rep.RawPush; p != nil {
		fmt.Fprintf(w, "raw push pair (ZADD + ZREMRANGEBYRANK, %s, %d entries): %.0f entries/s, redis %.2f µs/entry, client %.2f µs/entry\n",
			p.Encoding, p.Entries, p.EntriesPerSec, p.RedisUsPerPush, p.ClientUsPerPush)
	}
	fmt.Fprintf(w, "errors: %d", m.ErrorCount)
	for _, k := range slices.Sorted(maps.Keys(m.Errors)) {
		fmt.Fprintf(w, "\n  %-60s %d", k, m.Errors[k])
	}
	for _, b := range []*Baselines{rep.BaselineBefore, rep.BaselineAfter} {
		if b != nil {
			for k, v := range b.Errors {
				fmt.Fprintf(w, "\n  baseline %-51s %d", strings.TrimSpace(k), v)
			}
		}
	}
	fmt.Fprintln(w)
}
