package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Live streams (Config.Streams): for the whole mixed phase, the first
// Streams readers each hold a live stream of their home feed open
// (GET /api/feed/stream, Server-Sent Events), and every plain post the
// run writes by an author one of them follows is timed from its 201 at
// the load generator (the clock of post-to-visible) to the arrival of its
// `post` event on each of those followers' streams. A stream that ends
// while the run goes on is opened again with the last event's id
// (Last-Event-ID), as a browser's EventSource does: the server sends what
// it missed.

// sseEvent is one server-sent event.
type sseEvent struct {
	ID, Type, Data string
	// Retry is the reconnection delay the event set (0: none).
	Retry time.Duration
}

// readSSE reads server-sent events from rd and calls fn with each as it
// is dispatched (at its blank line), with the time it was read, until rd
// fails or ends (io.EOF). It follows the WHATWG event-stream format:
// "field: value" lines (one space after the colon dropped), comments
// (lines starting with a colon) ignored, data lines joined with newlines,
// CRLF or LF line ends; an event without data is not dispatched (as
// EventSource does), but its retry and id fields count: fn gets them
// without a type (an id without data is the position a connection opens
// with, EventSource's last event id from then on).
func readSSE(rd *bufio.Reader, fn func(ev sseEvent, at time.Time)) error {
	var ev sseEvent
	var data []string
	idSet := false // the block being read has an id field
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			if err == io.EOF && line != "" {
				return io.ErrUnexpectedEOF // an event cut off mid-line is not dispatched
			}
			return err
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			if data != nil {
				ev.Data = strings.Join(data, "\n")
				fn(ev, time.Now())
			} else if ev.Retry > 0 || idSet {
				fn(sseEvent{ID: ev.ID, Retry: ev.Retry}, time.Now())
			}
			ev, data, idSet = sseEvent{ID: ev.ID}, nil, false // the last event id persists
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			ev.ID, idSet = value, true
		case "event":
			ev.Type = value
		case "data":
			data = append(data, value)
		case "retry":
			if ms, err := strconv.Atoi(value); err == nil && ms >= 0 {
				ev.Retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
}

// streamPost is a post the run expects on its followers' streams.
type streamPost struct {
	t201    time.Time
	at      time.Duration // since the phase began
	celeb   bool          // its author is at or over the celebrity threshold
	arrived map[int64]float64
	pending map[int64]bool
	// pollWatcher and pollMs are the post's visibility probe, when it
	// had one whose follower holds a stream (0: none).
	pollWatcher int64
	pollMs      float64
}

// arrival is a stream's post event that came before its post was
// expected (its 201 not yet handled), or that no expected post matches.
type arrival struct {
	user int64
	id   string
}

// streamMatcher pairs the run's posts with their arrivals on the
// followers' streams.
type streamMatcher struct {
	mu       sync.Mutex
	posts    map[string]*streamPost
	early    map[arrival]time.Time
	pending  int // (post, follower) pairs not arrived yet
	lastT201 time.Time
	// timeout is the probes' VisibleTimeout: an arrival later than it
	// after the 201 is late, counted apart and not among the latencies,
	// as a probe that gives up is an error, not a sample.
	timeout time.Duration

	expected, beforeT201, duplicates, other, late int64
	samples, celebSamples                         []sample
}

func newStreamMatcher(timeout time.Duration) *streamMatcher {
	return &streamMatcher{posts: map[string]*streamPost{}, early: map[arrival]time.Time{}, timeout: timeout}
}

// expect registers a post (its id, its 201's time, when in the phase it
// was written) and the stream holders who follow its author. An arrival
// that came first counts as 0 ms: the post was on the stream before the
// load generator handled its 201.
func (m *streamMatcher) expect(id string, t201 time.Time, at time.Duration, celeb bool, followers []int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := &streamPost{t201: t201, at: at, celeb: celeb, arrived: map[int64]float64{}, pending: map[int64]bool{}}
	m.posts[id] = p
	if t201.After(m.lastT201) {
		m.lastT201 = t201
	}
	for _, u := range followers {
		m.expected++
		if t, ok := m.early[arrival{u, id}]; ok {
			delete(m.early, arrival{u, id})
			m.beforeT201++
			m.record(p, u, max(0, msOf(t.Sub(t201))))
			continue
		}
		p.pending[u] = true
		m.pending++
	}
}

func (m *streamMatcher) record(p *streamPost, user int64, ms float64) {
	p.arrived[user] = ms
	dst := &m.samples
	if p.celeb {
		dst = &m.celebSamples
	}
	*dst = append(*dst, sample{at: p.at, ms: ms})
}

// earlyKept bounds how long an arrival waits for its post to be expected.
const earlyKept = 10 * time.Second

// arrive takes a post event with id on user's stream, read at t.
func (m *streamMatcher) arrive(user int64, id string, t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.posts[id]; ok {
		switch {
		case p.pending[user]:
			delete(p.pending, user)
			m.pending--
			if t.Sub(p.t201) > m.timeout {
				m.late++
				p.arrived[user] = msOf(t.Sub(p.t201)) // paired, not a sample
				return
			}
			m.record(p, user, msOf(t.Sub(p.t201)))
		case hasKey(p.arrived, user):
			m.duplicates++
		default:
			m.other++ // (a follower that was not expected)
		}
		return
	}
	if _, ok := m.early[arrival{user, id}]; ok {
		m.duplicates++
		return
	}
	m.early[arrival{user, id}] = t
	if len(m.early)%1024 == 0 { // drop what no post claimed in time
		for k, at := range m.early {
			if t.Sub(at) > earlyKept {
				delete(m.early, k)
				m.other++
			}
		}
	}
}

func hasKey(m map[int64]float64, k int64) bool { _, ok := m[k]; return ok }

// polled records a visibility probe of post id by watcher.
func (m *streamMatcher) polled(id string, watcher int64, ms float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.posts[id]; ok && (hasKey(p.arrived, watcher) || p.pending[watcher]) {
		p.pollWatcher, p.pollMs = watcher, ms
	}
}

// wait returns once every expected pair arrived, or timeout after the
// last post's 201 passed, or ctx ended.
func (m *streamMatcher) wait(ctx context.Context, timeout time.Duration) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		m.mu.Lock()
		done := m.pending == 0 || time.Since(m.lastT201) > timeout
		m.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Streams is what the live streams measured (Config.Streams).
type Streams struct {
	// Streams is how many streams were asked; Opened how many answered
	// 200 at the start.
	Streams int `json:"streams"`
	Opened  int `json:"opened"`
	// Dropped counts streams that ended while the run went on (the
	// server closed them, or a read failed); Reconnected the reopenings
	// that answered 200 (each with Last-Event-ID when the stream had an
	// event).
	Dropped     int64 `json:"dropped"`
	Reconnected int64 `json:"reconnected"`
	// Posts is the plain posts of authors followed by a stream holder;
	// Expected the (post, follower's stream) pairs they make.
	Posts    int64 `json:"posts"`
	Expected int64 `json:"expected"`
	// PostToStream is, for every expected pair of an author under the
	// celebrity threshold (the posts post-to-visible probes), the time
	// from the post's 201 to its event's arrival on the follower's
	// stream; Celebrity the same for authors at or over it (pulled at
	// read time, which the probes skip).
	PostToStream Summary `json:"postToStream"`
	Celebrity    Summary `json:"celebrity"`
	// Paired are the probed posts whose probe polled a stream holder:
	// the same (post, follower) timed on the stream (late arrivals
	// included) and by polling.
	Paired *Paired `json:"paired,omitempty"`
	// Late is the pairs that came on the stream later than
	// VisibleTimeout after the 201 (not among the latencies, as a probe
	// that gives up is not); Missing those that did not come by the end
	// of the run's wait; BeforeT201 the arrivals read before the load generator
	// handled the post's 201 (counted as 0 ms); Duplicates post events a
	// stream received twice; OtherEvents the post events of entries the
	// run did not expect there (reposts, replies).
	Late        int64 `json:"late"`
	Missing     int64 `json:"missing"`
	BeforeT201  int64 `json:"beforeT201"`
	Duplicates  int64 `json:"duplicates"`
	OtherEvents int64 `json:"otherPostEvents"`
	// Timeout is the lateness bound (Config.VisibleTimeout).
	Timeout time.Duration `json:"timeoutNs"`
	// Events counts the events received by type (post, edit, delete).
	Events map[string]int64 `json:"events"`
	// Errors are the failures to open or read a stream, by kind.
	Errors map[string]int64 `json:"errors"`
}

// Paired compares the stream and the poll on the same (post, follower).
type Paired struct {
	Count        int64   `json:"count"`
	StreamP50    float64 `json:"streamP50Ms"`
	StreamP99    float64 `json:"streamP99Ms"`
	PollP50      float64 `json:"pollP50Ms"`
	PollP99      float64 `json:"pollP99Ms"`
	StreamFirstN int64   `json:"streamFirst"` // pairs the stream delivered before the poll saw
}

// liveStreams holds the run's streams.
type liveStreams struct {
	r       *Runner
	m       *streamMatcher
	holders map[int64]bool    // readers with a stream
	follows map[int64][]int64 // author -> stream holders who follow them
	client  *http.Client

	mu          sync.Mutex
	events      map[string]int64
	errs        map[string]int64
	opened      int
	dropped     atomic.Int64
	reconnected atomic.Int64
	wg          sync.WaitGroup
}

func (r *Runner) newLiveStreams() *liveStreams {
	n := min(r.cfg.Streams, len(r.pop.Readers))
	ls := &liveStreams{r: r, m: newStreamMatcher(r.cfg.VisibleTimeout), holders: map[int64]bool{}, follows: map[int64][]int64{},
		events: map[string]int64{}, errs: map[string]int64{}}
	for _, u := range r.pop.Readers[:n] {
		ls.holders[u] = true
	}
	for a, ws := range r.pop.Watchers {
		for _, w := range ws {
			if ls.holders[w] {
				ls.follows[a] = append(ls.follows[a], w)
			}
		}
	}
	ls.client = r.deps.HTTP
	if ls.client == nil {
		ls.client = &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: n, DisableCompression: true, ResponseHeaderTimeout: r.cfg.RequestTimeout,
		}}
	}
	return ls
}

func (ls *liveStreams) fail(kind string) {
	ls.mu.Lock()
	ls.errs[kind]++
	ls.mu.Unlock()
}

// streamSettle is how long the mixed phase waits after the streams
// opened: past the read each makes 2 s after its open (the API's
// default StreamStartRead), which for 1,000 streams opened at once is a
// burst of 1,000 reads.
const streamSettle = 3 * time.Second

// open starts every stream and returns once each answered or failed.
func (ls *liveStreams) open(ctx context.Context) {
	users := slices.Sorted(maps.Keys(ls.holders))
	fmt.Fprintf(ls.r.deps.Log, "bench: opening %d live streams\n", len(users))
	var started sync.WaitGroup
	for _, u := range users {
		started.Add(1)
		ls.wg.Add(1)
		go func() {
			defer ls.wg.Done()
			ls.run(ctx, u, &started)
		}()
	}
	started.Wait()
	fmt.Fprintf(ls.r.deps.Log, "bench: %d of %d live streams open\n", ls.opened, len(users))
}

// run holds user's stream open until ctx ends, reopening it with the last
// event's id when it ends.
func (ls *liveStreams) run(ctx context.Context, user int64, started *sync.WaitGroup) {
	first, lastID, retry := true, "", time.Second
	for ctx.Err() == nil {
		body, err := ls.connect(ctx, user, lastID)
		if first {
			if err == nil {
				ls.mu.Lock()
				ls.opened++
				ls.mu.Unlock()
			}
			started.Done()
			first = false
		} else if err == nil {
			ls.reconnected.Add(1)
		}
		if err == nil {
			err = readSSE(bufio.NewReaderSize(body, 16<<10), func(ev sseEvent, at time.Time) {
				if ev.Retry > 0 {
					retry = ev.Retry
				}
				if ev.ID != "" {
					lastID = ev.ID // also the position a connection opens with (an id without data)
				}
				if ev.Type == "" {
					return
				}
				ls.mu.Lock()
				ls.events[ev.Type]++
				ls.mu.Unlock()
				if ev.Type == "post" {
					if id, ok := itemID(ev.Data); ok {
						ls.m.arrive(user, id, at)
					} else {
						ls.fail("stream: post event without an id")
					}
				}
			})
			body.Close()
			if ctx.Err() != nil {
				return
			}
			ls.dropped.Add(1)
			if !errors.Is(err, io.EOF) {
				ls.fail(errKind("stream read", 0, err))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry): // the server's retry hint, as EventSource waits
		}
	}
	if first {
		started.Done()
	}
}

// connect opens user's stream (from lastID when set) and returns its body.
func (ls *liveStreams) connect(ctx context.Context, user int64, lastID string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ls.r.cfg.BaseURL+"/api/feed/stream", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", ls.r.auth(user))
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := ls.client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			ls.fail(errKind("stream open", 0, err))
		}
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ls.fail(errKind("stream open", resp.StatusCode, nil))
		return nil, fmt.Errorf("stream open: %s", resp.Status)
	}
	return resp.Body, nil
}

// itemID is the id of a post event's item.
func itemID(data string) (string, bool) {
	var it struct {
		ID string `json:"id"`
	}
	if json.Unmarshal([]byte(data), &it) != nil || it.ID == "" {
		return "", false
	}
	return it.ID, true
}

// summary closes the books after the streams were stopped.
func (ls *liveStreams) summary(elapsed time.Duration) *Streams {
	m := ls.m
	m.mu.Lock()
	defer m.mu.Unlock()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	s := &Streams{Streams: len(ls.holders), Opened: ls.opened, Dropped: ls.dropped.Load(), Reconnected: ls.reconnected.Load(),
		Posts: int64(len(m.posts)), Expected: m.expected, Timeout: m.timeout, Late: m.late, Missing: int64(m.pending), BeforeT201: m.beforeT201,
		Duplicates: m.duplicates, OtherEvents: m.other + int64(len(m.early)), Events: ls.events, Errors: ls.errs}
	s.PostToStream = Summarize(latencies(m.samples), elapsed)
	s.Celebrity = Summarize(latencies(m.celebSamples), elapsed)
	var st, pl []float64
	var first int64
	for _, p := range m.posts {
		if ms, ok := p.arrived[p.pollWatcher]; ok && p.pollWatcher != 0 {
			st, pl = append(st, ms), append(pl, p.pollMs)
			if ms < p.pollMs {
				first++
			}
		}
	}
	if len(st) > 0 {
		slices.Sort(st)
		slices.Sort(pl)
		s.Paired = &Paired{Count: int64(len(st)), StreamP50: Percentile(st, 0.5), StreamP99: Percentile(st, 0.99),
			PollP50: Percentile(pl, 0.5), PollP99: Percentile(pl, 0.99), StreamFirstN: first}
	}
	return s
}

// writeStreams prints the streams' lines of the table.
func writeStreams(w io.Writer, s *Streams) {
	if s == nil {
		return
	}
	fmt.Fprintf(w, "live streams: %d asked, %d open at the start, %d dropped, %d reconnected; events", s.Streams, s.Opened, s.Dropped, s.Reconnected)
	for _, k := range slices.Sorted(maps.Keys(s.Events)) {
		fmt.Fprintf(w, " %s %d", k, s.Events[k])
	}
	fmt.Fprintf(w, "\n  %d posts to %d followers' streams: %d late (over %s), %d missing, %d before the 201 was handled, %d duplicates, %d other post events\n",
		s.Posts, s.Expected, s.Late, s.Timeout, s.Missing, s.BeforeT201, s.Duplicates, s.OtherEvents)
	if p := s.Paired; p != nil {
		fmt.Fprintf(w, "  the probed (post, follower) pairs, %d: stream p50 %.2f ms p99 %.2f ms, poll p50 %.2f ms p99 %.2f ms; the stream first in %d\n",
			p.Count, p.StreamP50, p.StreamP99, p.PollP50, p.PollP99, p.StreamFirstN)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Errors)) {
		fmt.Fprintf(w, "  stream error %-52s %d\n", k, s.Errors[k])
	}
}
