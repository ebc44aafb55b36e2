package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/auth"
	"github.com/feedco/feed/live"
	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/testkit/testenv"
)

// streamInstance is one more API process on the system's stores: its own
// query side, live streams hub and HTTP server.
type streamInstance struct {
	*system // its call goes to this instance
	srv     *api.Server
}

func startInstance(t testing.TB, s *system, cfg api.Config) *streamInstance {
	t.Helper()
	return startInstanceOn(t, s, cfg, nil)
}

// startInstanceOn is startInstance with its listener wrapped by wrap
// (when not nil).
func startInstanceOn(t testing.TB, s *system, cfg api.Config, wrap func(net.Listener) net.Listener) *streamInstance {
	t.Helper()
	feed, err := queries.New(queries.Config{Keys: s.Keys, InboxMax: s.pol.InboxMax,
		CelebrityThreshold: s.pol.CelebrityThreshold, CelebrityCacheTTL: s.pol.CacheTTL,
		RefreshSettle: s.pol.RefreshSettle, TimelineCacheSize: queries.MaxLimit + 1,
		Registerer: prometheus.NewRegistry(), Logger: s.Log}, s.DB.Pool, s.Redis)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Start(t, feed.Service())
	hub, err := live.NewHub(live.HubConfig{Keys: s.Keys, Logger: s.Log}, s.Redis)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Start(t, hub.Service())
	users, err := auth.NewUsers(s.DB.Pool, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RequestTimeout = 30 * time.Second
	srv, err := api.New(cfg, api.Deps{Commands: s.Commands, Tokens: s.signer, Users: users, Feed: feed, Streams: hub, Logger: s.Log})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv.Handler())
	if wrap != nil {
		hs.Listener = wrap(hs.Listener)
	}
	hs.Start()
	t.Cleanup(hs.Close)
	t.Cleanup(srv.CloseStreams) // before hs.Close, which waits for the streams
	in := &streamInstance{system: &system{System: s.System, pol: s.pol, signer: s.signer, baseURL: hs.URL, http: s.http}, srv: srv}
	return in
}

// sseEvent is one server-sent event as a client parses it.
type sseEvent struct {
	ID, Type, Data string
	Retry          string // a retry: field
	Comment        bool   // a comment line (a heartbeat when Text is empty)
	Text           string // the comment's text
}

// sseClient reads one stream's events into a channel.
type sseClient struct {
	resp   *http.Response
	events chan sseEvent
	cancel context.CancelFunc
	done   chan struct{}
}

// openStream opens GET /api/feed/stream on base with tok, and lastID as
// Last-Event-ID when not empty; want is the expected status.
func openStream(t testing.TB, base, tok, lastID, query string, want int) *sseClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	path := "/api/feed/stream"
	if strings.HasPrefix(query, "/") { // another stream's path
		path, query = query, ""
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != want {
		cancel()
		_ = resp.Body.Close()
		t.Fatalf("stream: status %d, want %d", resp.StatusCode, want)
	}
	c := &sseClient{resp: resp, events: make(chan sseEvent, 1024), cancel: cancel, done: make(chan struct{})}
	if want != http.StatusOK {
		return c
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("stream Content-Type %q", ct)
	}
	go func() {
		defer close(c.done)
		defer close(c.events)
		readSSE(resp.Body, func(ev sseEvent) { c.events <- ev })
	}()
	t.Cleanup(c.close)
	return c
}

// readSSE parses server-sent events from r until it ends, calling emit
// with each complete one (a blank line ends an event; one cut short is
// dropped).
func readSSE(r io.Reader, emit func(sseEvent)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			emit(ev)
			ev = sseEvent{}
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "":
			ev.Comment, ev.Text = true, value
		case "id":
			ev.ID = value
		case "event":
			ev.Type = value
		case "data":
			ev.Data = value
		case "retry":
			ev.Retry = value
		}
	}
}

func (c *sseClient) close() {
	c.cancel()
	_ = c.resp.Body.Close()
	<-c.done
}

// next returns the next event that is not a comment, waiting at most
// timeout (a bound on a test that would hang, not a timing assertion).
func (c *sseClient) next(t testing.TB, timeout time.Duration) sseEvent {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				t.Fatal("stream ended")
			}
			if ev.Type == "" && ev.Data == "" {
				continue // a comment, a retry hint
			}
			return ev
		case <-deadline:
			t.Fatalf("no stream event within %v", timeout)
		}
	}
}

// streamPost decodes a post or edit event's item.
func streamPost(t testing.TB, ev sseEvent) apiPost {
	t.Helper()
	var p apiPost
	if err := json.Unmarshal([]byte(ev.Data), &p); err != nil {
		t.Fatalf("event %s data %q: %v", ev.Type, ev.Data, err)
	}
	return p
}

// TestStreamAcrossInstances: two API instances (each its own query side,
// hub and HTTP server) and two projector sets (each in the same consumer
// groups) on the same stores. A client streaming from instance 1 receives
// a followee's post made through instance 2; it disconnects, misses N
// posts, an edit and a delete of posts it had, reconnects with
// Last-Event-ID and gets exactly those, in order, then live ones.
//
// On Redis Cluster too ("cluster", hijacked): the wake-ups go through
// sharded Pub/Sub, one subscription per node, each channel on its slot's
// node.
func TestStreamAcrossInstances(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name              string
		hijacked, cluster bool
	}{{"goroutine", false, false}, {"hijacked", true, false}, {"cluster", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testStreamAcrossInstances(t, c.hijacked, c.cluster)
		})
	}
}

func testStreamAcrossInstances(t *testing.T, hijacked, cluster bool) {
	// The projectors read who is online at every push, and instance 1's
	// streams read only when woken up (no read after their start): what
	// they receive came through Pub/Sub.
	pol := policies{CelebrityThreshold: 3, InboxMax: 50, InboxTrimSlack: 5, TimelineMax: 50, BackfillPosts: 10,
		FanoutBatch: 10, CacheTTL: 300 * time.Millisecond, RefreshSettle: 2 * time.Second, OnlineRefresh: -1,
		RedisCluster: cluster}
	s := startSystem(t, pol)
	s.StartProjectors(t) // a second projector set, in the same groups
	one := startInstance(t, s, api.Config{StreamStartRead: time.Hour, StreamsHijacked: hijacked})
	two := startInstance(t, s, api.Config{})
	ctx := context.Background()
	newUser := func(name string) (int64, string) { return newUserOn(t, two.system, name) }
	post := func(tok, content string) apiPost { return postAs(t, two.system, tok, content) }
	reader, rtok := newUser("reader")
	author, atok := newUser("author")
	_, stok := newUser("stranger")
	follow := func(tok string, who int64) {
		if err := two.call(ctx, http.MethodPut, fmt.Sprint("/api/following/", who), tok, "", nil, nil, http.StatusNoContent, nil); err != nil {
			t.Fatal(err)
		}
	}
	follow(rtok, author)
	star, startok := newUser("star") // a celebrity: pulled, not pushed
	follow(rtok, star)
	for i := range 2 {
		_, tok := newUser(fmt.Sprint("fan", i))
		follow(tok, star)
	}
	old := post(atok, "before the stream")
	s.quiesce(t, 2*time.Minute)
	_ = reader

	c := openStream(t, one.baseURL, rtok, "", "", http.StatusOK)
	// Not replayed: the stream starts at the top.
	p1 := post(atok, "live 1")
	post(stok, "a stranger's post: never in the reader's stream")
	p2 := post(atok, "live 2")
	var lastID string
	for _, want := range []apiPost{p1, p2} {
		ev := c.next(t, time.Minute)
		if got := streamPost(t, ev); ev.Type != "post" || got.ID != want.ID || got.Content != want.Content {
			t.Fatalf("live event %s %+v, want post %+v", ev.Type, got, want)
		}
		lastID = ev.ID
	}
	// A celebrity's post wakes the stream through the author's channel.
	cp := post(startok, "a celebrity's post")
	for _, want := range []apiPost{cp} {
		ev := c.next(t, time.Minute)
		if got := streamPost(t, ev); ev.Type != "post" || got.ID != want.ID || got.Content != want.Content {
			t.Fatalf("live event %s %+v, want post %+v", ev.Type, got, want)
		}
		lastID = ev.ID
	}
	c.close()

	// Missed while disconnected: N posts, an edit of a post it had, a
	// delete of another.
	const n = 5
	var missed []apiPost
	for i := range n {
		missed = append(missed, post(atok, fmt.Sprint("missed ", i)))
	}
	if err := two.call(ctx, http.MethodPatch, "/api/posts/"+p1.ID, atok, "", map[string]string{"content": "live 1, edited"}, nil, http.StatusOK, nil); err != nil {
		t.Fatal(err)
	}
	if err := two.call(ctx, http.MethodDelete, "/api/posts/"+p2.ID, atok, "", nil, nil, http.StatusNoContent, nil); err != nil {
		t.Fatal(err)
	}
	if err := two.call(ctx, http.MethodDelete, "/api/posts/"+old.ID, atok, "", nil, nil, http.StatusNoContent, nil); err != nil {
		t.Fatal(err) // shown before the stream began: not the stream's to tell
	}
	s.quiesce(t, 2*time.Minute)

	c = openStream(t, one.baseURL, rtok, lastID, "", http.StatusOK)
	for _, want := range missed {
		ev := c.next(t, time.Minute)
		if got := streamPost(t, ev); ev.Type != "post" || got.ID != want.ID {
			t.Fatalf("resumed event %s %q, want post %s (%s)", ev.Type, ev.Data, want.ID, want.Content)
		}
	}
	ev := c.next(t, time.Minute)
	if got := streamPost(t, ev); ev.Type != "edit" || got.ID != p1.ID || got.Content != "live 1, edited" {
		t.Fatalf("resumed event %s %q, want the edit of %s", ev.Type, ev.Data, p1.ID)
	}
	ev = c.next(t, time.Minute)
	if ev.Type != "delete" || ev.Data != `{"id":"`+p2.ID+`"}` {
		t.Fatalf("resumed event %s %q, want the delete of %s", ev.Type, ev.Data, p2.ID)
	}
	// Then live: the next event is the new post (a duplicate or a late
	// event would come before it).
	p3 := post(atok, "live 3")
	ev = c.next(t, time.Minute)
	if got := streamPost(t, ev); ev.Type != "post" || got.ID != p3.ID {
		t.Fatalf("live event after the resume %s %q, want post %s", ev.Type, ev.Data, p3.ID)
	}
	if n := one.srv.OpenStreams(); n != 1 {
		t.Fatalf("instance 1 has %d open streams, want 1", n)
	}
}

// TestStreamResumesFromItsOpening: a connection opens with its position
// as an id without data (EventSource's last event id from then on), so a
// client whose connection ends before its first event resumes from where
// it opened: it receives what came meanwhile, not the top of the moment
// it reconnects. Both stream kinds, both serving modes.
func TestStreamResumesFromItsOpening(t *testing.T) {
	t.Parallel()
	eachServingMode(t, testStreamResumesFromItsOpening)
}

func testStreamResumesFromItsOpening(t *testing.T, hijacked bool) {
	s := startSystem(t, streamPolicies())
	in := startInstance(t, s, api.Config{StreamsHijacked: hijacked})
	reader, rtok, _, atok := streamUsers(t, in)
	ctx := context.Background()
	post := func(content string) apiPost { return postAs(t, in.system, atok, content) }
	post("before the stream")
	s.quiesce(t, 2*time.Minute)
	opening := func(c *sseClient) string {
		t.Helper()
		select {
		case ev := <-c.events:
			if ev.ID == "" || ev.Type != "" || ev.Data != "" {
				t.Fatalf("the stream opened with %+v, want an id without an event", ev)
			}
			return ev.ID
		case <-time.After(time.Minute):
			t.Fatal("the stream sent nothing")
		}
		return ""
	}

	// The home stream: opened, closed before any event.
	c := openStream(t, in.baseURL, rtok, "", "", http.StatusOK)
	id := opening(c)
	if r, err := live.DecodeResume(id); err != nil || r.B != r.B0 || len(r.Sent) != 0 {
		t.Fatalf("the opening id %q: %+v, %v, want a position with nothing sent", id, r, err)
	}
	c.close()
	var missed []apiPost
	for i := range 3 {
		missed = append(missed, post(fmt.Sprint("while away ", i)))
	}
	s.quiesce(t, 2*time.Minute)
	c = openStream(t, in.baseURL, rtok, id, "", http.StatusOK)
	if again := opening(c); again != id {
		t.Fatalf("a resumed stream opened with %q, want its Last-Event-ID %q", again, id)
	}
	for _, want := range missed {
		ev := c.next(t, time.Minute)
		if got := streamPost(t, ev); ev.Type != "post" || got.ID != want.ID {
			t.Fatalf("resumed event %s %q, want post %s (%s)", ev.Type, ev.Data, want.ID, want.Content)
		}
	}
	live1 := post("live")
	if ev := c.next(t, time.Minute); ev.Type != "post" || streamPost(t, ev).ID != live1.ID {
		t.Fatalf("live event %s %q, want post %s", ev.Type, ev.Data, live1.ID)
	}
	c.close()

	// The notifications stream: opened, closed before any event.
	n := openStream(t, in.baseURL, rtok, "", "/api/notifications/stream", http.StatusOK)
	nid := opening(n)
	if err := live.CheckNotifID(nid); err != nil {
		t.Fatalf("the notifications stream opened with %q: %v", nid, err)
	}
	n.close()
	var fans []string
	for i := range 2 {
		_, tok := newUserOn(t, in.system, fmt.Sprint("fan ", i))
		if err := in.call(ctx, http.MethodPut, fmt.Sprint("/api/following/", reader), tok, "", nil, nil, http.StatusNoContent, nil); err != nil {
			t.Fatal(err)
		}
		fans = append(fans, fmt.Sprint("fan ", i))
	}
	s.quiesce(t, 2*time.Minute)
	n = openStream(t, in.baseURL, rtok, nid, "/api/notifications/stream", http.StatusOK)
	for _, want := range fans {
		ev := n.next(t, time.Minute)
		var got struct {
			Type  string `json:"type"`
			Actor struct {
				Name string `json:"name"`
			} `json:"actor"`
		}
		if ev.Type != "notification" || json.Unmarshal([]byte(ev.Data), &got) != nil || got.Type != "follow" || got.Actor.Name != want {
			t.Fatalf("resumed event %s %q, want the follow of %s", ev.Type, ev.Data, want)
		}
	}
}

// streamPolicies is the stream tests' policy: a celebrity threshold none
// of their users reaches, inboxes and timelines of 50, a 2 s settling
// window.
func streamPolicies() policies {
	return policies{CelebrityThreshold: 1000, InboxMax: 50, InboxTrimSlack: 5, TimelineMax: 50, BackfillPosts: 10,
		FanoutBatch: 10, CacheTTL: 300 * time.Millisecond, RefreshSettle: 2 * time.Second}
}

// onlineAtEveryPush is p with the projectors reading who is online at
// every push (OnlineRefresh -1), not from a list refreshed now and then.
func (p policies) onlineAtEveryPush() policies {
	p.OnlineRefresh = -1
	return p
}

// postAs posts content as tok's user through s and returns the post.
func postAs(t testing.TB, s *system, tok, content string) apiPost {
	t.Helper()
	var p apiPost
	if err := s.call(context.Background(), http.MethodPost, "/api/posts", tok, "", map[string]string{"content": content}, &p, http.StatusCreated, nil); err != nil {
		t.Fatal(err)
	}
	return p
}

// streamUsers makes a reader following an author, through in, and
// returns their ids and tokens.
func streamUsers(t testing.TB, in *streamInstance) (reader int64, rtok string, author int64, atok string) {
	t.Helper()
	ctx := context.Background()
	newUser := func(name string) (int64, string) { return newUserOn(t, in.system, name) }
	reader, rtok = newUser("reader")
	author, atok = newUser("author")
	if err := in.call(ctx, http.MethodPut, fmt.Sprint("/api/following/", author), rtok, "", nil, nil, http.StatusNoContent, nil); err != nil {
		t.Fatal(err)
	}
	return reader, rtok, author, atok
}

// counter reads a counter of reg by name and label value ("" for none).
func counter(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" || len(m.GetLabel()) > 0 && m.GetLabel()[0].GetValue() == label {
				if m.GetCounter() != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// smallBuffers returns a listener on loopback whose sockets have small
// send buffers (set before listen, so accepted sockets inherit them and
// the kernel does not grow them), so that a client that does not read
// blocks the server's writes after a few KB.
func smallBuffers(t *testing.T) func(net.Listener) net.Listener {
	return func(old net.Listener) net.Listener {
		_ = old.Close()
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) {
				_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4096)
			})
		}}
		l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

// smallReadDialer dials with a small receive buffer, set before connect.
var smallReadDialer = net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
	return c.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
	})
}}

// eachServingMode runs test as parallel subtests, one for each way a
// stream is served: from its request's goroutine and hijacked.
func eachServingMode(t *testing.T, test func(t *testing.T, hijacked bool)) {
	for _, hijacked := range []bool{false, true} {
		t.Run(map[bool]string{false: "goroutine", true: "hijacked"}[hijacked], func(t *testing.T) {
			t.Parallel()
			test(t, hijacked)
		})
	}
}

// TestStreamSlowClientCutOff: a client that does not read while its
// stream catches up on many entries blocks the server's writes past their
// deadline and is cut off; the last whole event it had is its resume
// point: a reconnection with it receives exactly the rest.
func TestStreamSlowClientCutOff(t *testing.T) {
	t.Parallel()
	eachServingMode(t, testStreamSlowClientCutOff)
}

func testStreamSlowClientCutOff(t *testing.T, hijacked bool) {
	s := startSystem(t, policies{CelebrityThreshold: 1000, InboxMax: 200, InboxTrimSlack: 10, TimelineMax: 200, BackfillPosts: 10,
		FanoutBatch: 10, CacheTTL: 300 * time.Millisecond, RefreshSettle: 2 * time.Second})
	in := startInstanceOn(t, s, api.Config{StreamWriteTimeout: 300 * time.Millisecond, StreamsHijacked: hijacked},
		smallBuffers(t))
	_, rtok, _, atok := streamUsers(t, in)
	post := func(content string) apiPost { return postAs(t, in.system, atok, content) }
	anchor := post("anchor")
	var posts []apiPost
	for i := range 120 {
		posts = append(posts, post(fmt.Sprintf("%04d %s", i, strings.Repeat("x", 1900))))
	}
	s.quiesce(t, 2*time.Minute)

	// A client that resumes from the anchor and reads nothing, on a
	// socket with a small receive buffer.
	ms := postMs(t, anchor)
	id, _ := strconv.ParseInt(anchor.ID, 10, 64)
	from := live.Resume{B: events.FeedKey{Ms: ms, ID: id}, B0: events.FeedKey{Ms: ms, ID: id}}.Encode()
	conn, err := smallReadDialer.Dial("tcp", strings.TrimPrefix(in.baseURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /api/feed/stream HTTP/1.1\r\nHost: feed\r\nAuthorization: Bearer %s\r\nLast-Event-ID: %s\r\n\r\n", rtok, from)
	reg := in.srv.Registry()
	testenv.Eventually(t, time.Minute, "the slow client to be cut off", func() bool {
		return counter(t, reg, "feed_stream_cutoffs_total", "slow") == 1
	})
	if n := in.srv.OpenStreams(); n != 0 {
		t.Fatalf("%d streams open after the cut-off", n)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []sseEvent
	readSSE(resp.Body, func(ev sseEvent) {
		if ev.Type != "" {
			got = append(got, ev)
		}
	})
	if len(got) == 0 || len(got) >= len(posts) {
		t.Fatalf("the slow client got %d of %d events before the cut-off", len(got), len(posts))
	}
	cut := len(got)
	c := openStream(t, in.baseURL, rtok, got[len(got)-1].ID, "", http.StatusOK)
	for len(got) < len(posts) {
		got = append(got, c.next(t, time.Minute))
	}
	for i, ev := range got {
		if p := streamPost(t, ev); ev.Type != "post" || p.ID != posts[i].ID {
			t.Fatalf("event %d: %s %s, want post %s", i, ev.Type, p.ID, posts[i].ID)
		}
	}
	// Nothing more: the next event is a new post.
	last := post("after")
	if ev := c.next(t, time.Minute); streamPost(t, ev).ID != last.ID {
		t.Fatalf("after the resume: %s %q, want post %s", ev.Type, ev.Data, last.ID)
	}
	t.Logf("cut off after %d of %d events; the rest came on the resumed stream", cut, len(posts))
}

// TestStreamBoundsHeartbeatShutdown: a user's third stream ends the
// first (with a retry hint); a process at its bound refuses a stream with
// 503 and Retry-After; an idle stream gets heartbeats; the server's
// shutdown ends every stream with a retry hint and refuses new ones.
func TestStreamBoundsHeartbeatShutdown(t *testing.T) {
	t.Parallel()
	eachServingMode(t, testStreamBoundsHeartbeatShutdown)
}

func testStreamBoundsHeartbeatShutdown(t *testing.T, hijacked bool) {
	s := startSystem(t, streamPolicies())
	in := startInstance(t, s, api.Config{StreamsPerUser: 2, StreamsMax: 3, StreamHeartbeat: 50 * time.Millisecond, StreamsHijacked: hijacked})
	_, rtok, _, atok := streamUsers(t, in)
	ended := func(c *sseClient, why string) {
		t.Helper()
		retry := false
		for ev := range c.events { // until the server closes it
			if ev.Retry != "" && ev.Comment && ev.Text == why {
				retry = true
			}
		}
		if !retry {
			t.Fatalf("a stream ended (%s) without a retry hint", why)
		}
	}
	a := openStream(t, in.baseURL, rtok, "", "", http.StatusOK)
	b := openStream(t, in.baseURL, rtok, "", "", http.StatusOK)
	c := openStream(t, in.baseURL, rtok, "", "", http.StatusOK)
	ended(a, "replaced")

	// An idle stream's heartbeats.
	for beats := 0; beats < 3; {
		select {
		case ev := <-b.events:
			if ev.Comment && ev.Text == "" && ev.Type == "" {
				beats++
			}
		case <-time.After(time.Minute):
			t.Fatal("no heartbeat")
		}
	}

	// The process's bound: two of the reader's and one of the author's.
	d := openStream(t, in.baseURL, atok, "", "", http.StatusOK)
	e := openStream(t, in.baseURL, atok, "", "", http.StatusServiceUnavailable)
	if e.resp.Header.Get("Retry-After") == "" || e.resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("a stream past the bound: %v", e.resp.Header)
	}
	if n := in.srv.OpenStreams(); n != 3 {
		t.Fatalf("%d open streams, want 3", n)
	}

	// Shutdown.
	in.srv.CloseStreams()
	for _, x := range []*sseClient{b, c, d} {
		ended(x, "shutdown")
	}
	openStream(t, in.baseURL, rtok, "", "", http.StatusServiceUnavailable)
	reg := in.srv.Registry()
	for reason, want := range map[string]float64{"replaced": 1, "shutdown": 3, "slow": 0} {
		if got := counter(t, reg, "feed_stream_cutoffs_total", reason); got != want {
			t.Errorf("cut-offs %s: %v, want %v", reason, got, want)
		}
	}
	if got := counter(t, reg, "feed_streams_refused_total", ""); got != 2 {
		t.Errorf("refused streams: %v, want 2", got)
	}
	if got := counter(t, reg, "feed_stream_events_total", "heartbeat"); got < 3 {
		t.Errorf("heartbeats counted: %v, want at least 3", got)
	}
}

// streamPage is the browser test's page: it opens the home stream with
// EventSource and reports to the test server what it sees (the stream's
// opens and each post's content and event id).
const streamPage = `<!doctype html>
<html><head><title>stream</title></head><body><ul id="posts"></ul><script>
const report = (q) => fetch('/test/log?' + new URLSearchParams(q));
const es = new EventSource('/api/feed/stream');
let opens = 0;
es.onopen = () => { opens++; report({e: 'open', n: opens}); };
es.addEventListener('post', (m) => {
  const p = JSON.parse(m.data);
  const li = document.createElement('li');
  li.textContent = p.content;
  document.getElementById('posts').appendChild(li);
  report({e: 'post', content: p.content, id: m.lastEventId});
});
es.onerror = () => report({e: 'error', state: es.readyState});
</script></body></html>`

// TestStreamInChromium (hijacked streams, the default): headless Chromium opens the home stream with
// EventSource (behind a gateway that adds the reader's Authorization, as
// EventSource sends no header of its own but Last-Event-ID), sees a post
// arrive, and, when the server ends the stream (the reader opened one
// stream more than FEED_STREAMS_PER_USER), reconnects by itself with
// Last-Event-ID and receives the post made meanwhile: once before any
// event (the id the stream opened with), once after one.
func TestStreamInChromium(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed: `bash scripts/prepare.sh` installs Debian's chromium as root (apt-get install chromium)")
	}
	t.Parallel()
	s := startSystem(t, streamPolicies())
	in := startInstance(t, s, api.Config{StreamsPerUser: 1, StreamRetry: 200 * time.Millisecond, StreamsHijacked: true})
	_, rtok, _, atok := streamUsers(t, in)
	ctx := context.Background()
	post := func(content string) { postAs(t, in.system, atok, content) }

	logs := make(chan url.Values, 100)
	var lastIDs []string   // the Last-Event-ID of each stream request
	var gate chan struct{} // when set, the next stream request waits until it is closed
	var mu sync.Mutex
	target, _ := url.Parse(in.baseURL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1 // stream as it comes
	mux := http.NewServeMux()
	mux.HandleFunc("/test/page.html", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, streamPage)
	})
	mux.HandleFunc("/test/log", func(w http.ResponseWriter, r *http.Request) {
		logs <- r.URL.Query()
	})
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
		g := gate
		gate = nil
		mu.Unlock()
		if g != nil {
			<-g
		}
		r.Header.Set("Authorization", "Bearer "+rtok) // the gateway's part
		proxy.ServeHTTP(w, r)
	})
	gw := httptest.NewServer(mux)
	t.Cleanup(gw.Close)

	bctx, stop := context.WithCancel(ctx)
	cmd := exec.CommandContext(bctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--user-data-dir="+t.TempDir(), gw.URL+"/test/page.html")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(); _ = cmd.Wait() })
	// The page's reports are requests of their own and may arrive out of
	// order (a post before the open that preceded it): next takes the
	// first report of its kind, keeping the others for later calls.
	var held []url.Values
	next := func(what string) url.Values {
		t.Helper()
		for i, v := range held {
			if v.Get("e") == what {
				held = slices.Delete(held, i, i+1)
				return v
			}
		}
		for {
			select {
			case v := <-logs:
				t.Logf("page: %v", v)
				if v.Get("e") == what {
					return v
				}
				held = append(held, v)
			case <-time.After(time.Minute):
				t.Fatalf("the page reported no %s", what)
			}
		}
	}
	next("open")

	// Before any event, the server ends the page's stream (the reader
	// opens another one); the page's reconnection waits at the gateway
	// until a post made meanwhile is projected: it resumes from where the
	// stream opened, so the post comes.
	g := make(chan struct{})
	mu.Lock()
	gate = g
	mu.Unlock()
	openStream(t, in.baseURL, rtok, "", "", http.StatusOK)
	next("error") // the page's stream ended
	post("zero, while away")
	s.quiesce(t, 2*time.Minute)
	close(g)
	if v := next("open"); v.Get("n") != "2" {
		t.Fatalf("the page reopened: %v", v)
	}
	if v := next("post"); v.Get("content") != "zero, while away" {
		t.Fatalf("after a reconnection before any event the page got %v", v)
	}

	post("first, live")
	first := next("post")
	if first.Get("content") != "first, live" || first.Get("id") == "" {
		t.Fatalf("the page got %v", first)
	}

	// The server ends the page's stream: the reader opens another one.
	other := openStream(t, in.baseURL, rtok, "", "", http.StatusOK)
	post("second, while reconnecting")
	if v := next("open"); v.Get("n") != "3" {
		t.Fatalf("the page reopened: %v", v)
	}
	second := next("post")
	if second.Get("content") != "second, while reconnecting" {
		t.Fatalf("after the reconnection the page got %v", second)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lastIDs) < 3 || lastIDs[0] != "" || lastIDs[len(lastIDs)-1] != first.Get("id") {
		t.Fatalf("the page's stream requests carried Last-Event-ID %q, want none, the opening's, then %q", lastIDs, first.Get("id"))
	}
	if r, err := live.DecodeResume(lastIDs[1]); err != nil || r.B != r.B0 || len(r.Sent) != 0 {
		t.Fatalf("the page's first reconnection carried %q (%+v, %v), want the position its stream opened with; all: %q", lastIDs[1], r, err, lastIDs)
	}
	_ = other
}

// TestNotificationsStream: a client streaming its notifications from
// instance 1 receives a follow made through instance 2 (the projectors'
// notifier publishes wake:n:{u}); it disconnects, misses two more
// follows, reconnects with Last-Event-ID and gets exactly those,
// in order, then a live one.
func TestNotificationsStream(t *testing.T) {
	t.Parallel()
	s := startSystem(t, streamPolicies().onlineAtEveryPush())
	one := startInstance(t, s, api.Config{StreamStartRead: time.Hour, StreamsHijacked: true})
	two := startInstance(t, s, api.Config{})
	ctx := context.Background()
	newUser := func(name string) (int64, string) { return newUserOn(t, two.system, name) }
	do := func(method, path, tok string, body any, want int) {
		t.Helper()
		if err := two.call(ctx, method, path, tok, "", body, nil, want, nil); err != nil {
			t.Fatal(err)
		}
	}
	me, mtok := newUser("me")
	_, atok := newUser("ann")
	_, btok := newUser("ben")
	_, ctok := newUser("cid")
	_, dtok := newUser("dan")
	s.quiesce(t, 2*time.Minute)

	type note struct {
		ID    string `json:"id"`
		Type  string `json:"type"`
		Actor struct {
			Name string `json:"name"`
		} `json:"actor"`
	}
	nextNote := func(c *sseClient) (note, sseEvent) {
		t.Helper()
		ev := c.next(t, time.Minute)
		var n note
		if ev.Type != "notification" || json.Unmarshal([]byte(ev.Data), &n) != nil {
			t.Fatalf("event %s %q, want a notification", ev.Type, ev.Data)
		}
		return n, ev
	}
	c := openStream(t, one.baseURL, mtok, "", "/api/notifications/stream", http.StatusOK)
	do(http.MethodPut, fmt.Sprint("/api/following/", me), atok, nil, http.StatusNoContent)
	n, ev := nextNote(c)
	if n.Type != "follow" || n.Actor.Name != "ann" {
		t.Fatalf("live notification %+v", n)
	}
	c.close()

	do(http.MethodPut, fmt.Sprint("/api/following/", me), btok, nil, http.StatusNoContent)
	s.quiesce(t, 2*time.Minute) // ben's first, in the set's order
	do(http.MethodPut, fmt.Sprint("/api/following/", me), ctok, nil, http.StatusNoContent)
	s.quiesce(t, 2*time.Minute)

	c = openStream(t, one.baseURL, mtok, ev.ID, "/api/notifications/stream", http.StatusOK)
	for _, want := range []string{"ben", "cid"} {
		if n, _ := nextNote(c); n.Type != "follow" || n.Actor.Name != want {
			t.Fatalf("resumed notification %+v, want %s's follow", n, want)
		}
	}
	do(http.MethodPut, fmt.Sprint("/api/following/", me), dtok, nil, http.StatusNoContent)
	if n, _ := nextNote(c); n.Type != "follow" || n.Actor.Name != "dan" {
		t.Fatalf("live notification after the resume %+v", n)
	}
}

// TestStreamToldOfRemovals: through the whole system, a home stream that
// sent a followee's repost is told `delete` with the repost's id when
// the original (by an account the reader does not follow) is deleted;
// a notifications stream that sent a like, a repost, a follow and a
// reply is told `delete` with each one's id when it is undone (unlike,
// undone repost, unfollow, the reply deleted), live and, for one undone
// while the client was away, on the stream resumed with Last-Event-ID;
// a like added and undone while it was away is neither sent nor told.
func TestStreamToldOfRemovals(t *testing.T) {
	t.Parallel()
	s := startSystem(t, streamPolicies().onlineAtEveryPush())
	one := startInstance(t, s, api.Config{StreamsHijacked: true})
	two := startInstance(t, s, api.Config{})
	ctx := context.Background()
	newUser := func(name string) (int64, string) { return newUserOn(t, two.system, name) }
	do := func(method, path, tok string, body any, want int, out any) {
		t.Helper()
		if err := two.call(ctx, method, path, tok, "", body, out, want, nil); err != nil {
			t.Fatal(err)
		}
	}
	reader, rtok := newUser("reader")
	friendID, ftok := newUser("friend")
	_, stok := newUser("stranger")

	// The home stream: the reader follows friend only.
	do(http.MethodPut, fmt.Sprint("/api/following/", friendID), rtok, nil, http.StatusNoContent, nil)
	var orig apiPost
	do(http.MethodPost, "/api/posts", stok, map[string]string{"content": "the stranger's original"}, http.StatusCreated, &orig)
	s.quiesce(t, 2*time.Minute)

	home := openStream(t, one.baseURL, rtok, "", "", http.StatusOK)
	do(http.MethodPut, "/api/posts/"+orig.ID+"/repost", ftok, nil, http.StatusNoContent, nil)
	ev := home.next(t, time.Minute)
	rp := streamPost(t, ev)
	if ev.Type != "post" || rp.RepostOf == nil || rp.RepostOf.ID != orig.ID {
		t.Fatalf("home event %s %q, want friend's repost of %s", ev.Type, ev.Data, orig.ID)
	}
	do(http.MethodDelete, "/api/posts/"+orig.ID, stok, nil, http.StatusNoContent, nil)
	ev = home.next(t, time.Minute)
	if ev.Type != "delete" || ev.Data != `{"id":"`+rp.ID+`"}` {
		t.Fatalf("home event %s %q, want the delete of the repost %s", ev.Type, ev.Data, rp.ID)
	}
	var mark apiPost
	do(http.MethodPost, "/api/posts", ftok, map[string]string{"content": "after"}, http.StatusCreated, &mark)
	if ev = home.next(t, time.Minute); ev.Type != "post" || streamPost(t, ev).ID != mark.ID {
		t.Fatalf("home event %s %q, want the post %s (nothing else before it)", ev.Type, ev.Data, mark.ID)
	}

	// The notifications stream of the reader.
	type note struct {
		ID, Type string
	}
	nextEvent := func(c *sseClient) (string, note, sseEvent) {
		t.Helper()
		ev := c.next(t, time.Minute)
		var n note
		if err := json.Unmarshal([]byte(ev.Data), &n); err != nil {
			t.Fatalf("event %s %q: %v", ev.Type, ev.Data, err)
		}
		return ev.Type, n, ev
	}
	var mine apiPost
	do(http.MethodPost, "/api/posts", rtok, map[string]string{"content": "the reader's post"}, http.StatusCreated, &mine)
	s.quiesce(t, 2*time.Minute)
	notes := openStream(t, one.baseURL, rtok, "", "/api/notifications/stream", http.StatusOK)
	var reply apiPost
	steps := []struct {
		method, path, tok string
		body              any
		typ               string
	}{
		{http.MethodPut, "/api/posts/" + mine.ID + "/like", stok, nil, "like"},
		{http.MethodPut, "/api/posts/" + mine.ID + "/repost", stok, nil, "repost"},
		{http.MethodPut, fmt.Sprint("/api/following/", reader), stok, nil, "follow"},
		{http.MethodPost, "/api/posts", ftok, map[string]string{"content": "a reply", "replyTo": mine.ID}, "reply"},
	}
	ids := map[string]string{}
	for _, st := range steps {
		want := http.StatusNoContent
		var out any
		if st.method == http.MethodPost {
			want, out = http.StatusCreated, &reply
		}
		do(st.method, st.path, st.tok, st.body, want, out)
		typ, n, _ := nextEvent(notes)
		if typ != "notification" || n.Type != st.typ {
			t.Fatalf("notification event %s %+v, want a %s", typ, n, st.typ)
		}
		ids[st.typ] = n.ID
	}
	undo := []struct{ path, tok, typ string }{
		{"/api/posts/" + mine.ID + "/like", stok, "like"},
		{"/api/posts/" + mine.ID + "/repost", stok, "repost"},
		{fmt.Sprint("/api/following/", reader), stok, "follow"},
	}
	var lastID string
	for _, u := range undo {
		do(http.MethodDelete, u.path, u.tok, nil, http.StatusNoContent, nil)
		typ, n, ev := nextEvent(notes)
		if typ != "delete" || n.ID != ids[u.typ] {
			t.Fatalf("event %s %q after the undo of the %s, want the delete of %s", typ, ev.Data, u.typ, ids[u.typ])
		}
		lastID = ev.ID
	}
	notes.close()

	// Away: the reply deleted, a like given and taken back.
	do(http.MethodDelete, "/api/posts/"+reply.ID, ftok, nil, http.StatusNoContent, nil)
	do(http.MethodPut, "/api/posts/"+mine.ID+"/like", ftok, nil, http.StatusNoContent, nil)
	s.quiesce(t, 2*time.Minute)
	do(http.MethodDelete, "/api/posts/"+mine.ID+"/like", ftok, nil, http.StatusNoContent, nil)
	s.quiesce(t, 2*time.Minute)
	notes = openStream(t, one.baseURL, rtok, lastID, "/api/notifications/stream", http.StatusOK)
	if typ, n, ev := nextEvent(notes); typ != "delete" || n.ID != ids["reply"] {
		t.Fatalf("resumed event %s %q, want the delete of the reply's notification %s", typ, ev.Data, ids["reply"])
	}
	// Then live: the next event is the new follow's (the away like, or
	// a delete told twice, would come before it).
	do(http.MethodPut, fmt.Sprint("/api/following/", reader), ftok, nil, http.StatusNoContent, nil)
	if typ, n, ev := nextEvent(notes); typ != "notification" || n.Type != "follow" {
		t.Fatalf("live event after the resume %s %q, want the follow", typ, ev.Data)
	}
}
