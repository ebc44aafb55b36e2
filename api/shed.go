package api

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"
)

// Load shedding: the server bounds the requests it works on at once, reads
// and writes apart (Config.MaxReadsInFlight, Config.MaxWritesInFlight). A
// request over its bound is answered at once, once its caller is known
// and a write's body read (admission.go), before any other work
// (database, Redis), with 429 `overloaded` and Retry-After: it
// never waits in a queue, and a shed write did nothing, so its retry (with
// or without Idempotency-Key) is a first attempt. Below the read bound, the
// home feed degrades first: beyond Config.FullHomeReads home reads doing
// the full merge at once, a home read is answered from Redis's inbox and
// own posts alone (queries.Feed.HomeDegraded), marked Feed-Degraded, with
// a cursor that resumes the full merge. An admitted read runs when it has
// its turn (Turns, below). Health, readiness and metrics are never shed.

// limiter counts the requests of one class in flight and refuses those
// over max (max 0: no bound); of those admitted, turns bounds the ones
// running (the reads' class alone has a bound there).
type limiter struct {
	max      int64
	inFlight atomic.Int64
	shed     prometheus.Counter
	turns    turns
}

// acquire admits a request, or reports false when max are in flight; an
// admitted request calls release when it is done.
func (l *limiter) acquire() bool {
	if n := l.inFlight.Add(1); l.max > 0 && n > l.max {
		l.inFlight.Add(-1)
		l.shed.Inc()
		return false
	}
	return true
}

func (l *limiter) release() { l.inFlight.Add(-1) }

// Turns: of the reads admitted, at most Config.ReadsRunning run at once;
// the others wait for a turn in arrival order (golang.org/x/sync's
// semaphore), within the request's timeout. A read is work for the
// process's cores alone, mostly (the read cache answers most of its
// questions), and Go's scheduler runs every runnable goroutine in turn:
// with every admitted read running, a goroutine of the rest of the
// process woken by its I/O (a projector's Redis reply, CDC's, a live
// stream's wake-up) waits behind all of them, at each of the many steps
// of a post's way to a feed. Reads waiting for a turn are parked, not
// runnable, so the rest waits behind at most ReadsRunning reads. On a
// saturated machine this is what keeps a post's way through the
// pipeline and to the live streams short (docs/api.md, Load shedding);
// below saturation a read finds a turn at once.

// turns bounds the reads running at once; a nil sem: no bound.
type turns struct {
	sem     *semaphore.Weighted
	waiting atomic.Int64
}

// errNoTurn is a read whose request timed out waiting for a turn.
var errNoTurn = errors.New("the server is busy: the read did not get its turn in time")

// take waits for a turn, or returns errNoTurn when ctx's deadline comes
// first (ctx's error when it is canceled); a read that took one calls
// give when it is done.
func (t *turns) take(ctx context.Context) error {
	if t.sem == nil || t.sem.TryAcquire(1) {
		return nil
	}
	t.waiting.Add(1)
	defer t.waiting.Add(-1)
	if err := t.sem.Acquire(ctx, 1); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return errNoTurn
		}
		return err
	}
	return nil
}

func (t *turns) give() {
	if t.sem != nil {
		t.sem.Release(1)
	}
}

// overloadedError is a request shed because its class is at its bound.
type overloadedError struct{ class string }

func (e *overloadedError) Error() string {
	return "too many " + e.class + "s in flight: shed"
}

// read and write give an endpoint (public or authed) its class and its
// admission (admission.go): over the class's bound, 429 at once, after
// the caller is identified and, for a write, its body read.
func (s *Server) read(next http.Handler) http.Handler {
	return s.classify(next, &s.reads, "read", false)
}
func (s *Server) write(next http.Handler) http.Handler {
	return s.classify(next, &s.writes, "write", true)
}

func (s *Server) classify(next http.Handler, l *limiter, class string, body bool) http.Handler {
	e, ok := next.(*endpoint)
	if !ok {
		panic("api: read and write wrap an endpoint made by public or authed")
	}
	e.class, e.className, e.body = l, class, body
	return e
}

// shedMetrics registers the gauges of the requests in flight and the
// counters of the shed ones, per class ("read", "write").
func newShedMetrics(reg prometheus.Registerer, reads, writes *limiter) error {
	shed := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "feed_http_shed_total",
		Help: "Requests answered 429 at once because their class (read, write) was at its bound of requests in flight.",
	}, []string{"class"})
	reads.shed, writes.shed = shed.WithLabelValues("read"), shed.WithLabelValues("write")
	cs := []prometheus.Collector{shed}
	for _, c := range []struct {
		class string
		l     *limiter
	}{{"read", reads}, {"write", writes}} {
		l := c.l
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "feed_http_in_flight",
			Help:        "Requests being served, by class (read, write); bounded by FEED_MAX_READS_IN_FLIGHT and FEED_MAX_WRITES_IN_FLIGHT.",
			ConstLabels: prometheus.Labels{"class": c.class},
		}, func() float64 { return float64(l.inFlight.Load()) }))
	}
	cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "feed_http_reads_waiting",
		Help: "Reads admitted and waiting for a turn to run (FEED_READS_RUNNING run at once); counted in feed_http_in_flight.",
	}, func() float64 { return float64(reads.turns.waiting.Load()) }))
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// InFlight returns the reads and writes being served now (for tests and
// dashboards; feed_http_in_flight says the same).
func (s *Server) InFlight() (reads, writes int) {
	return int(s.reads.inFlight.Load()), int(s.writes.inFlight.Load())
}
