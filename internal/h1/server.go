// Package h1 serves an http.Handler over HTTP/1.1 at a lower CPU cost per
// request than net/http's server, for the API's hot read path.
//
// net/http's server starts a background read on the connection for every
// request without a body (so that it can notice a client going away while
// the handler runs) and stops it when the handler returns: per request a
// goroutine, a read that finds nothing, two deadline changes and a
// wake-up, which on loopback cost about as much as the rest of the
// server's work. Server reads a request with net/http's own parser
// (http.ReadRequest), calls the handler with a ResponseWriter that gathers
// the response, and sends status line, headers and body in one write, on
// one goroutine per connection and nothing else. The handlers, the router
// (gorilla/mux) and the middleware are the same under both servers; the
// API keeps net/http's server beside this one (FEED_HTTP_SERVER=net/http).
// Measured by `feed bench`'s raw HTTP baselines (net/http and h1 serving
// the same page, docs/bench.md) and BenchmarkServe in this package.
//
// What it does not do, against net/http's server: HTTP/2, TLS, Hijack,
// trailers, and cancelling a request's context when its client goes away
// while the handler runs (the context ends when the handler returns, and
// the API bounds every request's work with its own timeout). Everything
// else a handler can see behaves as under net/http: keep-alive and
// pipelining, request bodies with a Content-Length or chunked, Expect:
// 100-continue, HEAD, a Content-Length computed for a gathered response
// and a sniffed Content-Type when the handler sets none, chunked streaming
// once the handler flushes or writes more than streamAfter bytes, Date,
// Connection: close, 400/417/431/501/505 for requests it cannot serve
// (TestSameAnswersAsNetHTTP compares the answers byte for byte), a
// recovered panic as 500, the four timeouts and a graceful Shutdown.
package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Server serves Handler over HTTP/1.1. Its zero value, with a Handler, is
// ready; the timeouts mean what they mean on http.Server.
type Server struct {
	Handler http.Handler
	// ReadHeaderTimeout bounds reading a request's header, from its first
	// byte; 0: ReadTimeout.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included; 0: none.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing the response, from the end of the
	// request's header; 0: none.
	WriteTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a kept-alive
	// connection, and for the first one; 0: ReadTimeout.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's line and header; more is 431.
	// 0: http.DefaultMaxHeaderBytes (1 MB).
	MaxHeaderBytes int
	// ErrorLog receives accept errors, panics and superfluous WriteHeader
	// calls; nil: the log package's standard logger.
	ErrorLog *log.Logger
	// BaseContext is the base of the requests' contexts; nil:
	// context.Background.
	BaseContext func(net.Listener) context.Context

	closing   atomic.Bool
	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
}

// Connection states, as Shutdown sees them.
const (
	stateIdle   int32 = iota // waiting for a request's first byte
	stateActive              // reading a request, running the handler or writing
	stateClosed              // closed by Shutdown while idle
)

const (
	// maxDrainBytes is how much of a request body the handler left unread
	// is read and dropped to keep the connection (net/http's figure);
	// beyond it the connection closes after the response.
	maxDrainBytes = 256 << 10
	// streamAfter is the gathered body's size from which the response goes
	// out as it is written (chunked without a Content-Length).
	streamAfter = 64 << 10
	// keepBuffer is the largest body buffer a connection keeps between
	// requests.
	keepBuffer = 64 << 10
)

// Serve accepts connections on ln and serves each on its own goroutine
// until Shutdown or Close, then returns http.ErrServerClosed; another
// accept error is returned as it is, except temporary ones (too many open
// files), which are retried after a pause.
func (s *Server) Serve(ln net.Listener) error {
	if !s.track(ln) {
		return http.ErrServerClosed
	}
	defer s.untrack(ln)
	base := context.Background()
	if s.BaseContext != nil {
		base = s.BaseContext(ln)
	}
	var pause time.Duration
	for {
		rwc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			if temporary(err) {
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				s.logf("h1: accept error: %v; retrying in %v", err, pause)
				time.Sleep(pause)
				continue
			}
			return err
		}
		pause = 0
		c := newConn(s, rwc, base)
		if !s.add(c) {
			_ = rwc.Close()
			return http.ErrServerClosed
		}
		go c.serve()
	}
}

func temporary(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// Shutdown stops accepting, closes idle connections, and waits for the
// active ones to finish their request and close (each answers with
// Connection: close), or for ctx to end: then it returns ctx's error and
// leaves the remaining connections to finish on their own.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	s.closeListeners()
	wait := time.Millisecond
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		if s.closeIdle() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			wait = min(2*wait, 100*time.Millisecond)
			t.Reset(wait)
		}
	}
}

// Close stops accepting and closes every connection at once.
func (s *Server) Close() error {
	s.closing.Store(true)
	s.closeListeners()
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.rwc.Close()
	}
	return nil
}

func (s *Server) track(ln net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	if s.listeners == nil {
		s.listeners = make(map[net.Listener]struct{})
	}
	s.listeners[ln] = struct{}{}
	return true
}

func (s *Server) untrack(ln net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.listeners, ln)
}

func (s *Server) closeListeners() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ln := range s.listeners {
		_ = ln.Close()
	}
}

func (s *Server) add(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	if s.conns == nil {
		s.conns = make(map[*conn]struct{})
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) remove(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

// closeIdle closes the idle connections and reports whether none is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) {
			_ = c.rwc.Close()
		}
	}
	return len(s.conns) == 0
}

func (s *Server) logf(format string, args ...any) {
	if s.ErrorLog != nil {
		s.ErrorLog.Printf(format, args...)
	} else {
		log.Printf(format, args...)
	}
}

func (s *Server) maxHeaderBytes() int64 {
	if s.MaxHeaderBytes > 0 {
		return int64(s.MaxHeaderBytes)
	}
	return http.DefaultMaxHeaderBytes
}

// conn is one connection: its reader, its response writer and buffers,
// reused from request to request.
type conn struct {
	srv   *Server
	rwc   net.Conn
	ctx   context.Context
	addr  string
	state atomic.Int32
	lr    limitReader
	br    *bufio.Reader
	w     response
	out   []byte // status line and header of the response being sent
	date  dateCache
}

func newConn(s *Server, rwc net.Conn, base context.Context) *conn {
	c := &conn{srv: s, rwc: rwc, addr: rwc.RemoteAddr().String()}
	c.ctx = context.WithValue(base, http.LocalAddrContextKey, rwc.LocalAddr())
	c.lr.r = rwc
	c.br = bufio.NewReaderSize(&c.lr, 4<<10)
	c.w.c = c
	c.w.header = make(http.Header, 8)
	return c
}

// limitReader reads from r at most n bytes, then reports io.EOF and hit.
type limitReader struct {
	r   io.Reader
	n   int64
	hit bool
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		l.hit = true
		return 0, io.EOF
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

func (c *conn) serve() {
	defer func() {
		if v := recover(); v != nil && v != http.ErrAbortHandler {
			c.srv.logf("h1: panic serving %s: %v\n%s", c.addr, v, stack())
		}
		_ = c.rwc.Close()
		c.srv.remove(c)
	}()
	s := c.srv
	wait := cmpDur(s.ReadHeaderTimeout, s.ReadTimeout) // for the first request
	for {
		// Idle: wait for the next request's first byte.
		c.state.Store(stateIdle)
		if s.closing.Load() {
			return
		}
		c.setReadDeadline(wait)
		wait = cmpDur(s.IdleTimeout, s.ReadTimeout)
		c.lr.n, c.lr.hit = s.maxHeaderBytes()+4<<10, false
		if _, err := c.br.Peek(1); err != nil {
			return
		}
		if !c.state.CompareAndSwap(stateIdle, stateActive) {
			return // closed by Shutdown meanwhile
		}
		if !c.serveRequest() {
			return
		}
	}
}

// serveRequest reads one request, runs the handler and writes the
// response; it reports whether the connection may serve another.
func (c *conn) serveRequest() bool {
	s := c.srv
	start := time.Now()
	if d := cmpDur(s.ReadHeaderTimeout, s.ReadTimeout); d > 0 {
		_ = c.rwc.SetReadDeadline(start.Add(d))
	}
	req, err := http.ReadRequest(c.br)
	if err != nil {
		switch {
		case c.lr.hit:
			c.fail(http.StatusRequestHeaderFieldsTooLarge, "")
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed), isTimeout(err):
		case strings.HasPrefix(err.Error(), "unsupported transfer encoding"):
			// net/http's unsupportedTEError, unexported: 501 as it answers
			c.fail(http.StatusNotImplemented, "")
		default:
			var ne *net.OpError
			if !errors.As(err, &ne) {
				c.fail(http.StatusBadRequest, "")
			}
		}
		return false
	}
	c.lr.n = math.MaxInt64 // the body's framing bounds it
	if s.ReadTimeout > 0 {
		_ = c.rwc.SetReadDeadline(start.Add(s.ReadTimeout))
	} else if s.ReadHeaderTimeout > 0 {
		_ = c.rwc.SetReadDeadline(time.Time{})
	}
	if s.WriteTimeout > 0 {
		_ = c.rwc.SetWriteDeadline(time.Now().Add(s.WriteTimeout))
	}
	if msg, status := check(req); status != 0 {
		c.fail(status, msg)
		return false
	}
	req.RemoteAddr = c.addr
	w := &c.w
	w.reset(req)
	if expectContinue(req) {
		if req.ContentLength != 0 {
			w.cont = &continueReader{w: w, r: req.Body}
			req.Body = w.cont
		}
	} else if req.Header.Get("Expect") != "" {
		c.fail(http.StatusExpectationFailed, "")
		return false
	}
	ctx, cancel := context.WithCancel(c.ctx)
	req = req.WithContext(ctx)
	w.req = req
	ok := c.runHandler(w, req)
	cancel()
	if !ok {
		return false
	}
	if !w.finish() {
		if w.unread && w.err == nil {
			c.lingerClose()
		}
		return false
	}
	return !s.closing.Load()
}

// runHandler calls the handler; a panic is logged (except
// http.ErrAbortHandler) and answered 500 when nothing was sent yet, and
// closes the connection.
func (c *conn) runHandler(w *response, req *http.Request) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				c.srv.logf("h1: panic serving %s %s for %s: %v\n%s", req.Method, req.URL.Path, c.addr, v, stack())
			}
			if !w.headerSent {
				c.fail(http.StatusInternalServerError, "")
			}
			ok = false
		}
	}()
	c.srv.Handler.ServeHTTP(w, req)
	return true
}

func stack() []byte {
	buf := make([]byte, 64<<10)
	return buf[:runtime.Stack(buf, false)]
}

// check is what net/http refuses before calling a handler that
// http.ReadRequest has not refused already (it has moved the Host header
// to req.Host and refused several, and net/textproto has checked every
// header value, but it keeps a name with a space as it came; a Host
// header that is present but empty counts as missing).
func check(req *http.Request) (string, int) {
	if req.ProtoMajor != 1 {
		return "", http.StatusHTTPVersionNotSupported
	}
	if req.ProtoAtLeast(1, 1) && req.Host == "" && req.Method != http.MethodConnect {
		return "missing required Host header", http.StatusBadRequest
	}
	if !httpguts.ValidHostHeader(req.Host) {
		return "malformed Host header", http.StatusBadRequest
	}
	for k := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return "invalid header name", http.StatusBadRequest
		}
	}
	return "", 0
}

func expectContinue(req *http.Request) bool {
	return req.ProtoAtLeast(1, 1) && httpguts.HeaderValuesContainsToken(req.Header["Expect"], "100-continue")
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func cmpDur(a, b time.Duration) time.Duration {
	if a > 0 {
		return a
	}
	return b
}

func (c *conn) setReadDeadline(d time.Duration) {
	if d > 0 {
		_ = c.rwc.SetReadDeadline(time.Now().Add(d))
	} else {
		_ = c.rwc.SetReadDeadline(time.Time{})
	}
}

// fail answers a request the server refuses, as net/http does (plain
// text, Connection: close); the caller then closes the connection. The
// client may still be sending (a header too large, a body never asked
// for): its bytes are read and dropped for a moment after the answer, so
// that closing with unread input does not reset the connection before the
// client has read the answer.
func (c *conn) fail(status int, msg string) {
	text := strconv.Itoa(status) + " " + http.StatusText(status)
	if msg != "" {
		text += ": " + msg
	}
	_ = c.rwc.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := io.WriteString(c.rwc, "HTTP/1.1 "+strconv.Itoa(status)+" "+http.StatusText(status)+
		"\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: "+
		strconv.Itoa(len(text))+"\r\n\r\n"+text)
	if err == nil {
		c.lingerClose()
	}
}

// lingerClose sends FIN and drops the client's further bytes for up to
// half a second (net/http's delay for the same reason) or until it closes.
func (c *conn) lingerClose() {
	cw, ok := c.rwc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	_ = c.rwc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, _ = io.CopyN(io.Discard, c.rwc, 1<<20)
}

// continueReader sends "100 Continue" before the body's first read.
type continueReader struct {
	w    *response
	r    io.ReadCloser
	sent bool
}

func (cr *continueReader) Read(p []byte) (int, error) {
	if !cr.sent {
		cr.sent = true
		if !cr.w.headerSent {
			if _, err := io.WriteString(cr.w.c.rwc, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
				return 0, err
			}
		}
	}
	return cr.r.Read(p)
}

func (cr *continueReader) Close() error { return cr.r.Close() }

// dateCache is the Date header's value, formatted once a second.
type dateCache struct {
	sec int64
	val []byte
}

func (d *dateCache) get(now time.Time) []byte {
	if s := now.Unix(); s != d.sec || d.val == nil {
		d.sec = s
		d.val = now.UTC().AppendFormat(d.val[:0], http.TimeFormat)
	}
	return d.val
}

// response is the connection's http.ResponseWriter and http.Flusher. The
// body gathers in buf and goes out with the header in one write when the
// handler returns; past streamAfter bytes, or on Flush, the header goes
// out and the body follows as it is written (chunked when the handler set
// no Content-Length).
type response struct {
	c           *conn
	req         *http.Request
	header      http.Header
	status      int
	wroteHeader bool
	headerSent  bool
	chunked     bool
	closeAfter  bool
	unread      bool // the request body was not all read
	cont        *continueReader
	declared    int64 // Content-Length the handler set; -1: none
	written     int64 // body bytes the handler wrote
	buf         []byte
	err         error // the first write error on the connection
}

func (w *response) reset(req *http.Request) {
	clear(w.header)
	if cap(w.buf) > keepBuffer {
		w.buf = nil
	}
	*w = response{c: w.c, req: req, header: w.header, buf: w.buf[:0], declared: -1}
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.wroteHeader {
		w.c.srv.logf("h1: superfluous WriteHeader(%d) for %s %s", code, w.req.Method, w.req.URL.Path)
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		w.informational(code)
		return
	}
	w.wroteHeader, w.status = true, code
	if cl := w.header.Get("Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.declared = v
		} else {
			w.c.srv.logf("h1: invalid Content-Length %q for %s %s", cl, w.req.Method, w.req.URL.Path)
			w.header.Del("Content-Length")
		}
	}
}

// informational sends a 1xx response at once, with the header so far.
func (w *response) informational(code int) {
	b := w.statusLine(w.c.out[:0], code)
	b = w.appendHeader(b)
	b = append(b, "\r\n"...)
	w.c.out = b
	w.send(b)
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.declared >= 0 && w.written+int64(len(p)) > w.declared {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if w.req.Method == http.MethodHead {
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	if len(w.buf) >= streamAfter {
		w.stream()
	}
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// Flush sends the header and what the body has so far.
func (w *response) Flush() { _ = w.FlushError() }

// FlushError is Flush, reporting the write's error (http.ResponseController).
func (w *response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.stream()
	return w.err
}

// stream sends the header if not yet sent, then the body gathered so far.
func (w *response) stream() {
	if !w.headerSent {
		w.chunked = w.declared < 0 && bodyAllowed(w.status) && w.req.Method != http.MethodHead && w.req.ProtoAtLeast(1, 1)
		if w.declared < 0 && !w.chunked && bodyAllowed(w.status) && w.req.Method != http.MethodHead {
			w.closeAfter = true // HTTP/1.0: the body ends with the connection
		}
		w.sendHeader(false)
	}
	if len(w.buf) == 0 {
		return
	}
	if w.chunked {
		b := strconv.AppendInt(w.c.out[:0], int64(len(w.buf)), 16)
		b = append(b, "\r\n"...)
		w.c.out = b
		w.send(b, w.buf, crlf)
	} else {
		w.send(w.buf)
	}
	w.buf = w.buf[:0]
}

var crlf = []byte("\r\n")

// finish ends the response after the handler returned and reports whether
// the connection may serve another request.
func (w *response) finish() bool {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	req := w.req
	if req.Close || w.c.srv.closing.Load() || httpguts.HeaderValuesContainsToken(w.header["Connection"], "close") {
		w.closeAfter = true
	}
	if w.declared >= 0 && w.written != w.declared && req.Method != http.MethodHead {
		w.closeAfter = true // the client would wait for the missing bytes
	}
	w.discardBody()
	if !w.headerSent {
		w.sendHeader(true)
	} else if w.chunked {
		b := w.c.out[:0]
		if len(w.buf) > 0 {
			b = strconv.AppendInt(b, int64(len(w.buf)), 16)
			b = append(b, "\r\n"...)
			b = append(b, w.buf...)
			b = append(b, "\r\n"...)
		}
		b = append(b, "0\r\n\r\n"...)
		w.c.out = b
		w.send(b)
	} else if len(w.buf) > 0 {
		w.send(w.buf)
	}
	return !w.closeAfter && w.err == nil
}

// discardBody reads what the handler left of the request body, up to
// maxDrainBytes, so that the connection can serve the next request; a
// body the client has not sent because it waits for 100 Continue is not
// asked for: the connection closes instead.
func (w *response) discardBody() {
	body := w.req.Body
	if body == nil || body == http.NoBody {
		return
	}
	if w.cont != nil && !w.cont.sent {
		w.closeAfter, w.unread = true, true
		return
	}
	if w.cont != nil {
		body = w.cont.r
	}
	n, err := io.CopyN(io.Discard, body, maxDrainBytes+1)
	if err != io.EOF || n > maxDrainBytes {
		w.closeAfter, w.unread = true, true
	}
}

func (w *response) statusLine(b []byte, code int) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	if text := http.StatusText(code); text != "" {
		b = append(b, text...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	return append(b, "\r\n"...)
}

var newlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")

// appendHeader appends the handler's header fields: a field with an
// invalid name is left out and newlines in values become spaces, as
// net/http does; Connection and Transfer-Encoding are the server's.
func (w *response) appendHeader(b []byte) []byte {
	for k, vv := range w.header {
		if k == "Connection" || k == "Transfer-Encoding" {
			continue
		}
		if !httpguts.ValidHeaderFieldName(k) {
			w.c.srv.logf("h1: invalid header field name %q dropped", k)
			continue
		}
		for _, v := range vv {
			if strings.ContainsAny(v, "\r\n") {
				v = newlineToSpace.Replace(v)
			}
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, strings.TrimSpace(v)...)
			b = append(b, "\r\n"...)
		}
	}
	return b
}

// sendHeader sends the status line and header; when complete (the
// handler has returned), the body follows in the same write, its length
// gives the Content-Length and, when the handler set no Content-Type, it
// is sniffed from the body.
func (w *response) sendHeader(complete bool) {
	w.headerSent = true
	h := w.header
	allowed := bodyAllowed(w.status)
	head := w.req.Method == http.MethodHead
	b := w.statusLine(w.c.out[:0], w.status)
	if _, dated := h["Date"]; !dated {
		b = append(b, "Date: "...)
		b = append(b, w.c.date.get(time.Now())...)
		b = append(b, "\r\n"...)
	}
	if complete && allowed && w.declared < 0 && (w.written > 0 || !head) {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, w.written, 10)
		b = append(b, "\r\n"...)
	}
	if _, typed := h["Content-Type"]; !typed && allowed && len(w.buf) > 0 {
		b = append(b, "Content-Type: "...)
		b = append(b, http.DetectContentType(w.buf[:min(len(w.buf), 512)])...)
		b = append(b, "\r\n"...)
	}
	if w.chunked {
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	if w.closeAfter {
		b = append(b, "Connection: close\r\n"...)
	} else if !w.req.ProtoAtLeast(1, 1) {
		b = append(b, "Connection: keep-alive\r\n"...)
	}
	b = w.appendHeader(b)
	b = append(b, "\r\n"...)
	if complete && allowed && !head {
		b = append(b, w.buf...)
		w.buf = w.buf[:0]
	}
	w.c.out = b
	w.send(b)
}

// send writes bufs in one system call when there are several (writev).
func (w *response) send(bufs ...[]byte) {
	if w.err != nil {
		return
	}
	if len(bufs) == 1 {
		_, w.err = w.c.rwc.Write(bufs[0])
	} else {
		nb := net.Buffers(bufs)
		_, w.err = nb.WriteTo(w.c.rwc)
	}
	if w.err != nil {
		w.closeAfter = true
	}
}
