package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/testkit/testenv"
)

// httpServers are the servers Serve runs on (Config.HTTPServer).
var httpServers = []string{api.HTTPServerH1, api.HTTPServerNetHTTP}

// Shutdown lets a request in flight finish, then Serve returns nil and the
// port no longer accepts, on either server.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	for _, server := range httpServers {
		t.Run(server, func(t *testing.T) {
			t.Parallel()
			testGracefulShutdown(t, server)
		})
	}
}

func testGracefulShutdown(t *testing.T, server string) {
	feed := &stubFeed{entered: make(chan struct{}, 1), release: make(chan struct{})}
	e := setup(t, options{cfg: api.Config{HTTPServer: server}, tweak: func(d *api.Deps) { d.Feed = feed }})
	e.user(t, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.srv.Serve(ctx, ln) }()

	url := "http://" + ln.Addr().String()
	req, _ := http.NewRequest("GET", url+"/api/feed", nil)
	req.Header.Set("Authorization", e.bearer(1))
	inflight := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			inflight <- -1
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		inflight <- resp.StatusCode
	}()
	<-feed.entered // the request is in flight
	cancel()
	// The shutdown has begun once the listener refuses connections; only
	// then does the request in flight finish.
	testenv.Eventually(t, 5*time.Second, "the listener closed", func() bool {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	close(feed.release)
	if status := <-inflight; status != 200 {
		t.Fatalf("request in flight during shutdown: status %d, want 200", status)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve after shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after shutdown")
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Fatal("server still accepts connections after shutdown")
	}
}

// countingListener counts the write calls its connections make on the
// socket, to show how many write syscalls a response costs.
type countingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, l: l}, nil
}

type countingConn struct {
	net.Conn
	l *countingListener
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.l.writes.Add(1)
	return c.Conn.Write(p)
}

// A page larger than net/http's 4 KiB write buffer goes out in one write,
// whole, and the keep-alive connection serves the next request, on either
// server.
func TestLargePageOneWrite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		server  string
		content int // bytes of each post's content
	}{{api.HTTPServerH1, 10}, {api.HTTPServerH1, 180}, {api.HTTPServerH1, 580},
		{api.HTTPServerNetHTTP, 10}, {api.HTTPServerNetHTTP, 180}, {api.HTTPServerNetHTTP, 580}} {
		t.Run(tc.server+"/"+strconv.Itoa(tc.content*20/1024)+"KiB", func(t *testing.T) {
			t.Parallel()
			var page queries.Page
			for i := range 20 {
				page.Items = append(page.Items, queries.Post{
					ID: strconv.Itoa(1000 + i), AuthorID: "7",
					Content:   strings.Repeat(string(rune('a'+i)), tc.content),
					CreatedAt: "2026-12-01T10:00:00.000Z",
				})
			}
			want, err := json.Marshal(page)
			if err != nil {
				t.Fatal(err)
			}
			e := setup(t, options{cfg: api.Config{HTTPServer: tc.server}, tweak: func(d *api.Deps) { d.Feed = staticFeed{page} }})
			e.user(t, 1)
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ln := &countingListener{Listener: inner}
			serveOn(t, e.srv, ln)
			client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
			defer client.CloseIdleConnections()
			const reads = 3
			for range reads {
				req, _ := http.NewRequest("GET", "http://"+inner.Addr().String()+"/api/feed", nil)
				req.Header.Set("Authorization", e.bearer(1))
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != 200 || resp.ContentLength != int64(len(want)) {
					t.Fatalf("status %d, length %d; want 200, %d", resp.StatusCode, resp.ContentLength, len(want))
				}
				var got, exp any
				if err := json.Unmarshal(body, &got); err != nil {
					t.Fatalf("body: %v", err)
				}
				_ = json.Unmarshal(want, &exp)
				if !reflect.DeepEqual(got, exp) {
					t.Fatalf("body of %d bytes differs from the page of %d", len(body), len(want))
				}
			}
			if n := ln.writes.Load(); n != reads {
				t.Fatalf("%d responses of %d bytes took %d writes, want one each", reads, len(want), n)
			}
		})
	}
}
