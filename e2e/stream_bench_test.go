package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/events"
	"github.com/feedco/feed/live"
	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/testkit/testenv"
)

// BenchmarkStreamEvent measures the CPU a live stream spends per entry it
// delivers beside the polling read of the same entry, in one run, on the
// whole system: a reader follows an author of 40 projected posts;
//
//   - stream: a stream positioned just below the newest post (its B)
//     wakes up and reads (live.Stream.Step: the home read from the top
//     down to B, then the changes after C), delivering that one post;
//   - stream-plain: the same with the step's home read in a pipeline of
//     its own (queries.Config.StreamPlainReads);
//   - poll: the refresh page above the same position
//     (queries.Feed.HomeAfter, what a polling client asks), one post.
//
// One goroutine; ns/op is the read's wall time (round trips included),
// cpu-ns/op the process's CPU (user and system, getrusage) per read: the
// API's side, the system's idle projectors beside it; Redis's and
// PostgreSQL's own CPU is not in it. The wake-up's own cost (a Pub/Sub
// message, a channel send) is not in it either.
func BenchmarkStreamEvent(b *testing.B) {
	s := startSystem(b, policies{CelebrityThreshold: 1000, InboxMax: 100, InboxTrimSlack: 10, TimelineMax: 100, BackfillPosts: 10,
		FanoutBatch: 10, CacheTTL: 300 * time.Millisecond, RefreshSettle: 500 * time.Millisecond})
	ctx := context.Background()
	newUser := func(name string) (int64, string) { return newUserOn(b, s, name) }
	reader, rtok := newUser("reader")
	author, atok := newUser("author")
	if err := s.call(ctx, http.MethodPut, fmt.Sprint("/api/following/", author), rtok, "", nil, nil, http.StatusNoContent, nil); err != nil {
		b.Fatal(err)
	}
	var posts []apiPost
	for i := range 40 {
		var p apiPost
		if err := s.call(ctx, http.MethodPost, "/api/posts", atok, "", map[string]string{"content": fmt.Sprint("post ", i)}, &p, http.StatusCreated, nil); err != nil {
			b.Fatal(err)
		}
		posts = append(posts, p)
	}
	s.quiesce(b, 2*time.Minute)
	time.Sleep(time.Second) // past the refresh's settled horizon

	newFeed := func(plainReads bool) *queries.Feed {
		f, err := queries.New(queries.Config{Keys: s.Keys, InboxMax: 100, CelebrityThreshold: 1000, Registerer: prometheus.NewRegistry(),
			RefreshSettle: 500 * time.Millisecond, CelebrityCacheTTL: 300 * time.Millisecond, Logger: s.Log, StreamPlainReads: plainReads}, s.DB.Pool, s.Redis)
		if err != nil {
			b.Fatal(err)
		}
		testenv.Start(b, f.Service())
		return f
	}
	feed := newFeed(false)
	hub, err := live.NewHub(live.HubConfig{Keys: s.Keys, Logger: s.Log}, s.Redis)
	if err != nil {
		b.Fatal(err)
	}
	// Below the newest post: the second newest's key.
	second := posts[len(posts)-2]
	id, _ := strconv.ParseInt(second.ID, 10, 64)
	k := events.FeedKey{Ms: postMs(b, second), ID: id}
	from := live.Resume{B: k, B0: k}.Encode()
	// The reader's read models built (a page read rebuilds them), as an
	// active reader's are; the cursor of the second newest post is the
	// nextCursor of a page of two.
	var page queries.Page
	testenv.Eventually(b, time.Minute, "the reader's inbox built", func() bool {
		page, err = feed.Home(ctx, reader, "", 2)
		return err == nil && !page.Cold && page.NextCursor != nil
	})
	after := *page.NextCursor

	// The same with every step's home read in a pipeline of its own
	// (queries.Config.StreamPlainReads): a stream reading alone keeps its
	// own pipeline by default too, so the two should cost the same.
	plain := newFeed(true)
	for _, c := range []struct {
		name string
		feed *queries.Feed
	}{{"stream", feed}, {"stream-plain", plain}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			defer cpuPerOp(b)()
			for b.Loop() {
				st, err := live.Open(ctx, hub, c.feed, reader, from, "")
				if err != nil {
					b.Fatal(err)
				}
				evs, _, err := st.Step(ctx, nil)
				if err != nil || len(evs) != 1 {
					b.Fatalf("%d events, %v", len(evs), err)
				}
			}
		})
	}
	b.Run("poll", func(b *testing.B) {
		b.ReportAllocs()
		defer cpuPerOp(b)()
		for b.Loop() {
			p, err := feed.HomeAfter(ctx, reader, after, 20)
			if err != nil || len(p.Items) != 1 {
				b.Fatalf("%d items, %v", len(p.Items), err)
			}
		}
	})
}

// cpuPerOp reports the process's CPU time per op from now to the call of
// the function it returns.
func cpuPerOp(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() {
		b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkPostToStream measures post-to-stream latency on the whole
// system in this process (CDC, broker, projectors, an API instance with
// its hub), idle but for the benchmark: b.N posts of a followed author,
// one at a time, each timed from its 201 to its event on the reader's
// open stream, with the same post's post-to-visible for a polling
// client beside it (the time from the 201 to the first page of
// GET /api/feed that shows it, polled every 5 ms). Reports p50 and p99 of
// both. Under the full mix, `feedbench --streams N` measures the same
// beside its post-to-visible.
func BenchmarkPostToStream(b *testing.B) {
	s := startSystem(b, policies{CelebrityThreshold: 1000, InboxMax: 100, InboxTrimSlack: 10, TimelineMax: 100, BackfillPosts: 10,
		FanoutBatch: 10, CacheTTL: 300 * time.Millisecond})
	in := startInstance(b, s, api.Config{})
	_, rtok, _, atok := streamUsers(b, in)
	ctx := context.Background()
	c := openStream(b, in.baseURL, rtok, "", "", http.StatusOK)
	// Not timed: a post within the first second of a stream may wait for
	// its read 2 s after the start (the projectors' copy of who is online
	// is up to a second old). A first post, waited for on the stream, is
	// past that.
	var warm apiPost
	if err := in.call(ctx, http.MethodPost, "/api/posts", atok, "", map[string]string{"content": "warm-up"}, &warm, http.StatusCreated, nil); err != nil {
		b.Fatal(err)
	}
	if ev := c.next(b, time.Minute); streamPost(b, ev).ID != warm.ID {
		b.Fatalf("stream event %s, want the warm-up post %s", ev.Type, warm.ID)
	}
	var toStream, toPage []float64
	b.ResetTimer()
	for i := range b.N {
		var p apiPost
		if err := in.call(ctx, http.MethodPost, "/api/posts", atok, "", map[string]string{"content": fmt.Sprint("timed ", i)}, &p, http.StatusCreated, nil); err != nil {
			b.Fatal(err)
		}
		t201 := time.Now()
		seen := make(chan time.Time, 1)
		go func() { // the polling client
			for time.Since(t201) < time.Minute {
				var page apiPage
				if in.call(ctx, http.MethodGet, "/api/feed?limit=5", rtok, "", nil, &page, http.StatusOK, nil) == nil {
					for _, it := range page.Items {
						if it.ID == p.ID {
							seen <- time.Now()
							return
						}
					}
				}
				time.Sleep(5 * time.Millisecond) // the polling client's interval: the baseline it is measured against
			}
			close(seen)
		}()
		ev := c.next(b, time.Minute)
		at := time.Now()
		if got := streamPost(b, ev); got.ID != p.ID {
			b.Fatalf("stream event %s %s, want post %s", ev.Type, got.ID, p.ID)
		}
		toStream = append(toStream, float64(at.Sub(t201).Microseconds())/1000)
		if v, ok := <-seen; ok {
			toPage = append(toPage, float64(v.Sub(t201).Microseconds())/1000)
		}
	}
	b.StopTimer()
	pct := func(xs []float64, q float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		ys := slices.Clone(xs)
		slices.Sort(ys)
		return ys[min(len(ys)-1, int(q*float64(len(ys))))]
	}
	b.ReportMetric(pct(toStream, 0.5), "stream-p50-ms")
	b.ReportMetric(pct(toStream, 0.99), "stream-p99-ms")
	b.ReportMetric(pct(toPage, 0.5), "poll-p50-ms")
	b.ReportMetric(pct(toPage, 0.99), "poll-p99-ms")
}
