package api_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/internal/auth"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/live"
	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// streamServer is an API server with live streams on a test database
// and Redis prefix, and the ids of n registered users.
type streamServer struct {
	srv   *api.Server
	addr  string
	users []int64
}

func newStreamServer(tb testing.TB, n int, cfg api.Config) *streamServer {
	tb.Helper()
	ctx := context.Background()
	db := testenv.NewDB(tb)
	rd := testenv.NewRedis(tb)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	rows, err := db.Pool.Query(ctx, `INSERT INTO users (name) SELECT 'u' || i FROM generate_series(1, $1) i RETURNING id`, n)
	if err != nil {
		tb.Fatal(err)
	}
	var users []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			tb.Fatal(err)
		}
		users = append(users, id)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	feed, err := queries.New(queries.Config{Keys: keys, Registerer: prometheus.NewRegistry(), Logger: testenv.Logger()}, db.Pool, rd.Client)
	if err != nil {
		tb.Fatal(err)
	}
	hub, err := live.NewHub(live.HubConfig{Keys: keys, OnAuthorWake: feed.ForgetTimelineHead, Logger: testenv.Logger()}, rd.Client)
	if err != nil {
		tb.Fatal(err)
	}
	testenv.Start(tb, hub.Service())
	ids, err := snowflake.New(5)
	if err != nil {
		tb.Fatal(err)
	}
	cmds, err := commands.New(db.Pool, ids, commands.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	checker, err := auth.NewUsers(db.Pool, 0)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.AuthMode = api.AuthTrustedHeader
	cfg.Addr = "127.0.0.1:0"
	srv, err := api.New(cfg, api.Deps{Commands: cmds, Users: checker, Feed: feed, Streams: hub, Logger: testenv.Logger()})
	if err != nil {
		tb.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	tb.Cleanup(hs.Close)
	tb.Cleanup(srv.CloseStreams)
	return &streamServer{srv: srv, addr: strings.TrimPrefix(hs.URL, "http://"), users: users}
}

// openIdle opens user's stream on a raw connection and reads its first
// comment: the stream is then open and idle.
func (s *streamServer) openIdle(tb testing.TB, user int64, buf *bufio.Reader) net.Conn {
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		tb.Fatal(err)
	}
	fmt.Fprintf(c, "GET /api/feed/stream HTTP/1.1\r\nHost: feed\r\nX-User-Id: %d\r\n\r\n", user)
	buf.Reset(c)
	for {
		line, err := buf.ReadString('\n')
		if err != nil {
			tb.Fatalf("stream of %d: %v", user, err)
		}
		if strings.Contains(line, ":stream") {
			return c
		}
		if strings.HasPrefix(line, "HTTP/1.1 ") && !strings.HasPrefix(line, "HTTP/1.1 200") {
			tb.Fatalf("stream of %d: %s", user, line)
		}
	}
}

// rss is the process's resident set in bytes (Linux), 0 elsewhere.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

// memNow returns the Go runtime's in-use memory (heap and stacks) after
// a collection, and the process's RSS.
func memNow() (inUse, resident uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse, rss()
}

// BenchmarkIdleStreams opens b.N idle live streams (one per user, each
// with its own channels on the hub's subscription) on loopback and
// reports what one costs: Go heap and stacks, and process RSS, after
// against before (the clients' connections, in the same process, count
// too: a net.Conn each, no goroutine), and goroutines. Each stream is
// served by its request's goroutine (the plain way). Run it with
// -benchtime=Nx, e.g. `go test -run '^$' -bench IdleStreams -benchtime
// 2000x ./api`.
func BenchmarkIdleStreams(b *testing.B) { benchIdleStreams(b, false) }

// BenchmarkIdleStreamsHijacked is BenchmarkIdleStreams with
// Config.StreamsHijacked: the streams' connections hijacked, served by a
// few shared goroutines.
func BenchmarkIdleStreamsHijacked(b *testing.B) { benchIdleStreams(b, true) }

func benchIdleStreams(b *testing.B, hijacked bool) {
	s := newStreamServer(b, b.N, api.Config{StreamsPerUser: 1, StreamsMax: b.N + 1, StreamHeartbeat: time.Hour, StreamStartRead: time.Hour,
		StreamsHijacked: hijacked})
	var buf = bufio.NewReaderSize(nil, 512)
	heap0, rss0 := memNow()
	gor0 := runtime.NumGoroutine()
	b.ResetTimer()
	conns := make([]net.Conn, 0, b.N)
	for i := range b.N {
		conns = append(conns, s.openIdle(b, s.users[i], buf))
	}
	b.StopTimer()
	testenv.Eventually(b, time.Minute, "every stream's first read", func() bool { return s.srv.OpenStreams() == b.N })
	heap1, rss1 := memNow()
	n := float64(b.N)
	b.ReportMetric(float64(heap1-heap0)/n, "heap-B/stream")
	b.ReportMetric((float64(rss1)-float64(rss0))/n, "rss-B/stream")
	b.ReportMetric(float64(runtime.NumGoroutine()-gor0)/n, "goroutines/stream")
	for _, c := range conns {
		_ = c.Close()
	}
}
