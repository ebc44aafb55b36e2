package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/feedco/feed/live"
)

// Hijacked streams (Config.StreamsHijacked): after its first read a
// stream's connection is taken from net/http (http.Hijacker) and its
// state kept in a small struct (hstream); its request's goroutine and
// net/http's background read of the connection end. A pool of
// streamWorkers goroutines does the reads and writes of the streams that
// have work, and one ticker finds the heartbeats, the reads after the
// start or a wake-up, and the streams ended by the registry (replaced,
// shutdown). BenchmarkIdleStreams/hijacked against
// BenchmarkIdleStreams/goroutine shows what an idle stream costs each
// way (docs/streams.md, Memory). A client that goes away is noticed at
// the next write (a heartbeat at the latest).

// streamWorkers is the number of goroutines serving hijacked streams
// always; while more streams wait for one than there are of them, up to
// streamBurstWorkers more start, each ending when it finds none waiting.
// A wake-up's step spends most of its time waiting for Redis, and after a
// stall (a celebrity's post waking hundreds of streams, a pause of the
// whole process) a fixed few drained the backlog seconds after the polling
// reads had recovered: under load a stream then gets about the share of
// the process a request's goroutine gets.
const (
	streamWorkers      = 4
	streamBurstWorkers = 60
)

// hstream is one hijacked stream.
type hstream struct {
	s    *Server
	conn net.Conn
	st   liveStream
	l    *live.Listener
	o    *openStream

	queued   atomic.Bool  // in the jobs channel
	wantRead atomic.Bool  // a wake-up or a timer asked for a read
	readAt   atomic.Int64 // unix nanos of the timed read after the start (StreamStartRead); 0: none
	lastOut  atomic.Int64 // unix nanos of the last write
	ended    atomic.Bool

	mu  sync.Mutex // held by the worker serving it
	buf []live.Event
	out []byte
}

// hijackPool is the server's hijacked streams and their workers.
type hijackPool struct {
	once    sync.Once
	jobs    chan *hstream
	burst   atomic.Int32 // workers started for a backlog (streamBurstWorkers)
	mu      sync.Mutex
	streams map[*hstream]struct{}
	stop    chan struct{}
	stopped sync.Once
	started atomic.Bool // start ran
}

// start runs the workers and the ticker, once, until CloseStreams.
func (p *hijackPool) start(s *Server) {
	p.once.Do(func() {
		p.jobs = make(chan *hstream, 4096)
		p.streams = map[*hstream]struct{}{}
		p.stop = make(chan struct{})
		for range streamWorkers {
			go func() {
				for {
					select {
					case h := <-p.jobs:
						h.queued.Store(false)
						h.serve()
					case <-p.stop:
						return
					}
				}
			}()
		}
		go p.tick(s)
		p.started.Store(true)
	})
}

// enqueue gives h to a worker unless it is queued already, and starts a
// burst worker when more streams wait than there are workers.
func (p *hijackPool) enqueue(h *hstream) {
	if h.queued.CompareAndSwap(false, true) {
		select {
		case p.jobs <- h:
		default:
			// Every worker busy and the queue full: the next tick
			// enqueues it again.
			h.queued.Store(false)
		}
	}
	if len(p.jobs) > streamWorkers+int(p.burst.Load()) {
		if p.burst.Add(1) <= streamBurstWorkers {
			h.s.smetrics.burst.Inc()
			go p.drain()
		} else {
			p.burst.Add(-1)
		}
	}
}

// drain is a burst worker: it serves the streams waiting and ends when
// it finds none.
func (p *hijackPool) drain() {
	defer p.burst.Add(-1)
	for {
		select {
		case h := <-p.jobs:
			h.queued.Store(false)
			h.serve()
		case <-p.stop:
			return
		default:
			return
		}
	}
}

// tick enqueues, every 100 ms, the streams with a timed read due, a
// heartbeat due, or ended by the registry.
func (p *hijackPool) tick(s *Server) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		now := time.Now().UnixNano()
		p.mu.Lock()
		for h := range p.streams {
			due := false
			if at := h.readAt.Load(); at != 0 && at <= now {
				h.readAt.Store(0)
				h.wantRead.Store(true)
				due = true
			}
			if now-h.lastOut.Load() >= int64(s.cfg.StreamHeartbeat) || h.o.ended.Load() {
				due = true
			}
			if due || h.wantRead.Load() {
				p.enqueue(h)
			}
		}
		p.mu.Unlock()
	}
}

// serveHijacked takes r's connection for st (when net/http can give it:
// HTTP/1; ok false otherwise, nothing done), writes the response's
// head itself (no chunked encoding: the body ends when the connection
// closes) and hands the stream to the workers, its first read queued.
func (s *Server) serveHijacked(w http.ResponseWriter, r *http.Request, st liveStream, chs []string, caller int64, o *openStream) (bool, error) {
	conn, rw, err := http.NewResponseController(w).Hijack()
	if errors.Is(err, http.ErrNotSupported) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if rw.Reader.Buffered() > 0 {
		// A pipelined request after the stream's: not served.
		_ = conn.Close()
		return true, errors.New("a request pipelined after a stream")
	}
	p := &s.hijacked
	p.start(s)
	h := &hstream{s: s, conn: conn, st: st, o: o}
	// Known to the pool before the client sees a byte, and set up under
	// its lock: CloseStreams, which serves every known stream, then ends
	// this one too, after its setup.
	h.mu.Lock()
	p.mu.Lock()
	p.streams[h] = struct{}{}
	p.mu.Unlock()
	s.smetrics.open.Inc()
	h.out = append(h.out, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nX-Accel-Buffering: no\r\nX-Request-Id: "...)
	h.out = append(h.out, requestID(r.Context())...)
	h.out = append(h.out, "\r\nConnection: close\r\n\r\n"...)
	h.out = appendOpening(h.out, st.ID())
	if err := h.write(); err != nil {
		h.end()
		h.mu.Unlock()
		return true, nil
	}
	h.out = h.out[:0]
	l, err := s.deps.Streams.ListenFunc(context.Background(), caller, chs, func() {
		h.wantRead.Store(true)
		p.enqueue(h)
	})
	if err != nil {
		h.end()
		h.mu.Unlock()
		return true, nil // the head is written: the client reconnects
	}
	h.l = l
	h.readAt.Store(time.Now().Add(s.cfg.StreamStartRead).UnixNano())
	h.wantRead.Store(true)
	h.mu.Unlock()
	select {
	case <-p.stop: // CloseStreams ran: end it here
		h.serve()
	default:
		p.enqueue(h)
	}
	return true, nil
}

// serve does h's pending work: the end, a read, a heartbeat.
func (h *hstream) serve() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended.Load() {
		return
	}
	s := h.s
	select {
	case <-h.o.done:
		s.smetrics.cutoffs.WithLabelValues(h.o.reason).Inc()
		h.out = append(h.out[:0], "retry: "...)
		h.out = strconv.AppendInt(h.out, s.cfg.StreamRetry.Milliseconds(), 10)
		h.out = append(h.out, "\n: "...)
		h.out = append(h.out, h.o.reason...)
		h.out = append(h.out, "\n\n"...)
		_ = h.write()
		h.end()
		return
	default:
	}
	if h.wantRead.Swap(false) {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
		for {
			before := h.st.Overflows()
			var more bool
			var err error
			h.buf, more, err = h.st.Step(ctx, h.buf[:0])
			s.smetrics.overflow.Add(float64(h.st.Overflows() - before))
			h.out = h.out[:0]
			for _, ev := range h.buf {
				h.out = appendEvent(h.out, ev)
				s.smetrics.events.WithLabelValues(ev.Type).Inc()
			}
			if len(h.out) > 0 {
				if err := h.write(); err != nil {
					cancel()
					h.cut(err)
					return
				}
			}
			if err != nil {
				s.log.Warn("live stream read failed", "err", err)
				break
			}
			if !more {
				break
			}
		}
		cancel()
	}
	if time.Now().UnixNano()-h.lastOut.Load() >= int64(s.cfg.StreamHeartbeat) {
		h.out = append(h.out[:0], ":\n\n"...)
		if err := h.write(); err != nil {
			h.cut(err)
			return
		}
		s.smetrics.events.WithLabelValues("heartbeat").Inc()
	}
	h.out = h.out[:0]
	if cap(h.out) > 8<<10 {
		h.out = nil // an idle stream keeps no large buffer
	}
	h.buf = h.buf[:0]
}

// write writes h.out under the write deadline.
func (h *hstream) write() error {
	_ = h.conn.SetWriteDeadline(time.Now().Add(h.s.cfg.StreamWriteTimeout))
	_, err := h.conn.Write(h.out)
	if err == nil {
		h.lastOut.Store(time.Now().UnixNano())
	}
	return err
}

// cut ends h after a failed write, counting a slow client's.
func (h *hstream) cut(err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		h.s.smetrics.cutoffs.WithLabelValues("slow").Inc()
	}
	h.end()
}

// end closes h and forgets it.
func (h *hstream) end() {
	if !h.ended.CompareAndSwap(false, true) {
		return
	}
	_ = h.conn.Close()
	if h.l != nil {
		h.l.Close()
	}
	p := &h.s.hijacked
	p.mu.Lock()
	delete(p.streams, h)
	p.mu.Unlock()
	h.s.streams.close(h.o)
	h.s.smetrics.open.Dec()
}

// appendEvent appends ev as a server-sent event.
func appendEvent(b []byte, ev live.Event) []byte {
	b = append(b, "id: "...)
	b = append(b, ev.ID...)
	b = append(b, "\nevent: "...)
	b = append(b, ev.Type...)
	b = append(b, "\ndata: "...)
	b = append(b, ev.Data...)
	return append(b, "\n\n"...)
}

// endHijacked has every hijacked stream ended now (CloseStreams), then
// stops the workers once they are gone.
func (p *hijackPool) endHijacked() {
	if !p.started.Load() {
		return
	}
	pass := func() {
		p.mu.Lock()
		hs := make([]*hstream, 0, len(p.streams))
		for h := range p.streams {
			hs = append(hs, h)
		}
		p.mu.Unlock()
		for _, h := range hs {
			h.serve() // the registry ended them: each writes its retry hint and closes
		}
	}
	pass()
	p.stopped.Do(func() { close(p.stop) }) // no stream comes after (the registry refuses)
	pass()                                 // one set up meanwhile, queued to a worker that stopped
}
