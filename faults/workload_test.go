package faults

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/feedco/feed/verify"
)

// codes counts answers by HTTP status; "conn" is a request that got no
// answer (the API down or restarting), readUnavailable the 503s (counted
// under "503" too) that answered a read.
type codes struct {
	mu sync.Mutex
	m  map[string]int
}

// readUnavailable counts the 503 answers to reads, beside "503".
const readUnavailable = "503-of-reads"

func newCodes() *codes { return &codes{m: map[string]int{}} }

func (s *codes) add(k string) {
	s.mu.Lock()
	s.m[k]++
	s.mu.Unlock()
}

// count is how many answers had status k.
func (s *codes) count(k string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[k]
}

// String lists the counts by status, e.g. "200×3120 201×412 503×18".
func (s *codes) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.m))
	for k := range s.m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s×%d", k, s.m[k]))
	}
	return strings.Join(parts, " ")
}

// forbidden returns the counts of 5xx answers other than 503: a dependency
// down must never be a 500.
func (s *codes) forbidden() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, n := range s.m {
		if strings.HasPrefix(k, "5") && k != "503" && k != readUnavailable {
			out[k] = n
		}
	}
	return out
}

// client sends the workload's and the oracle's requests as a user, in
// trusted-header mode (the API listens on loopback).
type client struct {
	c     *cluster
	codes *codes
}

// do sends one request as user and decodes a 2xx JSON answer into out.
// It returns the status (0 when no answer came).
func (cl client) do(ctx context.Context, method, path string, user int64, idemKey string, body, out any) (int, error) {
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, cl.c.api()+path, bytes.NewReader(raw))
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if user != 0 {
		req.Header.Set("X-User-Id", itoa(user))
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	resp, err := cl.c.http.Do(req)
	if err != nil {
		cl.codes.add("conn")
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	cl.codes.add(strconv.Itoa(resp.StatusCode))
	if resp.StatusCode == http.StatusServiceUnavailable && method == http.MethodGet {
		cl.codes.add(readUnavailable) // which of the 503s were reads
	}
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: read body: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode %q: %w", method, path, b, err)
		}
	}
	return resp.StatusCode, nil
}

// retried sends a request until it is answered with something other than
// a retryable status or no answer, for up to 30 s, with the same
// Idempotency-Key each time (as a well-behaved client does).
func (cl client) retried(ctx context.Context, method, path string, user int64, idemKey string, body, out any) (int, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := cl.do(ctx, method, path, user, idemKey, body, out)
		retry := st == 0 || st == http.StatusServiceUnavailable || st == http.StatusTooManyRequests || st == http.StatusConflict
		if !retry || time.Now().After(deadline) || ctx.Err() != nil {
			return st, err
		}
		time.Sleep(200 * time.Millisecond) // a client's backoff before its retry
	}
}

// readAll reads a paged endpoint to its end as user.
func (cl client) readAll(ctx context.Context, path string, user int64, maxPages int) ([]verify.APIPost, error) {
	get := func(ctx context.Context, pathAndQuery string, p *verify.APIPage) error {
		_, err := cl.do(ctx, http.MethodGet, pathAndQuery, user, "", nil, p)
		return err
	}
	return verify.ReadAll(ctx, get, path, 50, maxPages)
}

// workload is the registered users and the posts they have not deleted;
// the oracle trusts PostgreSQL, not this.
type workload struct {
	c     *cluster
	users []int64
	mu    sync.Mutex
	live  map[int64][]int64 // author -> posts
	// streamers hold live streams (streams_test.go): never actors, they
	// are now and then the target of a like, a repost, a reply, a quote,
	// a follow or an unfollow; watched are the accounts they follow,
	// never followed by the workload meanwhile. Both are empty but during
	// the streams' fault.
	streamers []int64
	watched   []int64
	// others are the users beside users the oracle reads (every streamer
	// there was).
	others []int64
}

// setStreamers sets the streaming users and the accounts they follow
// (nil: none), under mu.
func (w *workload) setStreamers(streamers, watched []int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.streamers, w.watched = streamers, watched
	for _, u := range streamers {
		if !slices.Contains(w.others, u) {
			w.others = append(w.others, u)
		}
	}
}

// all is every user the oracle reads.
func (w *workload) all() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append(slices.Clone(w.users), w.others...)
}

// streamTarget returns, one time in four while there are streamers, one
// of them (0 otherwise).
func (w *workload) streamTarget(rng *rand.Rand) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.streamers) == 0 || rng.IntN(4) != 0 {
		return 0
	}
	return w.streamers[rng.IntN(len(w.streamers))]
}

// isWatched reports whether v is followed by a streamer now.
func (w *workload) isWatched(v int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Contains(w.watched, v)
}

// someWatched returns, one time in four while there are streamers, one
// of the accounts they follow (0 otherwise).
func (w *workload) someWatched(rng *rand.Rand) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.watched) == 0 || rng.IntN(4) != 0 {
		return 0
	}
	return w.watched[rng.IntN(len(w.watched))]
}

// register creates n users through the API.
func register(c *cluster, n int) *workload {
	c.t.Helper()
	w := &workload{c: c, live: map[int64][]int64{}}
	cl := client{c: c, codes: newCodes()}
	for i := range n {
		var u struct {
			ID string `json:"id"`
		}
		if _, err := cl.retried(context.Background(), http.MethodPost, "/api/users", 0, key(), map[string]string{"name": fmt.Sprint("user ", i)}, &u); err != nil {
			c.t.Fatalf("register: %v", err)
		}
		id, err := strconv.ParseInt(u.ID, 10, 64)
		if err != nil {
			c.t.Fatalf("register: id %q", u.ID)
		}
		w.users = append(w.users, id)
	}
	return w
}

func key() string {
	b := make([]byte, 12)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}

// run plays the workload from workers clients, each about every pause,
// until ctx ends; a request in flight then finishes (retries included).
// Answers are counted in counts.
func (w *workload) run(ctx context.Context, workers int, pause time.Duration, counts *codes, seed uint64) {
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			cl := client{c: w.c, codes: counts}
			for ctx.Err() == nil {
				w.op(cl, rng)
				time.Sleep(pause/2 + time.Duration(rng.Int64N(int64(pause)))) // pacing
			}
		}()
	}
	wg.Wait()
}

// somePost picks a live post of a skewed author (0: none yet).
func (w *workload) somePost(rng *rand.Rand) int64 {
	a := w.streamTarget(rng)
	if a == 0 {
		a = w.pick(rng)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if ps := w.live[a]; len(ps) > 0 {
		return ps[len(ps)-1-rng.IntN(min(len(ps), 5))]
	}
	return 0
}

// pick chooses a user, skewed towards the first ones, so that a few
// become celebrities and most do not.
func (w *workload) pick(rng *rand.Rand) int64 {
	f := rng.Float64()
	return w.users[int(f*f*float64(len(w.users)))]
}

// op plays one operation: post (a reply or a quote, at times), repost,
// like or their undo, follow, unfollow, delete, or a read.
func (w *workload) op(cl client, rng *rand.Rand) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	u := w.someWatched(rng) // the streamers' feeds: their followees act more often
	if u == 0 {
		u = w.users[rng.IntN(len(w.users))]
	}
	switch r := rng.IntN(100); {
	case r < 30:
		var p struct {
			ID string `json:"id"`
		}
		body := map[string]string{"content": fmt.Sprintf("post of %d #%d", u, rng.IntN(1e6))}
		if r < 8 { // a reply or a quote of someone's live post
			if target := w.somePost(rng); target != 0 {
				body[map[bool]string{true: "replyTo", false: "quoteOf"}[r < 5]] = itoa(target)
			}
		}
		st, _ := cl.retried(ctx, http.MethodPost, "/api/posts", u, key(), body, &p)
		if id, err := strconv.ParseInt(p.ID, 10, 64); st == http.StatusCreated && err == nil {
			w.mu.Lock()
			w.live[u] = append(w.live[u], id)
			w.mu.Unlock()
		}
	case r < 42: // a repost or a like of a live post, sometimes undone
		if target := w.somePost(rng); target != 0 {
			path := "/api/posts/" + itoa(target) + map[bool]string{true: "/repost", false: "/like"}[r < 36]
			method := http.MethodPut
			if rng.IntN(4) == 0 {
				method = http.MethodDelete
			}
			who := w.someWatched(rng)
			if who == 0 {
				who = w.pick(rng)
			}
			_, _ = cl.retried(ctx, method, path, who, "", nil, nil)
		}
	case r < 55:
		v := w.streamTarget(rng)
		if v == 0 {
			v = w.pick(rng)
		}
		if v != u && !w.isWatched(v) {
			_, _ = cl.retried(ctx, http.MethodPut, "/api/following/"+itoa(v), u, "", nil, nil)
		}
	case r < 65:
		v := w.streamTarget(rng)
		if v == 0 {
			v = w.pick(rng)
		}
		if v != u {
			_, _ = cl.retried(ctx, http.MethodDelete, "/api/following/"+itoa(v), u, "", nil, nil)
		}
	case r < 70:
		w.mu.Lock()
		posts := w.live[u]
		var id int64
		if len(posts) > 0 {
			i := rng.IntN(len(posts))
			id = posts[i]
			w.live[u] = slices.Delete(posts, i, i+1)
		}
		w.mu.Unlock()
		if id != 0 {
			_, _ = cl.retried(ctx, http.MethodDelete, "/api/posts/"+itoa(id), u, "", nil, nil)
		}
	case r < 90:
		_, _ = cl.do(ctx, http.MethodGet, "/api/feed?limit=20", u, "", nil, nil)
	default:
		_, _ = cl.do(ctx, http.MethodGet, "/api/users/"+itoa(w.pick(rng))+"/posts?limit=20", u, "", nil, nil)
	}
}
