package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/feedco/feed/live"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
	"github.com/feedco/feed/verify"
)

// The fault "kill -9 api, streams open": streaming clients hold a home
// feed stream and a notifications stream each through the API; the API is
// killed with SIGKILL and started again; every client reconnects with its
// Last-Event-ID, as EventSource does. After quiet, what each received
// across all its connections must be exactly its feed entries (and its
// notifications) above where it started, from PostgreSQL: each once, no
// gap, nothing foreign, the deletions (and undone notifications) of what
// it was sent applied.
//
// "Exactly" needs a feed whose rules do not depend on relations that
// change meanwhile (a follow's backfill lands below the stream's
// position; a second followee's undone repost brings an earlier one back
// below it): so the streaming users are users of their own, never actors
// of the workload, each following one account (watched: of the accounts
// the fewest follow) that the workload never has anyone follow meanwhile
// (it stays pushed, never a celebrity whose channel the stream would
// learn only at its next minute's look). The workload still likes,
// reposts, replies to and quotes the streaming users' posts and follows
// and unfollows them, and the watched accounts act a quarter of the time:
// post, reply, quote, repost (also originals later deleted), like, undo,
// delete.

// streamers is the number of streaming users.
const streamers = 3

// streamingFault is the fault with its clients: setup registers the
// streaming users and opens their streams before the phase's workload,
// check compares what they received with the truth once the oracle has
// converged, then closes them.
func streamingFault() fault {
	var set *streamSet
	return fault{
		name: "kill -9 api, streams open",
		setup: func(t *testing.T, s *suite) {
			set = openStreams(t, s)
		},
		inject: func(t *testing.T, c *cluster) {
			c.kill(roleAPI)
			time.Sleep(2 * time.Second) // the fault: the API stays down this long under the workload
			// A replacement process on the same address, with a free node
			// id (the killed one's lease runs 30 s: "kill -9 api" of the
			// full suite waits for it).
			c.mu.Lock()
			if c.anyNode == nil {
				c.anyNode = map[string]bool{}
			}
			c.anyNode[roleAPI] = true
			c.mu.Unlock()
			c.start(roleAPI)
			time.Sleep(3 * time.Second) // the workload runs this long with the clients resumed
		},
		check: func(t *testing.T, c *cluster) string {
			return set.check(t)
		},
	}
}

// streamSet is the streaming users and their clients.
type streamSet struct {
	s       *suite
	users   []int64
	homes   []*sseStream
	notes   []*sseStream
	homeAt  []int64  // the newest entry of each user's feed when its stream opened (0: none)
	notesAt []string // the newest notification's id then ("": none)
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// openStreams registers the streaming users, each following one of the
// accounts the fewest follow, each with posts of its own; waits until
// the read models have them (the oracle at zero differences); then opens
// a home and a notifications stream for each and waits until each is
// open, so that everything the workload does afterwards is above their
// start.
func openStreams(t *testing.T, s *suite) *streamSet {
	t.Helper()
	ctx := context.Background()
	c, w := s.c, s.w
	cl := client{c: c, codes: s.oracleCodes}
	truth, err := verify.LoadTruth(ctx, c.pool)
	if err != nil {
		t.Fatal(err)
	}
	candidates := slices.Clone(w.users)
	slices.SortStableFunc(candidates, func(a, b int64) int { return int(truth.Followers[a] - truth.Followers[b]) })
	watched := candidates[:streamers]
	set := &streamSet{s: s}
	for i := range streamers {
		var u struct {
			ID string `json:"id"`
		}
		if _, err := cl.retried(ctx, http.MethodPost, "/api/users", 0, key(), map[string]string{"name": fmt.Sprint("streamer ", i)}, &u); err != nil {
			t.Fatalf("register a streaming user: %v", err)
		}
		id, _ := strconv.ParseInt(u.ID, 10, 64)
		if _, err := cl.retried(ctx, http.MethodPut, "/api/following/"+itoa(watched[i]), id, "", nil, nil); err != nil {
			t.Fatalf("streaming user follows: %v", err)
		}
		for j := range 3 {
			var p struct {
				ID string `json:"id"`
			}
			if _, err := cl.retried(ctx, http.MethodPost, "/api/posts", id, key(), map[string]string{"content": fmt.Sprint("streamer's post ", j)}, &p); err != nil {
				t.Fatalf("streaming user posts: %v", err)
			}
			pid, _ := strconv.ParseInt(p.ID, 10, 64)
			w.mu.Lock()
			w.live[id] = append(w.live[id], pid)
			w.mu.Unlock()
		}
		set.users = append(set.users, id)
	}
	w.setStreamers(set.users, watched)
	if n, sample := s.o.converge(s.timeout); n > 0 {
		t.Fatalf("before the streams open: %d differences: %s", n, sample)
	}
	sctx, cancel := context.WithCancel(ctx)
	set.cancel = cancel
	for _, u := range set.users {
		feed, err := verify.TruthFeed(ctx, c.pool, u)
		if err != nil {
			t.Fatal(err)
		}
		var top int64
		if len(feed) > 0 {
			top = feed[0]
		}
		notes, err := verify.TruthNotifications(ctx, c.pool, u)
		if err != nil {
			t.Fatal(err)
		}
		var ntop string
		if len(notes) > 0 {
			ntop = notes[0]
		}
		set.homeAt = append(set.homeAt, top)
		set.notesAt = append(set.notesAt, ntop)
		for _, path := range []string{"/api/feed/stream", "/api/notifications/stream"} {
			st := &sseStream{c: c, user: u, path: path, opened: make(chan struct{})}
			set.wg.Add(1)
			go func() {
				defer set.wg.Done()
				st.run(sctx)
			}()
			select {
			case <-st.opened:
			case <-time.After(time.Minute): // a bound on a stream that never opens, not a timing assertion
				t.Fatalf("the %s of %d did not open: %s", path, u, st.lastErr())
			}
			if path == "/api/feed/stream" {
				set.homes = append(set.homes, st)
			} else {
				set.notes = append(set.notes, st)
			}
		}
	}
	return set
}

// check waits, up to the suite's timeout, until every client's
// differences from the truth are none; it fails the test with those of
// the last look, stops the clients and says what they received.
func (set *streamSet) check(t *testing.T) string {
	t.Helper()
	defer set.close()
	var diffs []string
	testenv.Poll(set.s.timeout, 200*time.Millisecond, func() bool { // the truth's queries, per user
		diffs = set.differences()
		return len(diffs) == 0
	})
	if len(diffs) > 0 {
		t.Errorf("streams after the API's kill -9: %d differences:\n%s", len(diffs), strings.Join(diffs[:min(10, len(diffs))], "\n"))
	}
	var conns, posts, deletes, untold, late, notifs, ndeletes int
	for _, h := range set.homes {
		h.mu.Lock()
		conns += h.conns
		posts += len(h.order)
		deletes += len(h.deleted)
		untold += h.foreignDeletes()
		late += h.late
		h.mu.Unlock()
	}
	for _, n := range set.notes {
		n.mu.Lock()
		conns += n.conns
		notifs += len(n.order)
		ndeletes += len(n.deleted)
		n.mu.Unlock()
	}
	if conns < 2*2*streamers {
		t.Errorf("streams: %d connections in all, want each of the %d streams opened again after the kill", conns, 2*streamers)
	}
	return fmt.Sprintf("%d streams, %d connections: %d entries, %d deletes (%d of entries never sent), %d entries after a newer one; %d notifications, %d deletes; %d differences",
		2*streamers, conns, posts, deletes, untold, late, notifs, ndeletes, len(diffs))
}

// close stops the clients and the workload's use of the streaming users.
func (set *streamSet) close() {
	set.cancel()
	set.wg.Wait()
	set.s.w.setStreamers(nil, nil)
}

// differences compares each client's state with the truth now.
func (set *streamSet) differences() []string {
	ctx := context.Background()
	var out []string
	for i, u := range set.users {
		feed, err := verify.TruthFeed(ctx, set.s.c.pool, u)
		if err != nil {
			return []string{err.Error()}
		}
		var want []string
		for _, id := range feed {
			if id > set.homeAt[i] {
				want = append(want, itoa(id))
			}
		}
		slices.Reverse(want) // oldest first, as sent
		for _, d := range set.homes[i].diff(want) {
			out = append(out, fmt.Sprintf("home stream of %d: %s", u, d))
		}
		notes, err := verify.TruthNotifications(ctx, set.s.c.pool, u)
		if err != nil {
			return []string{err.Error()}
		}
		want = want[:0]
		start := readmodel.Notification{}
		if set.notesAt[i] != "" {
			if start, err = readmodel.ParseNotificationID(set.notesAt[i]); err != nil {
				return []string{err.Error()}
			}
		}
		for _, id := range notes {
			n, err := readmodel.ParseNotificationID(id)
			if err != nil {
				return []string{err.Error()}
			}
			if set.notesAt[i] == "" || n.Newer(start) {
				want = append(want, id)
			}
		}
		slices.Reverse(want)
		for _, d := range set.notes[i].diff(want) {
			out = append(out, fmt.Sprintf("notifications stream of %d: %s", u, d))
		}
		if d := set.homes[i].startDiff(set.homeAt[i]); d != "" {
			out = append(out, fmt.Sprintf("home stream of %d: %s", u, d))
		}
	}
	return out
}

// sseStream is one client of a stream: it reads events and, when the
// connection ends or fails, connects again with the last event's id as
// Last-Event-ID, until its context ends; what it received across its
// connections is its state.
type sseStream struct {
	c      *cluster
	user   int64
	path   string
	opened chan struct{} // closed once the first connection answered 200

	mu      sync.Mutex
	conns   int
	lastID  string
	firstID string              // the first id received (the first connection's position)
	order   []string            // the items received, by id, in order
	seen    map[string]int      // how often each item was received
	deleted map[string]bool     // the ids of the delete events
	data    map[string][]byte   // each item's last data
	late    int                 // items received after a newer one (projected late: the stream sends them when they come)
	errs    []string            // the last connection errors
	types   map[string]struct{} // the event types received
}

// run connects and reads until ctx ends.
func (st *sseStream) run(ctx context.Context) {
	hc := &http.Client{} // no timeout: a stream lasts
	once := sync.Once{}
	for ctx.Err() == nil {
		err := st.connect(ctx, hc, func() { once.Do(func() { close(st.opened) }) })
		if ctx.Err() != nil {
			return
		}
		st.mu.Lock()
		if err != nil {
			st.errs = append(st.errs[max(0, len(st.errs)-4):], err.Error())
		}
		st.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond): // a client's backoff before it reconnects
		}
	}
}

// connect opens one connection and reads its events until it ends.
func (st *sseStream) connect(ctx context.Context, hc *http.Client, opened func()) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, st.c.api()+st.path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-User-Id", itoa(st.user))
	st.mu.Lock()
	if st.lastID != "" {
		req.Header.Set("Last-Event-ID", st.lastID)
	}
	st.mu.Unlock()
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d", st.path, resp.StatusCode)
	}
	st.mu.Lock()
	st.conns++
	st.mu.Unlock()
	opened()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var id, typ, data string
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if typ != "" || id != "" {
				st.event(id, typ, data)
			}
			id, typ, data = "", "", ""
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			id = value
		case "event":
			typ = value
		case "data":
			data = value
		}
	}
	return sc.Err()
}

// event applies one whole event to the state; an id without an event
// (what a connection opens with) only sets the id to resume from, as
// EventSource's last event id.
func (st *sseStream) event(id, typ, data string) {
	var item struct {
		ID string `json:"id"`
	}
	err := json.Unmarshal([]byte(data), &item)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.seen == nil {
		st.seen, st.deleted, st.data, st.types = map[string]int{}, map[string]bool{}, map[string][]byte{}, map[string]struct{}{}
	}
	st.types[typ] = struct{}{}
	if id != "" {
		st.lastID = id
		if st.firstID == "" {
			st.firstID = id
		}
	}
	if typ == "" {
		return // the position a connection opens with: an id without data
	}
	if err != nil || item.ID == "" {
		st.errs = append(st.errs, fmt.Sprintf("event %s %q: not an item", typ, data))
		st.seen["(bad event)"]++
		return
	}
	switch typ {
	case "post", "notification":
		if len(st.order) > 0 && newerID(st.order[len(st.order)-1], item.ID) {
			st.late++
		}
		st.seen[item.ID]++
		if st.seen[item.ID] == 1 {
			st.order = append(st.order, item.ID)
		}
		st.data[item.ID] = []byte(data)
	case "edit":
		st.data[item.ID] = []byte(data)
	case "delete":
		st.deleted[item.ID] = true
	default:
		st.seen["(event "+typ+")"]++
	}
}

// newerID reports whether item id a sorts above b: feed entries by their
// Snowflake ids, notifications by their (millisecond, member).
func newerID(a, b string) bool {
	x, errx := strconv.ParseInt(a, 10, 64)
	y, erry := strconv.ParseInt(b, 10, 64)
	if errx == nil && erry == nil {
		return x > y
	}
	na, err1 := readmodel.ParseNotificationID(a)
	nb, err2 := readmodel.ParseNotificationID(b)
	return err1 == nil && err2 == nil && na.Newer(nb)
}

// diff compares what the client holds (received, less deleted) with want
// (oldest first): a duplicate, a missing item, a foreign one.
func (st *sseStream) diff(want []string) []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []string
	for id, n := range st.seen {
		if n > 1 {
			out = append(out, fmt.Sprintf("%s received %d times", id, n))
		}
	}
	var have []string
	for _, id := range st.order {
		if !st.deleted[id] {
			have = append(have, id)
		}
	}
	wanted := map[string]bool{}
	for _, id := range want {
		wanted[id] = true
	}
	held := map[string]bool{}
	for _, id := range have {
		held[id] = true
		if !wanted[id] {
			out = append(out, "foreign or not deleted: "+id)
		}
	}
	for _, id := range want {
		if !held[id] {
			out = append(out, "missing: "+id)
		}
	}
	slices.Sort(out)
	return out
}

// startDiff says whether the home stream started where the feed's newest
// entry was when it opened (the id its first connection opened with
// carries its B0).
func (st *sseStream) startDiff(top int64) string {
	st.mu.Lock()
	first := st.firstID
	st.mu.Unlock()
	if first == "" {
		return ""
	}
	r, err := live.DecodeResume(first)
	if err != nil {
		return "first event id: " + err.Error()
	}
	if r.B0.ID != top {
		return fmt.Sprintf("started at entry %d, the feed's newest was %d", r.B0.ID, top)
	}
	return ""
}

// foreignDeletes counts the delete events of items the client was never
// sent (an entry of the range the stream passed that a page did not show,
// e.g. a followee's reply to someone else; a client has nothing to
// remove). Called with mu held.
func (st *sseStream) foreignDeletes() int {
	n := 0
	for id := range st.deleted {
		if st.seen[id] == 0 {
			n++
		}
	}
	return n
}

// lastErr is the client's last connection error.
func (st *sseStream) lastErr() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.errs) == 0 {
		return "no error"
	}
	return st.errs[len(st.errs)-1]
}
