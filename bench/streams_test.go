package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestReadSSE(t *testing.T) {
	t.Parallel()
	wire := ":stream\nid: a0\n\n" +
		"id: a1\nevent: post\ndata: {\"id\":\"1\"}\n\n" +
		": heartbeat\n\n" +
		"id: a2\r\nevent: edit\r\ndata: line one\r\ndata:line two\r\n\r\n" +
		"event: post\ndata: {\"id\":\"3\"}\n\n" + // no id: the last one persists
		"retry: 1000\n: replaced\n\n" +
		"id: a4\nevent: post\ndata: {\"id\":\"4\"}" // cut off: not dispatched
	var got []sseEvent
	err := readSSE(bufio.NewReader(strings.NewReader(wire)), func(ev sseEvent, _ time.Time) { got = append(got, ev) })
	if err != io.ErrUnexpectedEOF {
		t.Errorf("err %v, want io.ErrUnexpectedEOF for the event cut off", err)
	}
	want := []sseEvent{
		{ID: "a0"}, // the position the stream opens with
		{ID: "a1", Type: "post", Data: `{"id":"1"}`},
		{ID: "a2", Type: "edit", Data: "line one\nline two"},
		{ID: "a2", Type: "post", Data: `{"id":"3"}`},
		{ID: "a2", Retry: time.Second},
	}
	if !slices.Equal(got, want) {
		t.Errorf("events\n%+v\nwant\n%+v", got, want)
	}
	got = nil
	if err := readSSE(bufio.NewReader(strings.NewReader("id: x\nevent: post\ndata: {}\n\n")), func(ev sseEvent, _ time.Time) { got = append(got, ev) }); err != io.EOF || len(got) != 1 {
		t.Errorf("a whole stream: %v, %d events, want io.EOF after 1", err, len(got))
	}
	if id, ok := itemID(`{"id":"42","authorId":"7","content":"x"}`); !ok || id != "42" {
		t.Errorf("itemID = %q, %v", id, ok)
	}
	if _, ok := itemID(`{"content":"x"}`); ok {
		t.Error("itemID of an item without an id: ok")
	}
}

func TestStreamMatcher(t *testing.T) {
	t.Parallel()
	m := newStreamMatcher(time.Minute)
	t0 := time.Now()
	// Post 1 to users 10 and 11: 10 gets it 40 ms after the 201, twice.
	m.expect("1", t0, time.Second, false, []int64{10, 11})
	m.arrive(10, "1", t0.Add(40*time.Millisecond))
	m.arrive(10, "1", t0.Add(50*time.Millisecond))
	// Post 2 arrives at 12 before its 201 was handled: 0 ms.
	m.arrive(12, "2", t0.Add(5*time.Millisecond))
	m.expect("2", t0.Add(10*time.Millisecond), 2*time.Second, false, []int64{12})
	// A celebrity's post, 70 ms.
	m.expect("3", t0, 3*time.Second, true, []int64{10})
	m.arrive(10, "3", t0.Add(70*time.Millisecond))
	// Post 4 comes to 12 after the timeout: late, not a latency.
	m.expect("4", t0, 4*time.Second, false, []int64{12})
	m.arrive(12, "4", t0.Add(61*time.Second))
	m.arrive(12, "4", t0.Add(62*time.Second)) // a duplicate of a late one
	// An entry the run did not expect (a repost), and a follower not expected.
	m.arrive(10, "99", t0)
	m.arrive(13, "1", t0.Add(time.Millisecond))
	// Post 1 was probed at 11 (which has not got it on its stream) and
	// post 3 at 10.
	m.polled("1", 11, 30)
	m.polled("3", 10, 90)
	m.polled("3", 55, 1) // not a follower of it with a stream: ignored

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m.wait(ctx, time.Hour) // 11's arrival is pending: returns with ctx

	ls := &liveStreams{m: m, holders: map[int64]bool{10: true, 11: true, 12: true}, events: map[string]int64{}, errs: map[string]int64{}}
	s := ls.summary(time.Second)
	if s.Posts != 4 || s.Expected != 5 || s.Late != 1 || s.Missing != 1 || s.BeforeT201 != 1 || s.Duplicates != 2 || s.OtherEvents != 2 {
		t.Errorf("posts %d expected %d late %d missing %d before %d duplicates %d other %d, want 4 5 1 1 1 2 2",
			s.Posts, s.Expected, s.Late, s.Missing, s.BeforeT201, s.Duplicates, s.OtherEvents)
	}
	if s.PostToStream.Count != 2 || s.PostToStream.P50 != 0 || s.PostToStream.Max != 40 {
		t.Errorf("post-to-stream %+v, want 0 and 40 ms", s.PostToStream)
	}
	if s.Celebrity.Count != 1 || s.Celebrity.P50 != 70 {
		t.Errorf("celebrities %+v, want one at 70 ms", s.Celebrity)
	}
	// Only post 3 is paired (post 1's probed follower never got it).
	if p := s.Paired; p == nil || p.Count != 1 || p.StreamP50 != 70 || p.PollP50 != 90 || p.StreamFirstN != 1 {
		t.Errorf("paired %+v, want post 3: stream 70, poll 90", s.Paired)
	}
	// When every pair arrived, wait returns at once.
	m.arrive(11, "1", t0.Add(time.Second))
	m.wait(context.Background(), time.Hour)
}

// streamAPI is fakeAPI with live streams: a post's event reaches every
// follower's stream delay after its 201 is written. Each stream is ended
// by the server after every second event it sends (retry 10 ms), and a
// reconnection must carry the last id sent: it then gets what it missed.
type streamAPI struct {
	fakeAPI
	followers map[int64][]int64 // author -> followers

	smu      sync.Mutex
	cond     *sync.Cond
	logs     map[int64][]string // user -> post ids, in order
	badIDs   int                // reconnections with a wrong Last-Event-ID
	sent     int
	resumes  int
	closed   bool
	complete sync.WaitGroup
}

func newStreamAPI(delay time.Duration, followers map[int64][]int64) *streamAPI {
	s := &streamAPI{fakeAPI: fakeAPI{delay: delay}, followers: followers, logs: map[int64][]string{}}
	s.cond = sync.NewCond(&s.smu)
	return s
}

func userOf(r *http.Request) int64 {
	u, _ := strconv.ParseInt(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer token-"), 10, 64)
	return u
}

func (s *streamAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/api/posts":
		rec := httptest.NewRecorder()
		s.fakeAPI.ServeHTTP(rec, r)
		var p feedItem
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		author := userOf(r)
		s.complete.Add(1)
		time.AfterFunc(s.delay, func() {
			defer s.complete.Done()
			s.smu.Lock()
			for _, f := range s.followers[author] {
				s.logs[f] = append(s.logs[f], p.ID)
			}
			s.cond.Broadcast()
			s.smu.Unlock()
		})
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	case r.URL.Path == "/api/feed/stream":
		s.stream(w, r)
	default:
		s.fakeAPI.ServeHTTP(w, r)
	}
}

func (s *streamAPI) stream(w http.ResponseWriter, r *http.Request) {
	u := userOf(r)
	s.smu.Lock()
	from := len(s.logs[u]) // a new stream starts at the top
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		s.resumes++
		n, err := strconv.Atoi(strings.TrimPrefix(last, strconv.FormatInt(u, 10)+"-"))
		if err != nil || n > len(s.logs[u]) {
			s.badIDs++
		}
		from = n
	}
	s.smu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, ":stream\n\n")
	w.(http.Flusher).Flush()
	go func() { // wake the wait below when the client goes
		<-r.Context().Done()
		s.smu.Lock()
		s.cond.Broadcast()
		s.smu.Unlock()
	}()
	for sentHere := 0; ; {
		s.smu.Lock()
		for from >= len(s.logs[u]) && r.Context().Err() == nil && !s.closed {
			s.cond.Wait()
		}
		if r.Context().Err() != nil || s.closed {
			s.smu.Unlock()
			return
		}
		id := s.logs[u][from]
		from++
		s.sent++
		s.smu.Unlock()
		fmt.Fprintf(w, "id: %d-%d\nevent: post\ndata: {\"id\":\"%s\",\"authorId\":\"1\"}\n\n", u, from, id)
		if sentHere++; sentHere == 2 {
			fmt.Fprint(w, "retry: 10\n: replaced\n\n")
			return
		}
		w.(http.Flusher).Flush()
	}
}

// TestPostToStreamFromThe201: against a server whose posts reach the
// followers' streams 200 ms after their 201 and that ends every stream
// after two events, every (post, follower with a stream) pair is timed
// from the 201, none is missed or doubled across the reconnections, a
// celebrity's posts are apart, the probes poll stream holders (paired),
// and the report carries it all.
func TestPostToStreamFromThe201(t *testing.T) {
	t.Parallel()
	const delay = 200 * time.Millisecond
	// 12 follows 1 and 3 but holds no stream (--streams 2 of 3 readers).
	followers := map[int64][]int64{1: {10, 11, 12}, 2: {10}, 3: {11, 12}}
	api := newStreamAPI(delay, followers)
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		api.complete.Wait()
		api.smu.Lock()
		api.closed = true
		api.cond.Broadcast()
		api.smu.Unlock()
		srv.Close()
	})
	pop := &Population{
		Authors:   []int64{1, 2, 3},
		Followers: map[int64]int64{1: 3, 2: 1, 3: 2},
		Readers:   []int64{10, 11, 12},
		Watchers:  followers,
		Churners:  []int64{20},
		Following: map[int64][]int64{},
	}
	cfg := Config{BaseURL: srv.URL, Duration: 2 * time.Second, Rate: 20, Clients: 8, ReadRatio: -1, PostShare: 1,
		RepostShare: -1, ReplyShare: -1, LikeShare: -1, Streams: 2, CelebrityThreshold: 2,
		VisibleRate: 1e9, PollInterval: 5 * time.Millisecond, VisibleTimeout: 5 * time.Second, BaselineDuration: -1, SampleEvery: 200 * time.Millisecond}
	r, err := New(cfg, pop, func(u int64) string { return "token-" + strconv.FormatInt(u, 10) }, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := rep.Mixed
	s := m.Streams
	if m.ErrorCount != 0 || s == nil || len(s.Errors) != 0 {
		t.Fatalf("errors: %v; streams %+v", m.Errors, s)
	}
	if s.Streams != 2 || s.Opened != 2 {
		t.Errorf("%d streams, %d opened, want 2 and 2", s.Streams, s.Opened)
	}
	// Every post's followers with a stream: author 1 -> 10, 11; 2 -> 10;
	// 3 (a celebrity at the threshold of 2) -> 11.
	var want, wantCeleb int64
	api.mu.Lock()
	posts := len(api.posts)
	api.mu.Unlock()
	if posts < 30 || s.Posts != int64(posts) {
		t.Fatalf("%d posts expected on streams of %d written: want every post, at least 30", s.Posts, posts)
	}
	want = s.PostToStream.Count + s.Celebrity.Count
	if s.Expected != want || s.Missing != 0 || s.Late != 0 || s.Duplicates != 0 || s.OtherEvents != 0 {
		t.Errorf("expected %d, arrived %d, missing %d, duplicates %d, other %d: want every pair once",
			s.Expected, want, s.Missing, s.Duplicates, s.OtherEvents)
	}
	wantCeleb = s.Celebrity.Count
	if wantCeleb == 0 || s.PostToStream.Count == 0 {
		t.Errorf("%d celebrity and %d other arrivals: want both", wantCeleb, s.PostToStream.Count)
	}
	api.smu.Lock()
	sent, resumes, bad := api.sent, api.resumes, api.badIDs
	api.smu.Unlock()
	if int64(sent) != s.Events["post"] || s.Events["post"] != s.Expected {
		t.Errorf("server sent %d events, client counted %d, expected %d", sent, s.Events["post"], s.Expected)
	}
	if s.Dropped < 5 || s.Reconnected != int64(resumes) || bad != 0 || s.Reconnected < s.Dropped-2 {
		t.Errorf("dropped %d, reconnected %d, server saw %d resumes (%d with a wrong id): want every drop resumed with the last id",
			s.Dropped, s.Reconnected, resumes, bad)
	}
	// Timed from the 201: at least about the delay (the server starts it
	// before its 201 is written), and the late posts far below their
	// time since the start of the run.
	if s.PostToStream.P50 < msOf(delay)/2 || s.Celebrity.P50 < msOf(delay)/2 {
		t.Errorf("post-to-stream p50 %.1f ms, celebrities %.1f: before the server sent them (%v)", s.PostToStream.P50, s.Celebrity.P50, delay)
	}
	if s.PostToStream.P50 > msOf(delay)+300 {
		t.Errorf("post-to-stream p50 %.1f ms: measured from the start of the run, not from the 201?", s.PostToStream.P50)
	}
	// Every probed post (authors 1 and 2) polled a stream holder.
	if p := s.Paired; p == nil || p.Count != m.PostToVisible.Count || p.Count == 0 {
		t.Errorf("paired %+v, %d probes: want every probe paired", s.Paired, m.PostToVisible.Count)
	}
	// The per-second medians: every second that wrote a post has one.
	for _, p := range m.PerSecond[:len(m.PerSecond)-1] {
		if p.Posts > 0 && p.StreamP50 < msOf(delay)/2 {
			t.Errorf("second %d: %d posts, post-to-stream p50 %.1f ms", p.Second, p.Posts, p.StreamP50)
		}
	}
	var sb strings.Builder
	rep.WriteTable(&sb)
	for _, line := range []string{"post-to-stream (201 -> event)", "the same, celebrities' posts", "live streams: 2 asked, 2 open at the start",
		"the probed (post, follower) pairs"} {
		if !strings.Contains(sb.String(), line) {
			t.Errorf("table lacks %q:\n%s", line, sb.String())
		}
	}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := rep.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	var back Report
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &back); err != nil || back.Mixed.Streams == nil || back.Mixed.Streams.PostToStream != s.PostToStream {
		t.Fatalf("JSON round trip of the streams: %v", err)
	}
}
