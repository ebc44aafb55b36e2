package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"github.com/feedco/feed/internal/auth"
)

type ctxKey int

const keyRequestIDs ctxKey = iota

// requestIDs are a request's ids, one context value for both.
type requestIDs struct {
	request, correlation string
}

// idContext is a request's context carrying its requestIDs: one
// allocation, where context.WithValue of a *requestIDs is two.
type idContext struct {
	context.Context
	ids requestIDs
	hdr [1]string // the X-Request-Id header's value, in the same allocation
}

// Value implements context.Context.
func (c *idContext) Value(k any) any {
	if k == any(keyRequestIDs) {
		return &c.ids
	}
	return c.Context.Value(k)
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
			id = newRequestID()
		}
		corr := r.Header.Get("X-Correlation-Id")
		if !saneID(corr) {
			corr = id
		}
		ctx := &idContext{Context: r.Context(), ids: requestIDs{request: id, correlation: corr}, hdr: [1]string{id}}
		w.Header()["X-Request-Id"] = ctx.hdr[:] // Set, without allocating the value's slice
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// newRequestID is a new random (version 4) UUID, as uuid.NewString, in one
// allocation (the string).
func newRequestID() string {
	var u uuid.UUID
	if _, err := rand.Read(u[:]); err != nil {
		return uuid.NewString()
	}
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // variant RFC 4122
	return u.String()
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

// statusWriter remembers the status written, for metrics and recovery:
// recoverPanics makes one per request and the metrics reuse it
// (asStatusWriter).
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

// asStatusWriter returns w when it is a statusWriter that has written
// nothing yet (recoverPanics's, for this request), else a new one over w.
func asStatusWriter(w http.ResponseWriter) *statusWriter {
	if sw, ok := w.(*statusWriter); ok && !sw.wrote {
		return sw
	}
	return &statusWriter{ResponseWriter: w}
}

// handlerFunc is an endpoint that returns its error instead of writing it,
// so that every error goes through problemFor.
type handlerFunc func(w http.ResponseWriter, r *http.Request, caller int64) error

// public wraps an endpoint that needs no identity: body limit, request
// timeout, error answering, and the admission of its class when read or
// write wraps it (admission.go).
func (s *Server) public(h handlerFunc) http.Handler { return &endpoint{s: s, h: h, anonymous: true} }

// authed is public plus the caller's identity; none is 401.
func (s *Server) authed(h handlerFunc) http.Handler { return &endpoint{s: s, h: h} }

// streaming is authed for a long-lived response (a live stream): no
// request timeout and no slot of the reads (its own bounds apply:
// Config.StreamsMax, Config.StreamsPerUser).
func (s *Server) streaming(h handlerFunc) http.Handler { return &endpoint{s: s, h: h, long: true} }

// prepare bounds the body and the request's time; the caller defers the
// returned cancel (the wrappers above, so no endpoint has to), which
// releases the timer when the endpoint returns.
func (s *Server) prepare(w http.ResponseWriter, r *http.Request) (*http.Request, context.CancelFunc) {
	if r.Body != http.NoBody { // net/http's body of a request without one: nothing to bound
		r.Body = http.MaxBytesReader(serverWriter(w), r.Body, s.cfg.MaxBodyBytes)
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	return r.WithContext(ctx), cancel
}

// serverWriter is the ResponseWriter net/http's server made for the
// request, under the middleware's wrappers: http.MaxBytesReader given it
// makes the server close the connection after a 413 (Connection: close)
// instead of reading the rest of the body.
func serverWriter(w http.ResponseWriter) http.ResponseWriter {
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		w = u.Unwrap()
	}
}

// identify returns the caller's user id from the configured auth mode: a
// canonical decimal id of a registered user, given once.
func (s *Server) identify(r *http.Request) (int64, error) {
	id, err := s.claimedID(r)
	if err != nil {
		return 0, err
	}
	ok, err := s.deps.Users.UserExists(r.Context(), id)
	if err != nil {
		return 0, fmt.Errorf("check the caller: %w", err)
	}
	if !ok {
		return 0, fmt.Errorf("user %d is not registered: %w", id, errUnauthenticated)
	}
	return id, nil
}

// claimedID is the user id the request claims, in the configured mode.
// Headers are read from the map directly: their names are canonical.
func (s *Server) claimedID(r *http.Request) (int64, error) {
	if s.cfg.AuthMode == AuthTrustedHeader {
		if !s.gateway.allows(r) {
			return 0, fmt.Errorf("request not from the gateway: %w", errUnauthenticated)
		}
		vs := r.Header["X-User-Id"]
		if len(vs) == 0 {
			return 0, errUnauthenticated
		}
		if len(vs) > 1 || strings.Contains(vs[0], ",") {
			return 0, &badInput{"X-User-Id must be given once, with one id"}
		}
		id, ok := auth.ParseUserID(vs[0])
		if !ok {
			return 0, fmt.Errorf("X-User-Id not a canonical id: %w", errUnauthenticated)
		}
		return id, nil
	}
	vs := r.Header["Authorization"]
	if len(vs) == 0 {
		return 0, errUnauthenticated
	}
	if len(vs) > 1 {
		return 0, &badInput{"Authorization must be given once"}
	}
	scheme, token, ok := strings.Cut(vs[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return 0, errUnauthenticated
	}
	id, err := s.deps.Tokens.Verify(strings.TrimSpace(token))
	if err != nil {
		return 0, fmt.Errorf("verify token: %w", errUnauthenticated)
	}
	return id, nil
}

// gatewayCheck tells the gateway's requests from anyone else's in
// trusted-header mode: by the connection's source network, the shared
// secret, or both.
type gatewayCheck struct {
	secret   []byte // SHA-256 of the gateway secret; nil: none
	networks []netip.Prefix
}

func newGatewayCheck(cfg Config) gatewayCheck {
	g := gatewayCheck{}
	for _, p := range cfg.TrustedNetworks {
		g.networks = append(g.networks, p.Masked())
	}
	if cfg.GatewaySecret != "" {
		sum := sha256.Sum256([]byte(cfg.GatewaySecret))
		g.secret = sum[:]
	}
	if g.secret == nil && len(g.networks) == 0 {
		g.networks = loopbackNetworks
	}
	return g
}

// String says which requests the check trusts ("come from ... and carry
// ..."), for the start-up warning.
func (g gatewayCheck) String() string {
	var parts []string
	if len(g.networks) > 0 {
		nets := make([]string, len(g.networks))
		for i, p := range g.networks {
			nets[i] = p.String()
		}
		parts = append(parts, "come from "+strings.Join(nets, ", "))
	}
	if g.secret != nil {
		parts = append(parts, "carry the gateway secret in "+GatewaySecretHeader)
	}
	return strings.Join(parts, " and ")
}

// allows reports whether r comes from the gateway: from a trusted network
// (the connection's address; X-Forwarded-For is the client's to write)
// and with the secret, compared in constant time, given once.
func (g gatewayCheck) allows(r *http.Request) bool {
	if len(g.networks) > 0 {
		ap, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil {
			return false
		}
		ip := ap.Addr().Unmap().WithZone("")
		if !slices.ContainsFunc(g.networks, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			return false
		}
	}
	if g.secret != nil {
		vs := r.Header[GatewaySecretHeader]
		if len(vs) != 1 {
			return false
		}
		sum := sha256.Sum256([]byte(vs[0]))
		if subtle.ConstantTimeCompare(sum[:], g.secret) != 1 {
			return false
		}
	}
	return true
}

// unmatched answers requests no route matched (404).
func (s *Server) unmatched(err error) http.Handler {
	return s.metrics.wrapUnmatched(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, s.log, err)
	}))
}

// methodNotAllowed answers a request whose path a route has but not its
// method (405), with Allow listing the methods of the routes of that path.
func (s *Server) methodNotAllowed(routes *allowedMethods) http.Handler {
	return s.metrics.wrapUnmatched(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeErrorWith(w, r, s.log, errMethodNotAllowed, []string{"Allow", strings.Join(routes.of(r.URL.Path), ", ")})
	}))
}

// allowedMethods are the methods of every route by path pattern, read
// from the router once its routes are in place.
type allowedMethods struct {
	paths []pathMethods
}

type pathMethods struct {
	re      *regexp.Regexp
	methods []string
}

func newAllowedMethods(r *mux.Router) (*allowedMethods, error) {
	a := &allowedMethods{}
	err := r.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		expr, err := route.GetPathRegexp()
		if err != nil {
			return err
		}
		methods, err := route.GetMethods()
		if err != nil {
			return err
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			return err
		}
		a.paths = append(a.paths, pathMethods{re: re, methods: methods})
		return nil
	})
	return a, err
}

// of returns the methods allowed on path, sorted.
func (a *allowedMethods) of(path string) []string {
	var out []string
	for _, p := range a.paths {
		if p.re.MatchString(path) {
			out = append(out, p.methods...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
