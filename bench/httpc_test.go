package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/feedco/feed/bench/internal/rawsock"
)

// countingServer starts h on a test server and counts the connections it
// accepts.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

// TestLeanClientFraming: bodies framed by Content-Length, by chunked
// encoding (a handler that flushes, and a body past net/http's 2 KiB
// buffer), none (204), requests with a body and headers, and keep-alive:
// every request after the first reuses the one connection. Over raw
// socket calls (the default) and Go's own.
func TestLeanClientFraming(t *testing.T) {
	t.Parallel()
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain=%v", plain), func(t *testing.T) { testLeanClientFraming(t, plain) })
	}
}

func testLeanClientFraming(t *testing.T, plain bool) {
	big := strings.Repeat("0123456789", 1000)
	srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			_, _ = io.WriteString(w, "hello "+r.URL.Query().Get("q"))
		case "/big": // no Content-Length: net/http chunks it
			_, _ = io.WriteString(w, big)
		case "/flushed":
			_, _ = io.WriteString(w, "part1,")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "part2")
		case "/none":
			w.WriteHeader(http.StatusNoContent)
		case "/echo":
			b, _ := io.ReadAll(r.Body)
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "%s %s %s %s", r.Method, r.Header.Get("Authorization"), r.Header.Get("Content-Type"), b)
		case "/missing":
			http.NotFound(w, r)
		}
	}))
	lc, err := newLeanClient(srv.URL, 5*time.Second, 4)
	if err != nil {
		t.Fatal(err)
	}
	lc.plain = plain
	t.Cleanup(lc.closeIdle)
	ctx := context.Background()
	cases := []struct {
		method, path, auth, body string
		status                   int
		want                     string
	}{
		{"GET", "/small?q=x", "", "", 200, "hello x"},
		{"GET", "/big", "", "", 200, big},
		{"GET", "/flushed", "", "", 200, "part1,part2"},
		{"DELETE", "/none", "", "", 204, ""},
		{"POST", "/echo", "Bearer t1", `{"a":1}`, 201, `POST Bearer t1 application/json {"a":1}`},
		{"GET", "/missing", "", "", 404, "404 page not found\n"},
		{"GET", "/small?q=again", "", "", 200, "hello again"},
	}
	for _, c := range cases {
		st, b, err := lc.do(ctx, c.method, c.path, c.auth, c.body)
		if err != nil || st != c.status || string(b) != c.want {
			t.Fatalf("%s %s: %d %.60q %v, want %d %.60q", c.method, c.path, st, b, err, c.status, c.want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for %d sequential requests, want 1 (keep-alive)", n, len(cases))
	}
	lc.mu.Lock()
	_, raw := lc.idle[0].c.(*rawsock.Conn)
	lc.mu.Unlock()
	if raw == plain {
		t.Errorf("plain %v: the connection is a %T", plain, lc.idle[0].c)
	}
}

// TestLeanClientServerCloses: a response with Connection: close is read
// whole and its connection is not reused; an idle connection the server
// closed is replaced for a GET (retried once), and a POST on it fails
// rather than being sent twice.
func TestLeanClientServerCloses(t *testing.T) {
	t.Parallel()
	var arrived atomic.Int64
	release, both := make(chan struct{}), make(chan struct{})
	srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/close":
			w.Header().Set("Connection", "close")
		case "/pair": // held until two requests are in flight
			if arrived.Add(1) == 2 {
				close(both)
			}
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	lc, err := newLeanClient(srv.URL, 5*time.Second, 4)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 2 {
		if st, b, err := lc.do(ctx, "GET", "/close", "", ""); err != nil || st != 200 || string(b) != "ok" {
			t.Fatalf("GET /close #%d: %d %q %v", i, st, b, err)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections after two Connection: close responses, want 2", n)
	}
	// Two pooled connections (two requests at once), then the server drops
	// every idle one: the GET's retry must dial, not take the other stale
	// connection from the pool.
	errs := make(chan error, 2)
	for range 2 {
		go func() { _, _, err := lc.do(ctx, "GET", "/pair", "", ""); errs <- err }()
	}
	<-both
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := len(lc.idle); n != 2 {
		t.Fatalf("%d idle connections after two requests at once, want 2", n)
	}
	srv.CloseClientConnections()
	time.Sleep(50 * time.Millisecond)
	if st, b, err := lc.do(ctx, "GET", "/", "", ""); err != nil || st != 200 || string(b) != "ok" {
		t.Fatalf("GET after the server closed the idle connection: %d %q %v, want a retry on a new one", st, b, err)
	}
	if _, _, err := lc.do(ctx, "GET", "/", "", ""); err != nil {
		t.Fatal(err)
	}
	srv.CloseClientConnections()
	time.Sleep(50 * time.Millisecond)
	if _, _, err := lc.do(ctx, "POST", "/", "", "{}"); err == nil {
		t.Fatal("POST on a connection the server closed succeeded; want an error (no silent resend)")
	}
}

// TestLeanClientIdleMax: a connection idle longer than idleMax is closed
// and replaced, not reused (a server may have closed it meanwhile).
func TestLeanClientIdleMax(t *testing.T) {
	t.Parallel()
	srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	lc, err := newLeanClient(srv.URL, 5*time.Second, 4)
	if err != nil {
		t.Fatal(err)
	}
	lc.idleMax = 50 * time.Millisecond
	for i := range 3 {
		if _, _, err := lc.do(context.Background(), "GET", "/", "", ""); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if _, _, err := lc.do(context.Background(), "GET", "/", "", ""); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("%d connections, want 3 (one reused at once, then a new one after each idle spell)", n)
	}
}

// TestLeanClientTimeout: a server that does not answer within the timeout
// gives a net.Error that is a timeout (errKind's "timeout"), not a hang.
func TestLeanClientTimeout(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			// Read, never answer, and keep c referenced until the client
			// closes it (a dropped net.Conn may be closed by its finalizer).
			go func() { _, _ = io.Copy(io.Discard, c); _ = c.Close() }()
		}
	}()
	lc, err := newLeanClient("http://"+l.Addr().String(), 200*time.Millisecond, 4)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, _, err = lc.do(context.Background(), "GET", "/", "", "")
	if err == nil || errKind("read", 0, err) != "read: timeout" {
		t.Fatalf("err %v (kind %q), want a timeout", err, errKind("read", 0, err))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s with a 200ms timeout", d)
	}
}

// TestReadResponseMalformed: what the client does not understand is an
// error, not a guess.
func TestReadResponseMalformed(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"garbage\r\n\r\n",
		"HTTP/1.1 2x0 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
		"HTTP/1.1 200 OK\r\nno-colon\r\n\r\n",
	} {
		if st, b, _, err := readResponse(bufio.NewReader(strings.NewReader(raw)), false); err == nil {
			t.Errorf("%q: %d %q, want an error", raw, st, b)
		}
	}
	// 100 Continue is skipped; a chunk extension and a trailer are allowed.
	raw := "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\nX-T: 1\r\n\r\n"
	st, b, keep, err := readResponse(bufio.NewReader(strings.NewReader(raw)), false)
	if err != nil || st != 200 || string(b) != "abc" || !keep {
		t.Fatalf("100 Continue + chunked: %d %q keep=%v %v", st, b, keep, err)
	}
}

// BenchmarkClient: one GET of a 4 KiB JSON body over a kept-alive loopback
// connection, with leanClient and with net/http's client (what the runner
// uses when Deps.HTTP is set); the test server's work is in both.
//
//	go test -run '^$' -bench Client -count 5 ./bench/
func BenchmarkClient(b *testing.B) {
	body := strings.Repeat(`{"id":"915184806927532032","content":"hello"},`, 90)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	ctx := context.Background()
	b.Run("lean", func(b *testing.B) {
		lc, err := newLeanClient(srv.URL, 5*time.Second, 4)
		if err != nil {
			b.Fatal(err)
		}
		defer lc.closeIdle()
		b.ReportAllocs()
		for b.Loop() {
			if st, _, err := lc.do(ctx, http.MethodGet, "/api/feed", "Bearer x", ""); err != nil || st != 200 {
				b.Fatal(st, err)
			}
		}
	})
	b.Run("net/http", func(b *testing.B) {
		c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
		defer c.CloseIdleConnections()
		b.ReportAllocs()
		for b.Loop() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/feed", nil)
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer x")
			resp, err := c.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				b.Fatal(resp.StatusCode, err)
			}
		}
	})
}

// TestLeanClientArrival checks doAt's arrival time: none with plain
// sockets; with raw ones, once the kernel stamps receives, a time within
// the round trip. That it is the arrival and not the read,
// internal/rawsock's TestStampReceives shows.
func TestLeanClientArrival(t *testing.T) {
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "page")
	})
	plain, err := newLeanClient(srv.URL, 5*time.Second, 4)
	if err != nil {
		t.Fatal(err)
	}
	plain.plain = true
	defer plain.closeIdle()
	if st, b, at, err := plain.doAt(context.Background(), "GET", "/", "", ""); err != nil || st != 200 || string(b) != "page" || !at.IsZero() {
		t.Fatalf("plain: %d %q %v %v, want 200, page and no arrival time", st, b, at, err)
	}

	lc, err := newLeanClient(srv.URL, 5*time.Second, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.closeIdle()
	var at time.Time
	// The kernel turns its timestamping on in the background when the
	// first socket asks for it: the first responses may carry none.
	for tries := 0; at.IsZero(); tries++ {
		if tries == 200 {
			t.Fatal("no arrival time in 200 requests")
		}
		start := time.Now()
		var st int
		var b []byte
		if st, b, at, err = lc.doAt(context.Background(), "GET", "/", "", ""); err != nil || st != 200 || string(b) != "page" {
			t.Fatalf("%d %q %v", st, b, err)
		}
		done := time.Now()
		if !at.IsZero() && (at.Before(start.Add(-time.Millisecond)) || at.After(done.Add(time.Millisecond))) {
			t.Fatalf("arrived at %v, outside the round trip [%v, %v]", at.Format(time.StampMicro), start.Format(time.StampMicro), done.Format(time.StampMicro))
		}
		if at.IsZero() {
			time.Sleep(10 * time.Millisecond)
		}
	}
}
