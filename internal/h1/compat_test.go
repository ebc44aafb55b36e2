package h1

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"
)

// The same requests, sent byte for byte to this server and to net/http's
// with the same handler, get the same answers: status, body, the framing
// and type headers, and whether the connection stays open. The handler
// reports what it saw of the request (method, target, Host, header,
// body), so a difference in parsing shows too.
func TestSameAnswersAsNetHTTP(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
		keys := make([]string, 0, len(r.Header))
		for k := range r.Header {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		switch r.URL.Path {
		case "/status":
			w.WriteHeader(http.StatusTeapot)
		case "/empty":
			return
		case "/html":
			_, _ = io.WriteString(w, "<!DOCTYPE html><p>x</p>")
			return
		case "/nocontent":
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "%s %s %s host=%s close=%v len=%d body=%q", r.Method, r.RequestURI, r.Proto, r.Host, r.Close, r.ContentLength, body)
		for _, k := range keys {
			fmt.Fprintf(w, " %s=%q", k, r.Header[k])
		}
	})
	quiet := log.New(io.Discard, "", 0)
	ours, theirs := listen(t), listen(t)
	hs := &Server{Handler: h, ErrorLog: quiet}
	ns := &http.Server{Handler: h, ErrorLog: quiet}
	go func() { _ = hs.Serve(ours) }()
	go func() { _ = ns.Serve(theirs) }()
	t.Cleanup(func() { _ = hs.Close(); _ = ns.Close() })

	for _, req := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /path?q=1&r=%20 HTTP/1.1\r\nHost: example.com:8080\r\nX-A: 1\r\nX-A: 2\r\nx-lower: v\r\n\r\n",
		"GET http://other.example/abs HTTP/1.1\r\nHost: ignored\r\n\r\n",
		"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n",
		"HEAD /empty HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
		"POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
		"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
		"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
		"GET /status HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /empty HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /html HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /nocontent HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nBad Header: v\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\n folded: v\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nExpect: something\r\n\r\n",
		"GET / HTTP/9.9\r\nHost: a\r\n\r\n",
		"GET /\r\n\r\n",
		"BREW / HTTP/1.1\r\nHost: a\r\n\r\n",
	} {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			a, b := exchange(t, ours.Addr().String(), req), exchange(t, theirs.Addr().String(), req)
			if a != b {
				t.Errorf("%q:\nh1:       %s\nnet/http: %s", req, a, b)
			}
		})
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// exchange sends req on a new connection and describes the answer: the
// status (the code alone for the refusals the servers word differently),
// the headers that carry meaning, the body, and whether the server then
// closed the connection.
func exchange(t *testing.T, addr, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	method := strings.Fields(req + " x")[0]
	res, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		return "no response: " + err.Error()
	}
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return "body: " + err.Error()
	}
	cl, ct := res.Header.Get("Content-Length"), res.Header.Get("Content-Type")
	if res.StatusCode >= 400 && res.StatusCode != http.StatusTeapot {
		body, cl, ct = nil, "", "" // net/http words and frames its refusals its own way
	}
	// A connection said to stay open serves a next request; one said to
	// close ends.
	closed := "closed"
	if !res.Close {
		_, _ = io.WriteString(c, "GET /empty HTTP/1.1\r\nHost: a\r\n\r\n")
		if next, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet}); err == nil && next.StatusCode == http.StatusOK {
			closed = "open"
		}
	} else if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		closed = "not closed after Connection: close"
	}
	return fmt.Sprintf("%d cl=%q te=%v ct=%q close=%v %s body=%q", res.StatusCode, cl, res.TransferEncoding, ct, res.Close, closed, body)
}
