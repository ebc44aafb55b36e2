package api

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
)

// Under net/http's server (FEED_HTTP_SERVER=net/http; internal/h1, the
// default, sends every response in one write by itself), net/http writes
// a response through a 4 KiB buffer over the connection:
// a response larger than that (a 20-post page is a little over 4 KiB) goes
// out as two write syscalls, the full buffer and, when the request
// finishes, the rest. On loopback and in a VM a write is the costliest
// step of a cached read (in BenchmarkReadHTTP each costs about as much as
// the query side's merge and hydration together), so a large response is
// gathered and sent in one write instead: oneShotListener wraps every
// accepted connection, Serve puts the connection in the request's context,
// and writeOneShot holds its writes while net/http writes the response,
// then sends them at once.

// oneShotListener accepts oneShotConns.
type oneShotListener struct{ net.Listener }

func (l oneShotListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if _, isTLS := c.(*tls.Conn); isTLS {
		return c, nil // net/http must see a *tls.Conn to serve TLS
	}
	return &oneShotConn{Conn: c}, nil
}

// oneShotConn passes writes through, except while held: then it copies them
// and release sends the copies as one write. Only the goroutine serving the
// connection's request writes to it (net/http's background read only
// reads), so holding needs no lock.
type oneShotConn struct {
	net.Conn
	holding bool
	held    []byte
}

func (c *oneShotConn) Write(p []byte) (int, error) {
	if c.holding {
		c.held = append(c.held, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// CloseWrite keeps net/http's graceful close (a FIN before the close) for
// TCP connections.
func (c *oneShotConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *oneShotConn) hold() { c.holding = true }

// release sends what was held in one write. A failed write closes the
// connection: the response is lost either way, and the client sees the
// connection end, not a truncated response followed by the next one.
func (c *oneShotConn) release() {
	c.holding = false
	if len(c.held) == 0 {
		return
	}
	_, err := c.Conn.Write(c.held)
	if cap(c.held) > 64<<10 { // do not keep a rare huge response's buffer
		c.held = nil
	} else {
		c.held = c.held[:0]
	}
	if err != nil {
		_ = c.Conn.Close()
	}
}

type oneShotKey struct{}

// oneShotContext is http.Server.ConnContext: it records a oneShotConn in
// its requests' context.
func oneShotContext(ctx context.Context, c net.Conn) context.Context {
	if oc, ok := c.(*oneShotConn); ok {
		return context.WithValue(ctx, oneShotKey{}, oc)
	}
	return ctx
}

// oneShotMin is the body size from which writeOneShot gathers the
// response: below it, headers and body fit net/http's buffer and go out in
// one write anyway.
const oneShotMin = 3 << 10

// writeOneShot is writeRaw in one write syscall when r came through Serve's
// listener: it holds the connection's writes, writes the response, flushes
// net/http's buffers into the held bytes and sends them.
func writeOneShot(w http.ResponseWriter, r *http.Request, status int, body []byte) {
	c, _ := r.Context().Value(oneShotKey{}).(*oneShotConn)
	if c == nil || len(body) < oneShotMin || r.Method == http.MethodHead {
		writeRaw(w, status, body)
		return
	}
	c.hold()
	defer c.release()
	writeRaw(w, status, body)
	_ = http.NewResponseController(w).Flush()
}
