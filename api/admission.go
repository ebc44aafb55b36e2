package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/feedco/feed/internal/transient"
)

// Admission: what a request must have done before it takes one of the
// process's slots of its class (Config.MaxReadsInFlight,
// Config.MaxWritesInFlight, shed.go). An endpoint checks, in order:
//
//  1. the caller's identity (authed routes): an anonymous or forged
//     request is 401 without ever holding a slot, and without its body
//     being read (no `100 Continue` is sent to it);
//  2. its quota (quota.go): the user's, or for the anonymous write
//     (registration) the client address's; past it, 429 `rate-limited`;
//  3. for writes, the whole body, read within Config.BodyReadTimeout: a
//     client that trickles a body, or announces one with `Expect:
//     100-continue` and never sends it, is 408 with the connection
//     closed, having held no slot;
//  4. only then the slot of its class: 429 `overloaded` at once when the
//     class is at its bound;
//  5. a read then waits for its turn to run (Config.ReadsRunning, shed.go's
//     "Turns"): 503 when the request's time runs out first.
//
// A slot is thus held only by an identified caller whose request is
// complete in memory, for the time of the work itself.

// endpoint is an API route's handler: public or authed builds it, read or
// write gives it its class.
type endpoint struct {
	s         *Server
	h         handlerFunc
	anonymous bool     // public: no identity
	class     *limiter // nil: no admission (no class)
	className string
	body      bool // the body is read whole before admission (writes)
	long      bool // a live stream: no request timeout (streaming)
}

func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := e.s
	if !e.long {
		var cancel context.CancelFunc
		r, cancel = s.prepare(w, r)
		defer cancel()
	}
	if err := e.serve(w, r); err != nil {
		writeError(w, r, s.log, err)
	}
}

func (e *endpoint) serve(w http.ResponseWriter, r *http.Request) error {
	var caller int64
	s := e.s
	if e.anonymous {
		if e.body { // an anonymous write: registration
			if err := s.checkQuota(r.Context(), w, s.quotas.signup, s.clientAddr(r)); err != nil {
				return err
			}
		}
	} else {
		var err error
		if caller, err = s.identify(r); err != nil {
			return err
		}
		q := s.quotas.reads
		if e.body {
			q = s.quotas.writes
		}
		if q != nil {
			if err := s.checkQuota(r.Context(), w, q, strconv.FormatInt(caller, 10)); err != nil {
				return err
			}
		}
	}
	if e.body {
		if err := e.s.readWholeBody(w, r); err != nil {
			return err
		}
	}
	if e.class != nil {
		if !e.class.acquire() {
			return &overloadedError{e.className}
		}
		defer e.class.release()
		if err := e.class.turns.take(r.Context()); err != nil {
			return err
		}
		defer e.class.turns.give()
	}
	return e.h(w, r, caller)
}

// bufferedBody is a request body read whole by admission; readBody takes
// its bytes without copying them.
type bufferedBody struct {
	io.Reader
	b []byte
}

func (bufferedBody) Close() error { return nil }

// errBodyTimeout is a body not received within Config.BodyReadTimeout.
var errBodyTimeout = errors.New("the request body was not received in time")

// readWholeBody reads r's (size-bounded) body into memory within
// Config.BodyReadTimeout and puts it back as a bufferedBody. A body too
// slow is errBodyTimeout, and the connection is closed after the answer
// (what is left of the body is never read).
func (s *Server) readWholeBody(w http.ResponseWriter, r *http.Request) error {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	rc := http.NewResponseController(w)
	// A server that does not support deadlines (a test's recorder) reads
	// without one.
	_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyReadTimeout))
	b, err := io.ReadAll(r.Body)
	// The connection's reads have no deadline until the server sets its
	// own for the next request: the handler's time is bounded by
	// Config.RequestTimeout, and net/http's background read (which tells
	// a client gone away) must not fail on this one.
	_ = rc.SetReadDeadline(time.Time{})
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return err
		case transient.Timeout(err):
			w.Header().Set("Connection", "close")
			return errBodyTimeout
		}
		w.Header().Set("Connection", "close")
		return &badInput{"could not read the request body"}
	}
	r.Body = bufferedBody{Reader: bytes.NewReader(b), b: b}
	return nil
}
