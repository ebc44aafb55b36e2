package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
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

// Shutdown lets a request in flight finish, then Serve returns nil and the
// port no longer accepts.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	feed := &stubFeed{entered: make(chan struct{}, 1), release: make(chan struct{})}
	e := setup(t, options{tweak: func(d *api.Deps) { d.Feed = feed }})
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

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// A page larger than net/http's 4 KiB write buffer arrives whole, with its
// Content-Length, and the keep-alive connection serves the next request.
func TestLargePage(t *testing.T) {
	t.Parallel()
	for _, content := range []int{10, 180, 580} { // bytes of each post's content
		t.Run(strconv.Itoa(content*20/1024)+"KiB", func(t *testing.T) {
			t.Parallel()
			var page queries.Page
			for i := range 20 {
				page.Items = append(page.Items, queries.Post{
					ID: strconv.Itoa(1000 + i), AuthorID: "7",
					Content:   strings.Repeat(string(rune('a'+i)), content),
					CreatedAt: "2026-12-01T10:00:00.000Z",
				})
			}
			want, err := json.Marshal(page)
			if err != nil {
				t.Fatal(err)
			}
			e := setup(t, options{tweak: func(d *api.Deps) { d.Feed = staticFeed{page} }})
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
			if n := ln.accepted.Load(); n != 1 {
				t.Fatalf("%d reads took %d connections, want one kept alive", reads, n)
			}
		})
	}
}

// A body over MaxBodyBytes is 413, and the server closes the connection
// after it instead of reading the rest of the body as the next request.
func TestOversizedBodyClosesConnection(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, e.srv, ln)
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil { // a hang fails, not blocks
		t.Fatal(err)
	}
	body := `{"name":"` + strings.Repeat("a", 70<<10) + `"}`
	head := "POST /api/users HTTP/1.1\r\nHost: feed\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	go func() { _, _ = io.WriteString(conn, head+body) }() // the server may stop reading it
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var p struct{ Type string }
	if resp.StatusCode != 413 || json.Unmarshal(b, &p) != nil || !strings.HasSuffix(p.Type, "#payload-too-large") {
		t.Fatalf("oversized body: %d %s", resp.StatusCode, b)
	}
	if !resp.Close {
		t.Fatalf("413 without Connection: close: %v", resp.Header)
	}
	n, err := br.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("after the 413 the connection is still open: read %d bytes, %v", n, err)
	}
}

// A request line and header over MaxHeaderBytes are 431.
func TestMaxHeaderBytes(t *testing.T) {
	t.Parallel()
	e := setup(t, options{cfg: api.Config{MaxHeaderBytes: 4 << 10}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, e.srv, ln)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for _, tc := range []struct {
		size, want int
	}{{1 << 10, 200}, {16 << 10, 431}} {
		req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/healthz", nil)
		req.Header.Set("X-Padding", strings.Repeat("p", tc.size))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Fatalf("a %d-byte header: %d, want %d", tc.size, resp.StatusCode, tc.want)
		}
	}
}
