package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/feedco/feed/bench/internal/rawsock"
)

// leanClient is the benchmark's HTTP/1.1 client: keep-alive connections
// from a pool, one request at a time per connection, the request written
// with one write and the response read in the calling goroutine. The
// benchmark shares the machine with the system it measures, and what the
// client burns, the server does not get: net/http's client, the plain one
// beside it (Deps.HTTP), runs a reader and a writer goroutine per
// connection and makes a Request and a Response with their header maps
// per call, about three times the allocations per request
// (BenchmarkClient in httpc_test.go). It speaks only what the API needs:
// plain http, bodies framed by Content-Length or chunked encoding, no
// redirects, no compression, no 1xx other than 100 Continue skipped.
// Anything else is an error, and the connection is dropped.
//
// Its connections read and write with raw system calls (internal/rawsock)
// unless plain is set. The load generator runs at one P (Config.Procs),
// where the runtime takes the P from nearly every loopback write (it
// outlasts a tick of sysmon, and no other P is idle) and sysmon, finding
// such work every tick, keeps polling every 20 µs. `feedbench` with and
// without --plain-sockets (the plain version) compares the two
// (docs/benchmarks.md, "Raw socket calls").
type leanClient struct {
	addr    string // host:port
	host    string // the Host header
	timeout time.Duration
	dial    net.Dialer
	plain   bool // Go's own socket calls instead of rawsock's

	mu      sync.Mutex
	idle    []*leanConn
	max     int           // idle connections kept
	idleMax time.Duration // an idle connection older than this is closed, not reused
}

// leanIdleMax is below the idle timeouts of common servers (the API's is
// 60 s, net/http's client keeps 90 s): a server that closes a connection
// as the client sends on it costs the request a retry, or an error for a
// POST.
const leanIdleMax = 30 * time.Second

type leanConn struct {
	c         net.Conn
	br        *bufio.Reader
	wb        []byte
	idleSince time.Time
}

func newLeanClient(baseURL string, timeout time.Duration, maxIdle int) (*leanClient, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("base URL %q: %w", baseURL, err)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("base URL %q: only http:// is supported by the benchmark client", baseURL)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("base URL %q: a path prefix is not supported", baseURL)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return &leanClient{addr: addr, host: u.Host, timeout: timeout, max: maxIdle, idleMax: leanIdleMax}, nil
}

// get takes the most recently used idle connection (reused) or, with
// none younger than idleMax or when fresh is asked, dials one.
func (lc *leanClient) get(ctx context.Context, fresh bool) (c *leanConn, reused bool, err error) {
	var stale []*leanConn
	lc.mu.Lock()
	for !fresh && len(lc.idle) > 0 {
		n := len(lc.idle)
		c = lc.idle[n-1]
		lc.idle = lc.idle[:n-1]
		if time.Since(c.idleSince) <= lc.idleMax {
			break
		}
		stale, c = append(stale, c), nil
	}
	// The stack's bottom is its oldest: drop what has aged out there too.
	for len(lc.idle) > 0 && time.Since(lc.idle[0].idleSince) > lc.idleMax {
		stale = append(stale, lc.idle[0])
		lc.idle = lc.idle[1:]
	}
	lc.mu.Unlock()
	for _, s := range stale {
		_ = s.c.Close()
	}
	if c != nil {
		return c, true, nil
	}
	nc, err := lc.dial.DialContext(ctx, "tcp", lc.addr)
	if err != nil {
		return nil, false, err
	}
	if !lc.plain {
		nc = rawsock.Wrap(nc)
		if rc, ok := nc.(*rawsock.Conn); ok {
			// The reads' arrival at the socket (doAt); without it they
			// are timed when read.
			_ = rc.StampReceives()
		}
	}
	return &leanConn{c: nc, br: bufio.NewReaderSize(nc, 16<<10)}, false, nil
}

func (lc *leanClient) put(c *leanConn) {
	c.idleSince = time.Now()
	lc.mu.Lock()
	if len(lc.idle) < lc.max {
		lc.idle = append(lc.idle, c)
		c = nil
	}
	lc.mu.Unlock()
	if c != nil {
		_ = c.c.Close()
	}
}

// closeIdle closes the pooled connections.
func (lc *leanClient) closeIdle() {
	lc.mu.Lock()
	idle := lc.idle
	lc.idle = nil
	lc.mu.Unlock()
	for _, c := range idle {
		_ = c.c.Close()
	}
}

// do sends one request and returns the status and the whole body. A
// connection that was idle in the pool may have been closed by the server
// meanwhile; a request that fails on such a connection before any byte of
// the response arrived is retried once on a newly dialed connection (not
// another pooled one, which may be just as stale), as net/http does for
// idempotent requests (here: GET only).
func (lc *leanClient) do(ctx context.Context, method, path, auth, body string) (int, []byte, error) {
	st, b, _, err := lc.doAt(ctx, method, path, auth, body)
	return st, b, err
}

// doAt is do that also returns when the response's last bytes reached the
// client's socket (the kernel's receive timestamp, rawsock.Conn.Arrived):
// the zero Time with plain sockets or where the kernel gave none.
func (lc *leanClient) doAt(ctx context.Context, method, path, auth, body string) (int, []byte, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, time.Time{}, err
	}
	for attempt := 0; ; attempt++ {
		c, reused, err := lc.get(ctx, attempt > 0)
		if err != nil {
			return 0, nil, time.Time{}, err
		}
		var arrived time.Time
		st, b, noResponse, err := lc.roundTrip(ctx, c, method, path, auth, body, &arrived)
		if err == nil {
			return st, b, arrived, nil
		}
		_ = c.c.Close()
		var ne net.Error
		timeout := errors.As(err, &ne) && ne.Timeout()
		if attempt == 0 && reused && noResponse && !timeout && method == "GET" && ctx.Err() == nil {
			continue
		}
		return 0, nil, time.Time{}, err
	}
}

// roundTrip writes the request on c and reads the response. noResponse
// reports a failure before the status line arrived (a retry of a GET on a
// new connection is then safe). On success c goes back to the pool unless
// the server closes it, and *arrived is the response's arrival at the
// socket (see doAt); on failure the caller closes it.
func (lc *leanClient) roundTrip(ctx context.Context, c *leanConn, method, path, auth, body string, arrived *time.Time) (status int, b []byte, noResponse bool, err error) {
	deadline := time.Now().Add(lc.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := c.c.SetDeadline(deadline); err != nil {
		return 0, nil, true, err
	}
	w := append(c.wb[:0], method...)
	w = append(w, ' ')
	w = append(w, path...)
	w = append(w, " HTTP/1.1\r\nHost: "...)
	w = append(w, lc.host...)
	w = append(w, "\r\nUser-Agent: feed-bench\r\n"...)
	if auth != "" {
		w = append(w, "Authorization: "...)
		w = append(w, auth...)
		w = append(w, "\r\n"...)
	}
	if body != "" || method == "POST" || method == "PUT" {
		w = append(w, "Content-Type: application/json\r\nContent-Length: "...)
		w = strconv.AppendInt(w, int64(len(body)), 10)
		w = append(w, "\r\n"...)
	}
	w = append(w, "\r\n"...)
	w = append(w, body...)
	c.wb = w
	if _, err := c.c.Write(w); err != nil {
		return 0, nil, true, err
	}
	status, b, keep, err := readResponse(c.br, method == "HEAD")
	if err != nil {
		return 0, nil, status == 0, err
	}
	if rc, ok := c.c.(*rawsock.Conn); ok {
		// One request in flight a connection: the newest bytes read
		// are the response's last.
		*arrived = rc.Arrived()
	}
	if keep {
		lc.put(c)
	} else {
		_ = c.c.Close()
	}
	return status, b, false, nil
}

// readResponse reads one HTTP/1.1 response: its status, its body, and
// whether the connection can carry another request. status is 0 when
// nothing of the status line could be read.
func readResponse(br *bufio.Reader, head bool) (status int, body []byte, keep bool, err error) {
	for {
		line, err := readLine(br)
		if err != nil {
			return 0, nil, false, err
		}
		// "HTTP/1.1 200 OK"
		if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
			return 0, nil, false, fmt.Errorf("malformed status line %q", line)
		}
		status, err = strconv.Atoi(string(line[9:12]))
		if err != nil || status < 100 {
			return 0, nil, false, fmt.Errorf("malformed status line %q", line)
		}
		keep = line[7] == '1' // HTTP/1.1 keeps the connection by default
		length := int64(-1)
		chunked := false
		for {
			h, err := readLine(br)
			if err != nil {
				return status, nil, false, err
			}
			if len(h) == 0 {
				break
			}
			i := bytes.IndexByte(h, ':')
			if i <= 0 {
				return status, nil, false, fmt.Errorf("malformed header %q", h)
			}
			name, val := h[:i], bytes.TrimSpace(h[i+1:])
			switch {
			case bytes.EqualFold(name, []byte("Content-Length")):
				length, err = strconv.ParseInt(string(val), 10, 64)
				if err != nil || length < 0 {
					return status, nil, false, fmt.Errorf("malformed Content-Length %q", val)
				}
			case bytes.EqualFold(name, []byte("Transfer-Encoding")):
				if !bytes.EqualFold(val, []byte("chunked")) {
					return status, nil, false, fmt.Errorf("unsupported Transfer-Encoding %q", val)
				}
				chunked = true
			case bytes.EqualFold(name, []byte("Connection")):
				if bytes.EqualFold(val, []byte("close")) {
					keep = false
				} else if bytes.EqualFold(val, []byte("keep-alive")) {
					keep = true
				}
			}
		}
		if status == 100 {
			continue // 100 Continue: the real response follows
		}
		switch {
		case head || status == 204 || status == 304 || status < 200:
			return status, nil, keep, nil
		case chunked:
			body, err = readChunked(br)
			return status, body, keep && err == nil, err
		case length >= 0:
			body = make([]byte, length)
			if _, err := io.ReadFull(br, body); err != nil {
				return status, nil, false, err
			}
			return status, body, keep, nil
		default: // body until the server closes
			body, err = io.ReadAll(br)
			return status, body, false, err
		}
	}
}

func readChunked(br *bufio.Reader) ([]byte, error) {
	var body []byte
	for {
		line, err := readLine(br)
		if err != nil {
			return nil, err
		}
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i] // chunk extensions
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("malformed chunk size %q", line)
		}
		if n == 0 {
			for { // trailers, then the empty line
				t, err := readLine(br)
				if err != nil {
					return nil, err
				}
				if len(t) == 0 {
					return body, nil
				}
			}
		}
		start := len(body)
		body = append(body, make([]byte, n)...)
		if _, err := io.ReadFull(br, body[start:]); err != nil {
			return nil, err
		}
		if crlf, err := readLine(br); err != nil || len(crlf) != 0 {
			return nil, fmt.Errorf("chunk not followed by CRLF")
		}
	}
}

// readLine returns the next line without its CRLF (or LF). The slice is
// valid until the next read from br.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return nil, errors.New("header line too long")
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}
