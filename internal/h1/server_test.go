package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// start serves h on a loopback port; the server shuts down with the test.
func start(t *testing.T, h http.Handler, tune func(*Server)) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)}
	if tune != nil {
		tune(s)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return s, ln.Addr().String()
}

// rawConn is a client connection that writes bytes as they are given.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (rc *rawConn) send(s string) {
	rc.t.Helper()
	if _, err := io.WriteString(rc.c, s); err != nil {
		rc.t.Fatal(err)
	}
}

// read reads one response to a request of method; it returns the response
// and its body.
func (rc *rawConn) read(method string) (*http.Response, string) {
	rc.t.Helper()
	res, err := http.ReadResponse(rc.br, &http.Request{Method: method})
	if err != nil {
		rc.t.Fatalf("read response: %v", err)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		rc.t.Fatalf("read body: %v", err)
	}
	return res, string(b)
}

// closed reports whether the server closed the connection (EOF with
// nothing more to read).
func (rc *rawConn) closed() bool {
	_ = rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := rc.br.Read(make([]byte, 1))
	return n == 0 && errors.Is(err, io.EOF)
}

func hello(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"path":"`+r.URL.Path+`"}`)
}

// A kept-alive connection serves request after request, through Go's own
// client, with the header net/http would send.
func TestKeepAliveThroughGoClient(t *testing.T) {
	_, addr := start(t, http.HandlerFunc(hello), nil)
	var reused atomic.Int64
	tr := &http.Transport{MaxIdleConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	for i := range 50 {
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) {
				if info.Reused {
					reused.Add(1)
				}
			},
		})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/p/"+strconv.Itoa(i), nil)
		res, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		want := `{"path":"/p/` + strconv.Itoa(i) + `"}`
		if res.StatusCode != 200 || string(b) != want {
			t.Fatalf("request %d: %d %q, want 200 %q", i, res.StatusCode, b, want)
		}
		if res.ContentLength != int64(len(want)) || res.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("request %d: Content-Length %d, Content-Type %q", i, res.ContentLength, res.Header.Get("Content-Type"))
		}
		if _, err := http.ParseTime(res.Header.Get("Date")); err != nil {
			t.Fatalf("Date %q: %v", res.Header.Get("Date"), err)
		}
	}
	if reused.Load() != 49 {
		t.Fatalf("%d of 49 requests reused the connection", reused.Load())
	}
}

// Pipelined requests are answered in order on the connection.
func TestPipelined(t *testing.T) {
	_, addr := start(t, http.HandlerFunc(hello), nil)
	rc := dial(t, addr)
	rc.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\nGET /c HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, p := range []string{"/a", "/b", "/c"} {
		if _, body := rc.read("GET"); body != `{"path":"`+p+`"}` {
			t.Fatalf("got %q, want the answer to %s", body, p)
		}
	}
}

func echo(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write(b)
}

// Request bodies with a Content-Length and chunked ones reach the handler
// whole, and the connection serves the next request.
func TestRequestBodies(t *testing.T) {
	_, addr := start(t, http.HandlerFunc(echo), nil)
	rc := dial(t, addr)
	rc.send("POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
	if _, body := rc.read("POST"); body != "hello" {
		t.Fatalf("Content-Length body: %q", body)
	}
	rc.send("POST /e HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n")
	if _, body := rc.read("POST"); body != "abcdefg" {
		t.Fatalf("chunked body: %q", body)
	}
	// Both framings at once: chunked wins (RFC 9112 6.3), as in net/http,
	// and the bytes after the chunked body are the next request.
	rc.send("POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n" +
		"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nz")
	if _, body := rc.read("POST"); body != "ab" {
		t.Fatalf("Content-Length with chunked: %q, want the chunked body", body)
	}
	if _, body := rc.read("POST"); body != "z" {
		t.Fatalf("the request after it: %q", body)
	}
	// Two different lengths: refused.
	rc.send("POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd")
	if res, _ := rc.read("POST"); res.StatusCode != http.StatusBadRequest {
		t.Fatalf("two Content-Lengths: %d, want 400", res.StatusCode)
	}
	if !rc.closed() {
		t.Fatal("the connection stayed open after a refused request")
	}
}

// A body the handler does not read is dropped (up to maxDrainBytes) and
// the connection kept; a larger one closes the connection after the
// response.
func TestUnreadBody(t *testing.T) {
	_, addr := start(t, http.HandlerFunc(hello), nil)
	rc := dial(t, addr)
	rc.send("POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := rc.read("POST"); body != `{"path":"/small"}` {
		t.Fatalf("got %q", body)
	}
	if _, body := rc.read("GET"); body != `{"path":"/next"}` {
		t.Fatalf("the request after an unread body: %q", body)
	}
	big := maxDrainBytes + 10
	go func() {
		_, _ = io.WriteString(rc.c, "POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: "+strconv.Itoa(big)+"\r\n\r\n"+strings.Repeat("x", big))
	}()
	res, _ := rc.read("POST")
	if !res.Close {
		t.Fatal("a large unread body kept the connection open")
	}
}

// Expect: 100-continue: the interim answer comes when the handler reads
// the body; a handler that does not read it never asks for it, and the
// connection closes after the response.
func TestExpectContinue(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", echo)
	mux.HandleFunc("/refuse", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusForbidden) })
	_, addr := start(t, mux, nil)
	rc := dial(t, addr)
	rc.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
	line, err := rc.br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("interim response %q, %v", line, err)
	}
	if blank, _ := rc.br.ReadString('\n'); blank != "\r\n" {
		t.Fatalf("after 100 Continue: %q", blank)
	}
	rc.send("body")
	if _, body := rc.read("POST"); body != "body" {
		t.Fatalf("echo: %q", body)
	}
	rc.send("POST /refuse HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
	res, _ := rc.read("POST")
	if res.StatusCode != http.StatusForbidden || !res.Close {
		t.Fatalf("refused: %d, Connection: close %v", res.StatusCode, res.Close)
	}
	rc2 := dial(t, addr)
	rc2.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: something-else\r\n\r\nbody")
	if res, _ := rc2.read("POST"); res.StatusCode != http.StatusExpectationFailed {
		t.Fatalf("unknown expectation: %d, want 417", res.StatusCode)
	}
}

// HEAD gets the header a GET would (its Content-Length included), no body,
// and the connection goes on.
func TestHead(t *testing.T) {
	_, addr := start(t, http.HandlerFunc(hello), nil)
	rc := dial(t, addr)
	rc.send("HEAD /h HTTP/1.1\r\nHost: x\r\n\r\nGET /g HTTP/1.1\r\nHost: x\r\n\r\n")
	res, body := rc.read("HEAD")
	if res.StatusCode != 200 || body != "" || res.ContentLength != int64(len(`{"path":"/h"}`)) {
		t.Fatalf("HEAD: %d, body %q, Content-Length %d", res.StatusCode, body, res.ContentLength)
	}
	if _, body := rc.read("GET"); body != `{"path":"/g"}` {
		t.Fatalf("GET after HEAD: %q", body)
	}
}

// Connection: close from the client, and HTTP/1.0 without keep-alive, end
// the connection after the response; HTTP/1.0 with keep-alive keeps it.
func TestConnectionClose(t *testing.T) {
	_, addr := start(t, http.HandlerFunc(hello), nil)
	for _, tc := range []struct {
		req       string
		keepAlive bool
	}{
		{"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", false},
		{"GET /a HTTP/1.0\r\n\r\n", false},
		{"GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true},
	} {
		rc := dial(t, addr)
		rc.send(tc.req)
		res, body := rc.read("GET")
		if body != `{"path":"/a"}` || res.Close == tc.keepAlive {
			t.Fatalf("%q: body %q, Connection: close %v", tc.req, body, res.Close)
		}
		if tc.keepAlive {
			rc.send(tc.req)
			if _, body := rc.read("GET"); body != `{"path":"/a"}` {
				t.Fatalf("%q again: %q", tc.req, body)
			}
		} else if !rc.closed() {
			t.Fatalf("%q: the connection stayed open", tc.req)
		}
	}
}

// Requests the server cannot serve are refused as net/http refuses them,
// and the connection closes.
func TestRefused(t *testing.T) {
	var called atomic.Int64
	_, addr := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { called.Add(1) }), func(s *Server) { s.MaxHeaderBytes = 1 << 10 })
	for _, tc := range []struct {
		req    string
		status int
	}{
		{"GET /a HTTP/1.1\r\n\r\n", http.StatusBadRequest}, // no Host
		{"GET /a HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", http.StatusBadRequest},
		{"GET /a HTTP/1.1\r\nHost: x y\r\n\r\n", http.StatusBadRequest},
		{"NOT A REQUEST\r\n\r\n", http.StatusBadRequest},
		{"GET /a HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n", http.StatusBadRequest},
		{"GET /a HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("v", 8<<10) + "\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge},
		{"GET /a HTTP/2.0\r\nHost: x\r\n\r\n", http.StatusHTTPVersionNotSupported},
	} {
		rc := dial(t, addr)
		rc.send(tc.req)
		res, _ := rc.read("GET")
		if res.StatusCode != tc.status || !res.Close {
			t.Fatalf("%.40q: %d (Connection: close %v), want %d", tc.req, res.StatusCode, res.Close, tc.status)
		}
		if !rc.closed() {
			t.Fatalf("%.40q: the connection stayed open", tc.req)
		}
	}
	if called.Load() != 0 {
		t.Fatalf("the handler was called %d times for refused requests", called.Load())
	}
}

// A handler's panic is logged and answered 500 when nothing was sent; the
// connection closes and the server goes on serving.
func TestPanic(t *testing.T) {
	var logged bytes.Buffer
	var mu sync.Mutex
	mux := http.NewServeMux()
	mux.HandleFunc("/panic", func(http.ResponseWriter, *http.Request) { panic("boom") })
	mux.HandleFunc("/abort", func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) })
	mux.HandleFunc("/", hello)
	_, addr := start(t, mux, func(s *Server) { s.ErrorLog = log.New(lockedWriter{&mu, &logged}, "", 0) })
	rc := dial(t, addr)
	rc.send("GET /panic HTTP/1.1\r\nHost: x\r\n\r\n")
	if res, _ := rc.read("GET"); res.StatusCode != 500 || !res.Close {
		t.Fatalf("panic: %d, Connection: close %v", res.StatusCode, res.Close)
	}
	if !rc.closed() {
		t.Fatal("the connection stayed open after a panic")
	}
	rc = dial(t, addr)
	rc.send("GET /abort HTTP/1.1\r\nHost: x\r\n\r\n")
	if res, _ := rc.read("GET"); res.StatusCode != 500 {
		t.Fatalf("abort: %d", res.StatusCode)
	}
	rc = dial(t, addr)
	rc.send("GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := rc.read("GET"); body != `{"path":"/after"}` {
		t.Fatalf("after the panics: %q", body)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logged.String(), "panic serving"); n != 1 || !strings.Contains(logged.String(), "boom") {
		t.Fatalf("log: %d panics logged, want the one that is not ErrAbortHandler:\n%s", n, logged.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A large response without a Content-Length streams chunked; Flush sends
// what the handler has written before it returns; a declared
// Content-Length is kept and enforced.
func TestStreamingAndContentLength(t *testing.T) {
	release := make(chan struct{})
	big := strings.Repeat("0123456789", 30_000)
	mux := http.NewServeMux()
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < len(big); i += 1000 {
			_, _ = io.WriteString(w, big[i:i+1000])
		}
	})
	mux.HandleFunc("/flush", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first;")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
		<-release
		_, _ = io.WriteString(w, "second")
	})
	mux.HandleFunc("/declared", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "4")
		if _, err := io.WriteString(w, "abcde"); !errors.Is(err, http.ErrContentLength) {
			t.Errorf("writing past the declared length: %v, want http.ErrContentLength", err)
		}
		_, _ = io.WriteString(w, "abcd")
	})
	mux.HandleFunc("/short", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		_, _ = io.WriteString(w, "abc")
	})
	_, addr := start(t, mux, nil)
	rc := dial(t, addr)
	rc.send("GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	res, body := rc.read("GET")
	if body != big || len(res.TransferEncoding) != 1 || res.TransferEncoding[0] != "chunked" {
		t.Fatalf("big: %d bytes (want %d), Transfer-Encoding %v", len(body), len(big), res.TransferEncoding)
	}
	rc.send("GET /flush HTTP/1.1\r\nHost: x\r\n\r\n")
	res, err := http.ReadResponse(rc.br, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, len("first;"))
	if _, err := io.ReadFull(res.Body, first); err != nil || string(first) != "first;" {
		t.Fatalf("flushed part: %q, %v", first, err)
	}
	close(release)
	if rest, _ := io.ReadAll(res.Body); string(rest) != "second" {
		t.Fatalf("after the flush: %q", rest)
	}
	rc.send("GET /declared HTTP/1.1\r\nHost: x\r\n\r\n")
	if res, body := rc.read("GET"); body != "abcd" || res.ContentLength != 4 || res.Close {
		t.Fatalf("declared: %q, Content-Length %d, close %v", body, res.ContentLength, res.Close)
	}
	rc.send("GET /short HTTP/1.1\r\nHost: x\r\n\r\n")
	res, err = http.ReadResponse(rc.br, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(res.Body); string(b) != "abc" || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a body shorter than its Content-Length: %q, %v; want the connection closed after it", b, err)
	}
}

// Header values cannot inject header lines; 204 and 304 carry no body; a
// response without a Content-Type gets a sniffed one.
func TestResponseHeader(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/inject", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-A", "v\r\nX-Injected: 1")
		w.WriteHeader(200)
	})
	mux.HandleFunc("/nocontent", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		if _, err := io.WriteString(w, "x"); !errors.Is(err, http.ErrBodyNotAllowed) {
			t.Errorf("a body for 204: %v, want http.ErrBodyNotAllowed", err)
		}
	})
	mux.HandleFunc("/sniff", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "<html><body>hi</body></html>") })
	_, addr := start(t, mux, nil)
	rc := dial(t, addr)
	rc.send("GET /inject HTTP/1.1\r\nHost: x\r\n\r\n")
	res, _ := rc.read("GET")
	if res.Header.Get("X-Injected") != "" || res.Header.Get("X-A") != "v  X-Injected: 1" {
		t.Fatalf("header injection: %v", res.Header)
	}
	rc.send("GET /nocontent HTTP/1.1\r\nHost: x\r\n\r\nGET /sniff HTTP/1.1\r\nHost: x\r\n\r\n")
	if res, body := rc.read("GET"); res.StatusCode != 204 || body != "" || res.Header.Get("Content-Length") != "" {
		t.Fatalf("204: %d %q %v", res.StatusCode, body, res.Header)
	}
	if res, _ := rc.read("GET"); res.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("sniffed Content-Type %q", res.Header.Get("Content-Type"))
	}
}

// The request carries what handlers use: the remote address, the Host, a
// context that ends when the handler returns, the local address in it.
func TestRequestFields(t *testing.T) {
	ctxs := make(chan context.Context, 1)
	_, addr := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		la, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		fmt.Fprintf(w, "%s|%s|%s|%v|%s", r.Host, r.RequestURI, r.Header.Get("X-K"), la != nil, r.URL.Query().Get("q"))
		if r.RemoteAddr == "" {
			t.Error("no RemoteAddr")
		}
		ctxs <- r.Context()
	}), nil)
	rc := dial(t, addr)
	rc.send("GET /p?q=1 HTTP/1.1\r\nHost: example.com\r\nX-K: v\r\n\r\n")
	if _, body := rc.read("GET"); body != "example.com|/p?q=1|v|true|1" {
		t.Fatalf("got %q", body)
	}
	select {
	case <-(<-ctxs).Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the request's context did not end with its handler")
	}
}

// An idle connection closes after IdleTimeout; a client slower than
// ReadHeaderTimeout with its header is cut off.
func TestTimeouts(t *testing.T) {
	_, addr := start(t, http.HandlerFunc(hello), func(s *Server) {
		s.IdleTimeout = 200 * time.Millisecond
		s.ReadHeaderTimeout = 200 * time.Millisecond
	})
	rc := dial(t, addr)
	rc.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
	rc.read("GET")
	t0 := time.Now()
	if !rc.closed() {
		t.Fatal("the idle connection stayed open")
	}
	if el := time.Since(t0); el < 150*time.Millisecond {
		t.Fatalf("closed after %v, before IdleTimeout", el)
	}
	rc = dial(t, addr)
	rc.send("GET /a HTTP/1.1\r\nHo")
	// The line read so far is malformed by then: 400, as net/http answers.
	_ = rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(rc.br); err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 400 ") {
		t.Fatalf("a half-sent header: %q, %v; want a 400 and the connection closed", b, err)
	}
	rc = dial(t, addr) // a connection that never sends a byte
	if !rc.closed() {
		t.Fatal("a silent connection stayed open")
	}
}

// Shutdown closes idle connections at once, lets a request in flight
// finish (its response says Connection: close), then Serve returns
// http.ErrServerClosed and nothing more is accepted.
func TestShutdown(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "done")
	})
	mux.HandleFunc("/", hello)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	s := &Server{Handler: mux, ErrorLog: log.New(io.Discard, "", 0)}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	idle := dial(t, addr)
	idle.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
	idle.read("GET")
	busy := dial(t, addr)
	busy.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	if !idle.closed() {
		t.Fatal("Shutdown left an idle connection open")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	res, body := busy.read("GET")
	if body != "done" || !res.Close {
		t.Fatalf("the request in flight: %q, Connection: close %v", body, res.Close)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("a connection was accepted after Shutdown")
	}
	if err := s.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve after Shutdown: %v", err)
	}
}

// Shutdown gives up when its context ends and reports it; Close then ends
// the request in flight's connection.
func TestShutdownDeadline(t *testing.T) {
	entered := make(chan struct{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		time.Sleep(time.Second)
	}), ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = s.Serve(ln) }()
	rc := dial(t, ln.Addr().String())
	rc.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want context.DeadlineExceeded", err)
	}
	_ = s.Close()
	if !rc.closed() {
		t.Fatal("Close left the connection open")
	}
}
