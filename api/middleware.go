package api

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

type ctxKey int

const keyRequestIDs ctxKey = iota

// requestIDs are a request's ids, one context value for both.
type requestIDs struct {
	request, correlation string
}

func requestID(ctx context.Context) string {
	if ids, ok := ctx.Value(keyRequestIDs).(*requestIDs); ok {
		return ids.request
	}
	return ""
}

func correlationID(ctx context.Context) string {
	if ids, ok := ctx.Value(keyRequestIDs).(*requestIDs); ok {
		return ids.correlation
	}
	return ""
}

// withRequestID gives every request an id: the client's X-Request-Id when it
// is sane, else a new UUID; echoed in the response. The correlation id is
// X-Correlation-Id when given (one workflow spanning requests), else the
// request id.
func (s *Server) withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !saneID(id) {
			id = uuid.NewString()
		}
		corr := r.Header.Get("X-Correlation-Id")
		if !saneID(corr) {
			corr = id
		}
		w.Header().Set("X-Request-Id", id)
		ctx := context.WithValue(r.Context(), keyRequestIDs, &requestIDs{request: id, correlation: corr})
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func saneID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// recoverPanics turns a panic into a 500 problem (when nothing was written
// yet) and a log line with the stack; the client never sees the stack.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &statusWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.ErrorContext(r.Context(), "panic serving request", "method", r.Method, "path", r.URL.Path,
				"request_id", requestID(r.Context()), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if !rw.wrote {
				writeProblem(rw, probInternal)
			}
		}()
		next.ServeHTTP(rw, r)
	})
}

// statusWriter remembers the status written, for metrics and recovery.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// handlerFunc is an endpoint that returns its error instead of writing it,
// so that every error goes through problemFor.
type handlerFunc func(w http.ResponseWriter, r *http.Request, caller int64) error

// public wraps an endpoint that needs no identity: body limit, request
// timeout, error answering.
func (s *Server) public(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, cancel := s.prepare(w, r)
		defer cancel()
		if err := h(w, r, 0); err != nil {
			writeError(w, r, s.log, err)
		}
	})
}

// authed is public plus the caller's identity; none is 401.
func (s *Server) authed(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, cancel := s.prepare(w, r)
		defer cancel()
		caller, err := s.identify(r)
		if err == nil {
			err = h(w, r, caller)
		}
		if err != nil {
			writeError(w, r, s.log, err)
		}
	})
}

// prepare bounds the body and the request's time; the caller defers the
// returned cancel (the wrappers above, so no endpoint has to), which
// releases the timer when the endpoint returns.
func (s *Server) prepare(w http.ResponseWriter, r *http.Request) (*http.Request, context.CancelFunc) {
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	return r.WithContext(ctx), cancel
}

// identify returns the caller's user id from the configured auth mode.
func (s *Server) identify(r *http.Request) (int64, error) {
	if s.cfg.AuthMode == AuthTrustedHeader {
		v := r.Header.Get("X-User-Id")
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil || id <= 0 || v[0] == '+' {
			return 0, errUnauthenticated
		}
		return id, nil
	}
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return 0, errUnauthenticated
	}
	id, err := s.deps.Tokens.Verify(strings.TrimSpace(token))
	if err != nil {
		return 0, fmt.Errorf("verify token: %w", errUnauthenticated)
	}
	return id, nil
}

// unmatched answers requests no route matched (404) or whose method the
// route does not have (405).
func (s *Server) unmatched(err error) http.Handler {
	return s.metrics.wrapUnmatched(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, s.log, err)
	}))
}
