package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedco/feed/api"
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

func startInstance(t *testing.T, s *system, cfg api.Config) *streamInstance {
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
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	t.Cleanup(srv.CloseStreams) // before hs.Close, which waits for the streams
	in := &streamInstance{system: &system{System: s.System, pol: s.pol, signer: s.signer, baseURL: hs.URL, http: s.http}, srv: srv}
	return in
}

// sseEvent is one server-sent event as a client parses it.
type sseEvent struct {
	ID, Type, Data string
	Retry          string // a retry: field
	Comment        string
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
func openStream(t *testing.T, base, tok, lastID, query string, want int) *sseClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/feed/stream"+query, nil)
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
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			if line == "" {
				c.events <- ev
				ev = sseEvent{}
				continue
			}
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "":
				ev.Comment = value
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
	}()
	t.Cleanup(c.close)
	return c
}

func (c *sseClient) close() {
	c.cancel()
	_ = c.resp.Body.Close()
	<-c.done
}

// next returns the next event that is not a comment, waiting at most
// timeout (a bound on a test that would hang, not a timing assertion).
func (c *sseClient) next(t *testing.T, timeout time.Duration) sseEvent {
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
func streamPost(t *testing.T, ev sseEvent) apiPost {
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
func TestStreamAcrossInstances(t *testing.T) {
	t.Parallel()
	// The projectors read who is online at every push, and instance 1's
	// streams read only when woken up (no read after their start, no
	// follow-up read): what they receive came through Pub/Sub.
	pol := policies{CelebrityThreshold: 3, InboxMax: 50, InboxTrimSlack: 5, TimelineMax: 50, BackfillPosts: 10,
		FanoutBatch: 10, CacheTTL: 300 * time.Millisecond, RefreshSettle: 2 * time.Second, OnlineRefresh: -1}
	s := startSystem(t, pol)
	s.StartProjectors(t) // a second projector set, in the same groups
	one := startInstance(t, s, api.Config{StreamStartRead: time.Hour, StreamFollowUp: time.Hour})
	two := startInstance(t, s, api.Config{})
	ctx := context.Background()
	newUser := func(name string) (int64, string) {
		var u apiUser
		if err := two.call(ctx, http.MethodPost, "/api/users", "", "", map[string]string{"name": name}, &u, http.StatusCreated, nil); err != nil {
			t.Fatal(err)
		}
		id, _ := strconv.ParseInt(u.ID, 10, 64)
		return id, s.signer.Sign(id, time.Hour)
	}
	post := func(tok, content string) apiPost {
		var p apiPost
		if err := two.call(ctx, http.MethodPost, "/api/posts", tok, "", map[string]string{"content": content}, &p, http.StatusCreated, nil); err != nil {
			t.Fatal(err)
		}
		return p
	}
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
