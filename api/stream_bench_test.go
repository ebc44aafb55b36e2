package api_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
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

// openIdle opens user's stream on a raw connection to addr and reads its
// first comment: the stream is then open and idle.
func openIdle(addr string, user int64, buf *bufio.Reader) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c, "GET /api/feed/stream HTTP/1.1\r\nHost: feed\r\nX-User-Id: %d\r\n\r\n", user)
	buf.Reset(c)
	for {
		line, err := buf.ReadString('\n')
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("stream of %d: %w", user, err)
		}
		if strings.Contains(line, ":stream") {
			return c, nil
		}
		if strings.HasPrefix(line, "HTTP/1.1 ") && !strings.HasPrefix(line, "HTTP/1.1 200") {
			_ = c.Close()
			return nil, fmt.Errorf("stream of %d: %s", user, strings.TrimSpace(line))
		}
	}
}

// idleClientsEnv marks the test binary run as BenchmarkIdleStreams'
// clients (TestMain): FEED_IDLE_CLIENTS_ADDR is the server, _USERS a file
// of user ids, one a line. The child opens a stream for each, prints
// "open" once all are, and holds them until its stdin closes.
const idleClientsEnv = "FEED_IDLE_CLIENTS"

func idleClientsChild() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "idle clients:", err); return 1 }
	raw, err := os.ReadFile(os.Getenv(idleClientsEnv + "_USERS"))
	if err != nil {
		return fail(err)
	}
	addr := os.Getenv(idleClientsEnv + "_ADDR")
	buf := bufio.NewReaderSize(nil, 512)
	var conns []net.Conn
	for _, f := range strings.Fields(string(raw)) {
		u, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return fail(err)
		}
		c, err := openIdle(addr, u, buf)
		if err != nil {
			return fail(err)
		}
		conns = append(conns, c)
	}
	fmt.Println("open")
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		_ = c.Close()
	}
	return 0
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
// reports what they cost the server: Go heap and stacks, and process RSS,
// after against before, a stream and in all (MB), and goroutines. The
// clients run in a child process (idleClientsChild), so the figures are
// the server's alone and each process holds one descriptor a stream
// (a process here may hold 20,000). Each stream is served by its
// request's goroutine (the plain way). Run it with -benchtime=Nx, e.g.
// `go test -run '^$' -bench IdleStreams -benchtime 10000x ./api`.
func BenchmarkIdleStreams(b *testing.B) { benchIdleStreams(b, false) }

// BenchmarkIdleStreamsHijacked is BenchmarkIdleStreams with
// Config.StreamsHijacked: the streams' connections hijacked, served by a
// few shared goroutines.
func BenchmarkIdleStreamsHijacked(b *testing.B) { benchIdleStreams(b, true) }

func benchIdleStreams(b *testing.B, hijacked bool) {
	s := newStreamServer(b, b.N, api.Config{StreamsPerUser: 1, StreamsMax: b.N + 1, StreamHeartbeat: time.Hour, StreamStartRead: time.Hour,
		StreamsHijacked: hijacked})
	var ids strings.Builder
	for _, u := range s.users[:b.N] {
		ids.WriteString(strconv.FormatInt(u, 10) + "\n")
	}
	usersFile := filepath.Join(b.TempDir(), "users")
	if err := os.WriteFile(usersFile, []byte(ids.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), idleClientsEnv+"=1", idleClientsEnv+"_ADDR="+s.addr, idleClientsEnv+"_USERS="+usersFile)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	heap0, rss0 := memNow()
	gor0 := runtime.NumGoroutine()
	b.ResetTimer()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "open" {
		b.Fatalf("idle clients: %q, %v: %s", line, err, stderr.Bytes())
	}
	b.StopTimer()
	testenv.Eventually(b, time.Minute, "every stream's first read", func() bool { return s.srv.OpenStreams() == b.N })
	heap1, rss1 := memNow()
	n := float64(b.N)
	b.ReportMetric(float64(heap1-heap0)/n, "heap-B/stream")
	b.ReportMetric((float64(rss1)-float64(rss0))/n, "rss-B/stream")
	b.ReportMetric(float64(heap1-heap0)/1e6, "heap-MB")
	b.ReportMetric((float64(rss1)-float64(rss0))/1e6, "rss-MB")
	b.ReportMetric(float64(runtime.NumGoroutine()-gor0)/n, "goroutines/stream")
}
