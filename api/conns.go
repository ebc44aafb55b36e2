package api

import (
	"net"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
)

// Connections: Serve holds at most Config.MaxConns open at once
// (netutil.LimitListener: beyond it, the listener stops accepting and new
// connections wait in the kernel's backlog until one closes, so the
// process never runs out of file descriptors), and at most
// Config.MaxIdleConns kept alive between requests: a connection that goes
// idle beyond that bound is closed at once (its client reconnects for its
// next request). A connection that sends nothing is closed by the server's
// ReadHeaderTimeout, an idle one by its IdleTimeout.

// connTracker counts the server's connections, open and idle, and closes
// those that go idle beyond maxIdle.
type connTracker struct {
	maxOpen, maxIdle int64 // 0: no bound
	open, idle       atomic.Int64
	idleClosed       prometheus.Counter
}

// listener bounds ln's open connections and counts them.
func (t *connTracker) listener(ln net.Listener) net.Listener {
	if t.maxOpen > 0 {
		ln = netutil.LimitListener(ln, int(t.maxOpen))
	}
	return &trackedListener{Listener: ln, t: t}
}

type trackedListener struct {
	net.Listener
	t *connTracker
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.t.open.Add(1)
	return &trackedConn{Conn: c}, nil
}

// trackedConn is a connection of the server's, with its last state and
// its requests' framing (framing.go).
type trackedConn struct {
	net.Conn
	idle atomic.Bool
	framedConn
}

func (c *trackedConn) Read(p []byte) (int, error) { return c.read(c.Conn, p) }

// state is the http.Server's ConnState hook.
func (t *connTracker) state(c net.Conn, s http.ConnState) {
	tc, ok := c.(*trackedConn)
	if !ok {
		return
	}
	wasIdle := tc.idle.Swap(s == http.StateIdle)
	switch {
	case s == http.StateIdle && !wasIdle:
		if n := t.idle.Add(1); t.maxIdle > 0 && n > t.maxIdle {
			// The server then fails to read its next request and closes
			// it (StateClosed below).
			t.idleClosed.Inc()
			_ = tc.Conn.Close()
		}
	case s != http.StateIdle && wasIdle:
		t.idle.Add(-1)
	}
	if s == http.StateClosed || s == http.StateHijacked {
		t.open.Add(-1)
	}
}

// register exports the counts.
func (t *connTracker) register(reg prometheus.Registerer) error {
	t.idleClosed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "feed_http_idle_closed_total",
		Help: "Kept-alive connections closed as they went idle because FEED_MAX_IDLE_CONNS were idle already.",
	})
	cs := []prometheus.Collector{t.idleClosed}
	for _, g := range []struct {
		state string
		n     *atomic.Int64
	}{{"open", &t.open}, {"idle", &t.idle}} {
		n := g.n
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "feed_http_connections",
			Help:        "Connections of the API's server: open (bounded by FEED_MAX_CONNS) and idle between requests (bounded by FEED_MAX_IDLE_CONNS).",
			ConstLabels: prometheus.Labels{"state": g.state},
		}, func() float64 { return float64(n.Load()) }))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Conns returns the server's open and idle connections (for tests;
// feed_http_connections says the same).
func (s *Server) Conns() (open, idle int) {
	return int(s.conns.open.Load()), int(s.conns.idle.Load())
}
