package api

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedco/feed/live"
	"github.com/feedco/feed/queries"
)

// Live streams (docs/streams.md): GET /api/feed/stream and GET
// /api/notifications/stream are Server-Sent Events streams of the home
// feed and of the notifications (live.Stream and live.NotifStream say what
// to send; the hub, Deps.Streams, wakes them up). This file holds their
// HTTP side: the bounds (streams per user, per process), the heartbeats,
// the cut-off of a client too slow to read, and the end of every stream
// at shutdown with a retry hint.
//
// Here a stream is served by its request's goroutine, as net/http serves
// any request; with Config.StreamsHijacked its connection goes to the
// shared workers of stream_hijack.go instead. BenchmarkIdleStreams and
// BenchmarkIdleStreamsHijacked (api/stream_bench_test.go) measure what an
// idle one costs each way: about 42 KB against 5.

// errStreamsUnavailable is a stream asked of a process without a hub.
var errStreamsUnavailable = errors.New("live streams are not available in this process")

// errTooManyStreams is a stream beyond Config.StreamsMax.
var errTooManyStreams = errors.New("the server is at its bound of open streams; retry after Retry-After, or on another instance")

// streamMetrics are the live streams' counters, on the admin /metrics.
type streamMetrics struct {
	open     prometheus.Gauge
	events   *prometheus.CounterVec
	cutoffs  *prometheus.CounterVec
	refused  prometheus.Counter
	overflow prometheus.Counter
	burst    prometheus.Counter
}

func newStreamMetrics(reg prometheus.Registerer) (*streamMetrics, error) {
	m := &streamMetrics{
		open: prometheus.NewGauge(prometheus.GaugeOpts{Name: "feed_streams_open", Help: "Live streams open in this process."}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "feed_stream_events_total",
			Help: "Server-sent events written to live streams, by type (post, edit, delete, heartbeat)."}, []string{"type"}),
		cutoffs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "feed_stream_cutoffs_total",
			Help: "Live streams the server ended, by reason: slow (a write past its deadline), replaced (the user's oldest, past FEED_STREAMS_PER_USER), shutdown."}, []string{"reason"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "feed_streams_refused_total",
			Help: "Live streams refused with 503 because the process was at FEED_STREAMS_MAX."}),
		overflow: prometheus.NewCounter(prometheus.CounterOpts{Name: "feed_stream_sent_overflow_total",
			Help: "Times a stream's set of sent entries above its position passed its bound and the position moved up to the newest sent entry (an entry projected late below it may then be skipped)."}),
		burst: prometheus.NewCounter(prometheus.CounterOpts{Name: "feed_stream_burst_workers_total",
			Help: "Workers started for hijacked streams while more waited than there were workers (each ends when none waits)."}),
	}
	for _, c := range []prometheus.Collector{m.open, m.events, m.cutoffs, m.refused, m.overflow, m.burst} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// openStream is one stream in the registry; done is closed to end it.
type openStream struct {
	user   int64
	done   chan struct{}
	reason string // why done was closed
	once   sync.Once
	// ended is set before done is closed: the hijacked streams' ticker,
	// which looks at every stream ten times a second, loads it instead of
	// receiving from done.
	ended atomic.Bool
}

func (o *openStream) end(reason string) {
	o.once.Do(func() {
		o.reason = reason
		o.ended.Store(true)
		close(o.done)
	})
}

// streamRegistry is the process's open streams, per user in opening
// order.
type streamRegistry struct {
	mu      sync.Mutex
	byUser  map[int64][]*openStream
	n       int
	closing bool
}

// open registers a stream of user: errTooManyStreams beyond max, and the
// user's oldest stream ended beyond perUser.
func (g *streamRegistry) open(user int64, max, perUser int) (*openStream, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return nil, errTooManyStreams
	}
	if g.byUser == nil {
		g.byUser = map[int64][]*openStream{}
	}
	mine := g.byUser[user]
	if len(mine) >= perUser {
		mine[0].end("replaced")
		mine = mine[1:]
		g.n--
	}
	if g.n >= max {
		g.byUser[user] = mine
		return nil, errTooManyStreams
	}
	o := &openStream{user: user, done: make(chan struct{})}
	g.byUser[user] = append(mine, o)
	g.n++
	return o, nil
}

// close removes o (ended or not).
func (g *streamRegistry) close(o *openStream) {
	g.mu.Lock()
	defer g.mu.Unlock()
	mine := g.byUser[o.user]
	for i, x := range mine {
		if x == o {
			g.byUser[o.user] = append(mine[:i:i], mine[i+1:]...)
			g.n--
			break
		}
	}
	if len(g.byUser[o.user]) == 0 {
		delete(g.byUser, o.user)
	}
}

// endAll ends every stream and refuses new ones.
func (g *streamRegistry) endAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closing = true
	for _, mine := range g.byUser {
		for _, o := range mine {
			o.end("shutdown")
		}
	}
}

// OpenStreams returns the number of live streams open in the process.
func (s *Server) OpenStreams() int {
	s.streams.mu.Lock()
	defer s.streams.mu.Unlock()
	return s.streams.n
}

// CloseStreams ends every live stream with a retry hint (so clients
// reconnect, elsewhere when this process stops) and refuses new ones;
// Serve calls it when it shuts down.
func (s *Server) CloseStreams() {
	s.streams.endAll()
	s.hijacked.endHijacked()
}

// GET /api/feed/stream[?cursor=] with an optional Last-Event-ID -> 200
// text/event-stream.
func (s *Server) homeStream(w http.ResponseWriter, r *http.Request, caller int64) error {
	var cursor string
	if r.URL.RawQuery != "" {
		q := parsePageArgs(r.URL.RawQuery)
		cursor = q.cursor
	}
	if len(cursor) > maxCursorLen {
		return &badInput{"cursor is malformed (too long)"}
	}
	lastID := r.Header.Get("Last-Event-ID")
	switch {
	case lastID != "":
		if _, err := live.DecodeResume(lastID); err != nil {
			return &badInput{"Last-Event-ID is not an id this stream issued"}
		}
	case cursor != "":
		if _, err := queries.CursorKey(cursor); err != nil {
			return err
		}
	}
	hub := s.deps.Streams
	src, ok := s.deps.Feed.(live.Source)
	if hub == nil || !ok {
		return errStreamsUnavailable
	}
	return s.serveStream(w, r, caller, func(ctx context.Context) (liveStream, error) {
		return live.Open(ctx, hub, src, caller, lastID, cursor)
	})
}

// GET /api/notifications/stream with an optional Last-Event-ID -> 200
// text/event-stream of `notification` events.
func (s *Server) notificationsStream(w http.ResponseWriter, r *http.Request, caller int64) error {
	lastID := r.Header.Get("Last-Event-ID")
	if lastID != "" {
		if err := live.CheckNotifID(lastID); err != nil {
			return &badInput{"Last-Event-ID is not an id this stream issued"}
		}
	}
	hub := s.deps.Streams
	src, ok := s.deps.Feed.(live.NotifSource)
	if hub == nil || !ok {
		return errStreamsUnavailable
	}
	return s.serveStream(w, r, caller, func(ctx context.Context) (liveStream, error) {
		return live.OpenNotifications(ctx, hub, src, caller, lastID)
	})
}

// liveStream is what serveStream serves: live.Stream, live.NotifStream.
type liveStream interface {
	Step(ctx context.Context, out []live.Event) ([]live.Event, bool, error)
	Channels(ctx context.Context) ([]string, error)
	Overflows() int
	// ID is the event id of the stream's position now.
	ID() string
}

// serveStream serves one stream of caller's: the bounds, the hub's
// wake-ups, the reads, heartbeats, the cut-off of a slow client, the end
// with a retry hint.
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, caller int64, open func(ctx context.Context) (liveStream, error)) error {
	hub := s.deps.Streams
	o, err := s.streams.open(caller, s.cfg.StreamsMax, s.cfg.StreamsPerUser)
	if err != nil {
		s.smetrics.refused.Inc()
		return err
	}
	handed := false // to the hijacked streams' workers
	defer func() {
		if !handed {
			s.streams.close(o)
		}
	}()
	ctx := r.Context()
	st, err := open(ctx)
	if errors.Is(err, live.ErrBadID) {
		return &badInput{"Last-Event-ID is not an id this stream issued"}
	}
	if err != nil {
		return err
	}
	chs, err := st.Channels(ctx)
	if err != nil {
		return err
	}
	if s.cfg.StreamsHijacked {
		ok, err := s.serveHijacked(w, r, st, chs, caller, o)
		if ok {
			handed = err == nil
			return nil // the response is the connection's now
		}
		if err != nil {
			return err
		}
	}
	l, err := hub.Listen(ctx, caller, chs)
	if err != nil {
		return err
	}
	defer l.Close()

	s.smetrics.open.Inc()
	defer s.smetrics.open.Dec()
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: s.cfg.StreamWriteTimeout}
	// The stream outlives the server's read and write timeouts: each
	// write has its own deadline instead.
	_ = sw.rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if err := sw.opening(st.ID()); err != nil {
		return nil
	}

	heartbeat := time.NewTicker(s.cfg.StreamHeartbeat)
	defer heartbeat.Stop()
	// A read shortly after the start covers a wake-up the projectors sent
	// before they saw the user online.
	again := time.NewTimer(s.cfg.StreamStartRead)
	defer again.Stop()
	celebs := time.NewTicker(time.Minute)
	defer celebs.Stop()
	var buf []live.Event
	read := func() error {
		for {
			var more bool
			var err error
			before := st.Overflows()
			buf, more, err = st.Step(ctx, buf[:0])
			s.smetrics.overflow.Add(float64(st.Overflows() - before))
			for _, ev := range buf {
				if err := sw.event(ev); err != nil {
					return err
				}
				s.smetrics.events.WithLabelValues(ev.Type).Inc()
			}
			if len(buf) > 0 {
				heartbeat.Reset(s.cfg.StreamHeartbeat)
			}
			if err != nil {
				// The read failed (Redis or PostgreSQL down): the next
				// wake-up or heartbeat reads again.
				s.log.WarnContext(ctx, "live stream read failed", "user", caller, "err", err)
				return nil
			}
			if !more {
				return nil
			}
		}
	}
	wrote := func(err error) bool {
		if err != nil {
			// Past the write deadline: the client reads too slowly (a
			// client that went away fails otherwise).
			if errors.Is(err, os.ErrDeadlineExceeded) {
				s.smetrics.cutoffs.WithLabelValues("slow").Inc()
			}
			return false
		}
		return true
	}
	if !wrote(read()) {
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-o.done:
			s.smetrics.cutoffs.WithLabelValues(o.reason).Inc()
			_ = sw.retry(s.cfg.StreamRetry, o.reason)
			return nil
		case <-l.C:
			if !wrote(read()) {
				return nil
			}
		case <-again.C:
			if !wrote(read()) {
				return nil
			}
		case <-celebs.C:
			if chs, err := st.Channels(ctx); err == nil {
				if err := l.SetChannels(ctx, chs); err != nil {
					s.log.WarnContext(ctx, "live stream resubscribe failed", "user", caller, "err", err)
				}
			}
		case <-heartbeat.C:
			if !wrote(sw.comment("")) {
				return nil
			}
			s.smetrics.events.WithLabelValues("heartbeat").Inc()
		}
	}
}

// sseWriter writes server-sent events, each flushed under its own write
// deadline: a client that does not read within it is cut off (its last
// whole event's id is where it resumes).
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	b       []byte
}

func (sw *sseWriter) flush() error {
	if err := sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout)); err != nil {
		return err
	}
	_, err := sw.w.Write(sw.b)
	sw.b = sw.b[:0]
	if err != nil {
		return err
	}
	return sw.rc.Flush()
}

func (sw *sseWriter) event(ev live.Event) error {
	sw.b = append(sw.b, "id: "...)
	sw.b = append(sw.b, ev.ID...)
	sw.b = append(sw.b, "\nevent: "...)
	sw.b = append(sw.b, ev.Type...)
	sw.b = append(sw.b, "\ndata: "...)
	sw.b = append(sw.b, ev.Data...) // JSON without newlines
	sw.b = append(sw.b, "\n\n"...)
	return sw.flush()
}

// opening writes the stream's first bytes: a comment and the stream's
// position as an id without data. EventSource takes the id as its last
// event id without dispatching an event, so a connection that ends
// before its first event resumes from where it opened, not from the top
// of the moment it reconnects (which would skip what came between).
func (sw *sseWriter) opening(id string) error {
	sw.b = appendOpening(sw.b, id)
	return sw.flush()
}

// appendOpening appends a stream's first bytes (sseWriter.opening).
func appendOpening(b []byte, id string) []byte {
	b = append(b, ":stream\nid: "...)
	b = append(b, id...)
	return append(b, "\n\n"...)
}

// comment writes an SSE comment (a heartbeat when empty).
func (sw *sseWriter) comment(text string) error {
	sw.b = append(sw.b, ':')
	sw.b = append(sw.b, text...)
	sw.b = append(sw.b, "\n\n"...)
	return sw.flush()
}

// retry writes the reconnection delay hint and a comment saying why the
// stream ends.
func (sw *sseWriter) retry(d time.Duration, why string) error {
	sw.b = append(sw.b, "retry: "...)
	sw.b = strconv.AppendInt(sw.b, d.Milliseconds(), 10)
	sw.b = append(sw.b, "\n: "...)
	sw.b = append(sw.b, why...)
	sw.b = append(sw.b, "\n\n"...)
	return sw.flush()
}
