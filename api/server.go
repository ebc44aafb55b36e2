// Package api is the HTTP interface: the write endpoints over commands, the
// read endpoints over a FeedReader (the query side), health, readiness and
// Prometheus metrics. Errors are RFC 9457 problems, mapped in problem.go.
package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/semaphore"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/live"
	"github.com/feedco/feed/readmodel"
)

// Authentication modes.
const (
	// AuthJWT trusts `Authorization: Bearer <HS256 token>`.
	AuthJWT = "jwt"
	// AuthTrustedHeader trusts X-User-Id, for deployments behind a gateway
	// that authenticates and sets it (and strips it from client requests).
	// The server must be able to tell the gateway's requests from anyone
	// else's: see Config.GatewaySecret and Config.TrustedNetworks.
	AuthTrustedHeader = "trusted-header"
)

// GatewaySecretHeader carries Config.GatewaySecret in trusted-header mode.
const GatewaySecretHeader = "X-Gateway-Secret"

// minGatewaySecret is the shortest Config.GatewaySecret accepted.
const minGatewaySecret = 16

// Config tunes the server. The zero value means the defaults.
type Config struct {
	// Addr is where ListenAndServe listens. Default 127.0.0.1:8080.
	Addr string
	// AuthMode is AuthJWT (default) or AuthTrustedHeader.
	AuthMode string
	// GatewaySecret, in AuthTrustedHeader mode, is the secret the gateway
	// sends in GatewaySecretHeader with every request; a request without
	// it is 401. At least 16 bytes.
	GatewaySecret string
	// TrustedNetworks, in AuthTrustedHeader mode, are the networks the
	// gateway connects from (the connection's address, never a header
	// such as X-Forwarded-For); a request from elsewhere is 401.
	//
	// AuthTrustedHeader needs GatewaySecret, TrustedNetworks or an Addr on
	// a loopback address; with none of the first two, requests are
	// trusted from loopback addresses only. With both, a request must
	// pass both.
	TrustedNetworks []netip.Prefix
	// MaxBodyBytes bounds a request body; more is 413. Default 64 KiB.
	MaxBodyBytes int64
	// RequestTimeout bounds every request's work, database calls included.
	// Default 10s.
	RequestTimeout time.Duration
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout are the
	// http.Server's. Defaults 5s, 15s, 20s, 60s.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	// MaxHeaderBytes is the http.Server's bound on a request's line and
	// header; more is 431. Default http.DefaultMaxHeaderBytes (1 MB).
	MaxHeaderBytes int
	// ShutdownTimeout bounds the graceful shutdown. Default 10s.
	ShutdownTimeout time.Duration
	// BodyReadTimeout bounds the reading of a write's body, from when
	// its identity is checked: slower is 408 and the connection closed,
	// before the write takes a slot (admission.go). Default 5s.
	BodyReadTimeout time.Duration
	// MaxConns bounds the connections Serve holds open at once: beyond
	// it, new connections wait in the listen backlog until one closes
	// (conns.go). Default 10,000; negative: no bound.
	MaxConns int
	// WritesPerMinute and ReadsPerSecond are each user's quotas, and
	// RegistrationsPerHour each client address's, shared by every process
	// through Deps.QuotaRedis (quota.go); past one, 429 rate-limited.
	// 0: no quota.
	WritesPerMinute      int
	ReadsPerSecond       int
	RegistrationsPerHour int
	// MaxIdleConns bounds the kept-alive connections waiting for their
	// next request: a connection that goes idle beyond it is closed.
	// Default 1,000; negative: no bound.
	MaxIdleConns int
	// MaxReadsInFlight bounds the reads (GET of feeds, posts, replies, author posts and
	// users) served at once; a read beyond it is 429 at once (shed.go).
	// Default 256; negative: no bound.
	MaxReadsInFlight int
	// MaxWritesInFlight bounds the writes (POST, PUT, DELETE) served at
	// once; a write beyond it is 429 at once, having done nothing.
	// Default 32; negative: no bound.
	MaxWritesInFlight int
	// ReadsRunning bounds the admitted reads that run at once; the others
	// wait for a turn in arrival order, within the request's timeout
	// (shed.go, "Turns"). Default 32; negative: no bound. The home reads
	// doing the full merge at once are then at most this many, so
	// FullHomeReads degrades only a narrower bound.
	ReadsRunning int
	// FullHomeReads bounds the home feed reads that do the full merge
	// (inbox, celebrity pull, PostgreSQL below the floor) at once; a home
	// read beyond it is degraded (FeedReader.HomeDegraded). Default 128;
	// negative: never degraded.
	FullHomeReads int
	// StreamsPerUser bounds a user's open live streams in the process:
	// opening one more ends the user's oldest (default 4).
	StreamsPerUser int
	// StreamsMax bounds the live streams open in the process: beyond it a
	// stream is refused, 503 with Retry-After (default 10,000).
	StreamsMax int
	// StreamHeartbeat is how long a live stream stays silent before a
	// heartbeat comment (default 15 s).
	StreamHeartbeat time.Duration
	// StreamWriteTimeout bounds each write to a live stream: a client
	// that does not read it in time is cut off (default 10 s).
	StreamWriteTimeout time.Duration
	// StreamStartRead is when a live stream reads once more after its
	// start, for a wake-up sent before the projectors saw its user online
	// (default 2 s).
	StreamStartRead time.Duration
	// StreamsHijacked serves live streams from a few shared goroutines
	// instead of a goroutine each: the connection is taken from net/http
	// after the request is read (stream_hijack.go; HTTP/1 only, HTTP/2
	// streams are served the plain way).
	StreamsHijacked bool
	// StreamRetry is the reconnection delay a live stream ended by the
	// server hints (SSE retry:, default 1 s).
	StreamRetry time.Duration
}

func (c Config) withDefaults() Config {
	c.Addr = cmp.Or(c.Addr, "127.0.0.1:8080")
	c.AuthMode = cmp.Or(c.AuthMode, AuthJWT)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, 64<<10)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, 10*time.Second)
	c.ReadHeaderTimeout = cmp.Or(c.ReadHeaderTimeout, 5*time.Second)
	c.ReadTimeout = cmp.Or(c.ReadTimeout, 15*time.Second)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, 20*time.Second)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, 60*time.Second)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, 10*time.Second)
	c.BodyReadTimeout = cmp.Or(c.BodyReadTimeout, 5*time.Second)
	c.MaxConns = cmp.Or(c.MaxConns, DefaultMaxConns)
	c.MaxIdleConns = cmp.Or(c.MaxIdleConns, DefaultMaxIdleConns)
	c.MaxHeaderBytes = cmp.Or(c.MaxHeaderBytes, http.DefaultMaxHeaderBytes)
	c.MaxReadsInFlight = cmp.Or(c.MaxReadsInFlight, DefaultMaxReadsInFlight)
	c.MaxWritesInFlight = cmp.Or(c.MaxWritesInFlight, DefaultMaxWritesInFlight)
	c.FullHomeReads = cmp.Or(c.FullHomeReads, DefaultFullHomeReads)
	c.ReadsRunning = cmp.Or(c.ReadsRunning, DefaultReadsRunning)
	c.StreamsPerUser = cmp.Or(c.StreamsPerUser, DefaultStreamsPerUser)
	c.StreamsMax = cmp.Or(c.StreamsMax, DefaultStreamsMax)
	c.StreamHeartbeat = cmp.Or(c.StreamHeartbeat, 15*time.Second)
	c.StreamWriteTimeout = cmp.Or(c.StreamWriteTimeout, 10*time.Second)
	c.StreamStartRead = cmp.Or(c.StreamStartRead, 2*time.Second)
	c.StreamRetry = cmp.Or(c.StreamRetry, time.Second)
	return c
}

// The defaults of the load-shedding bounds, for a 2-core machine: a read
// costs 40-80 µs of CPU (the first at saturation, the second at a
// quarter of it, docs/benchmarks.md), so 256 reads in flight are 5-10 ms
// of queueing when the cores are saturated. Half of them may do the full
// merge before home reads degrade: a momentary stall of the full mix (a
// GC cycle, Redis descheduled) holds up to about a hundred reads at
// 5,000 reads/s, and degrading those gives up posts without saving work,
// since the celebrity pull it skips is answered from memory. A write
// holds one of the pool's 64 PostgreSQL connections for a few
// milliseconds. 32 reads running at once (16 a core) keep the cores busy
// through a read's waits on Redis, while a wake-up of the rest of the
// process (a projector, CDC, a live stream) waits behind at most those 32
// instead of every read admitted (shed.go, "Turns").
const (
	DefaultMaxReadsInFlight  = 256
	DefaultMaxWritesInFlight = 32
	DefaultFullHomeReads     = 128
	DefaultReadsRunning      = 32
)

// The defaults of the connection bounds: a process may open about 20,000
// files on the machines it runs on, and an idle connection costs about
// 20 KB (docs/api.md, Connections).
const (
	DefaultMaxConns     = 10_000
	DefaultMaxIdleConns = 1_000
)

// The defaults of the live streams' bounds: a user's few devices, and
// what one process holds (docs/streams.md measures the memory).
const (
	DefaultStreamsPerUser = 4
	DefaultStreamsMax     = 10_000
)

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.AuthMode != AuthJWT && c.AuthMode != AuthTrustedHeader:
		return fmt.Errorf("auth mode %q: want %s or %s", c.AuthMode, AuthJWT, AuthTrustedHeader)
	case c.MaxBodyBytes < 1024:
		return fmt.Errorf("max body bytes %d: want at least 1024", c.MaxBodyBytes)
	case c.RequestTimeout <= 0, c.ReadHeaderTimeout <= 0, c.ReadTimeout <= 0, c.WriteTimeout <= 0, c.IdleTimeout <= 0, c.ShutdownTimeout <= 0, c.BodyReadTimeout <= 0:
		return errors.New("timeouts must be positive")
	case c.StreamsPerUser < 1, c.StreamsMax < 1, c.StreamHeartbeat <= 0, c.StreamWriteTimeout <= 0, c.StreamStartRead <= 0, c.StreamRetry <= 0:
		return errors.New("stream bounds and intervals must be positive")
	case c.WritesPerMinute < 0, c.ReadsPerSecond < 0, c.RegistrationsPerHour < 0:
		return errors.New("quotas must not be negative")
	case c.MaxHeaderBytes < 1024:
		return fmt.Errorf("max header bytes %d: want at least 1024", c.MaxHeaderBytes)
	case c.AuthMode != AuthTrustedHeader:
		return nil
	case c.GatewaySecret != "" && len(c.GatewaySecret) < minGatewaySecret:
		return fmt.Errorf("gateway secret of %d bytes: want at least %d", len(c.GatewaySecret), minGatewaySecret)
	case c.GatewaySecret == "" && len(c.TrustedNetworks) == 0 && !LoopbackAddr(c.Addr):
		return fmt.Errorf("%s auth on %s would let any client that reaches it act as any user: "+
			"listen on a loopback address, or configure a gateway secret or trusted networks", AuthTrustedHeader, c.Addr)
	}
	for _, p := range c.TrustedNetworks {
		if !p.IsValid() {
			return errors.New("trusted networks: an invalid prefix")
		}
	}
	return nil
}

// LoopbackAddr reports whether addr (host:port) listens on a loopback
// address only: 127.0.0.0/8, ::1 or localhost. An empty host (every
// interface) is not.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// loopbackNetworks are whom trusted-header mode trusts when it is given
// neither a gateway secret nor trusted networks.
var loopbackNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// TokenVerifier turns a bearer token into a user id; *auth.Signer is one.
type TokenVerifier interface {
	Verify(token string) (int64, error)
}

// UserChecker tells whether a user id is registered, so that an identity
// for nobody is refused; *auth.Users is one. It runs on every identified
// request: it must answer known users from memory.
type UserChecker interface {
	UserExists(ctx context.Context, id int64) (bool, error)
}

// Deps are the server's collaborators.
type Deps struct {
	// Commands is the write side. Required.
	Commands *commands.Commands
	// Tokens verifies bearer tokens. Required in AuthJWT mode.
	Tokens TokenVerifier
	// Users checks that the caller is a registered user. Required.
	Users UserChecker
	// Ready are the readiness checks of GET /readyz by name (e.g.
	// "postgres", "redis"); any failing one makes it 503.
	Ready map[string]func(context.Context) error
	// Degradable are readiness checks of dependencies the server answers
	// without (e.g. "redis": feed reads then come from PostgreSQL): a
	// failing one is reported "down" and the status "degraded", still 200.
	Degradable map[string]func(context.Context) error
	// Feed is the query side. Optional: without it the feed endpoints
	// answer 503.
	Feed FeedReader
	// Streams is the process's live streams hub. Optional: without it
	// (or with a Feed that is no live.Source) the stream endpoints answer
	// 503.
	Streams *live.Hub
	// AfterPostCreated, if set, is called after a post is committed (not
	// for an idempotent replay), e.g. so the query side can give its author
	// read-your-writes. It runs on the request path: keep it fast.
	AfterPostCreated func(ctx context.Context, p commands.Post)
	// AfterPostEdited, if set, is called after an edit is committed (not
	// for an idempotent replay; also for an edit that changed nothing),
	// e.g. so the query side shows the new content at once. It runs on the
	// request path: keep it fast.
	AfterPostEdited func(ctx context.Context, p commands.Post)
	// Status is the source of the operators' page GET /status, on the
	// admin listener (AdminHandler). Optional: without it the page
	// answers 503.
	Status StatusSource
	// Registry is served at the admin listener's /metrics (AdminHandler)
	// and receives the HTTP metrics; pass
	// one to share it with the other components of the process (e.g. the
	// query side's). Default: a new registry of the server's own.
	Registry *prometheus.Registry
	// QuotaRedis keeps the quotas' counts (Config.WritesPerMinute, ...),
	// under QuotaKeys's namespace. Optional: without it no quota applies.
	QuotaRedis redis.UniversalClient
	QuotaKeys  readmodel.Keys
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// TracerProvider, when set, traces every request (tracing.go). Nil:
	// no tracing.
	TracerProvider trace.TracerProvider
}

// Server is the HTTP API.
type Server struct {
	cfg     Config
	gateway gatewayCheck
	deps    Deps
	log     *slog.Logger
	handler http.Handler
	router  *mux.Router // the routes of handler, for Routes
	reg     *prometheus.Registry
	metrics *metrics

	reads, writes limiter             // requests in flight by class, reads running (shed.go)
	conns         connTracker         // open and idle connections (conns.go)
	quotas        quotas              // per-caller quotas (quota.go)
	fullHome      *semaphore.Weighted // full home reads at once; nil: never degraded
	streams       streamRegistry      // open live streams (stream.go)
	hijacked      hijackPool          // the hijacked ones (stream_hijack.go)
	smetrics      *streamMetrics
}

// New builds the server and its routes.
func New(cfg Config, deps Deps) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	if deps.Commands == nil {
		return nil, errors.New("api: nil Commands")
	}
	if cfg.AuthMode == AuthJWT && deps.Tokens == nil {
		return nil, errors.New("api: jwt auth mode needs a token verifier")
	}
	if deps.Users == nil {
		return nil, errors.New("api: nil Users")
	}
	s := &Server{cfg: cfg, deps: deps, log: cmp.Or(deps.Logger, slog.Default()), reg: deps.Registry}
	if cfg.AuthMode == AuthTrustedHeader {
		s.gateway = newGatewayCheck(cfg)
		s.log.Warn("api: trusted-header auth: X-User-Id is taken as the caller's identity on requests that "+s.gateway.String(),
			"addr", cfg.Addr)
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
	}
	var err error
	if s.metrics, err = newMetrics(s.reg); err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	s.reads.max, s.writes.max = int64(max(cfg.MaxReadsInFlight, 0)), int64(max(cfg.MaxWritesInFlight, 0))
	if cfg.ReadsRunning > 0 {
		s.reads.turns.sem = semaphore.NewWeighted(int64(cfg.ReadsRunning))
	}
	if cfg.FullHomeReads > 0 {
		s.fullHome = semaphore.NewWeighted(int64(cfg.FullHomeReads))
	}
	s.conns.maxOpen, s.conns.maxIdle = int64(max(cfg.MaxConns, 0)), int64(max(cfg.MaxIdleConns, 0))
	if err := s.conns.register(s.reg); err != nil {
		return nil, fmt.Errorf("api: register connection metrics: %w", err)
	}
	s.quotas.init(cfg, deps.QuotaRedis, deps.QuotaKeys)
	if err := s.quotas.register(s.reg); err != nil {
		return nil, fmt.Errorf("api: register quota metrics: %w", err)
	}
	if s.smetrics, err = newStreamMetrics(s.reg); err != nil {
		return nil, fmt.Errorf("api: register stream metrics: %w", err)
	}
	if err := newShedMetrics(s.reg, &s.reads, &s.writes); err != nil {
		return nil, fmt.Errorf("api: register shedding metrics: %w", err)
	}
	s.handler = s.routes()
	return s, nil
}

// Handler returns the API as an http.Handler (for tests and embedding).
func (s *Server) Handler() http.Handler { return s.handler }

// Registry is the Prometheus registry the admin listener serves at
// /metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

func (s *Server) routes() http.Handler {
	r := mux.NewRouter()
	allowed := &allowedMethods{}
	r.NotFoundHandler = s.unmatched(errRouteNotFound)
	r.MethodNotAllowedHandler = s.methodNotAllowed(allowed)
	r.Use(s.metrics.middleware)

	// The home feed first: mux tries routes in order, and it is the
	// hottest (no other route matches its path).
	r.Handle("/api/feed", s.read(s.authed(s.homeFeed))).Methods(http.MethodGet)
	r.Handle("/api/feed/stream", s.streaming(s.homeStream)).Methods(http.MethodGet)
	r.Handle("/healthz", http.HandlerFunc(s.healthz)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/readyz", http.HandlerFunc(s.readyz)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/openapi.json", http.HandlerFunc(serveOpenAPI)).Methods(http.MethodGet, http.MethodHead)

	// Full paths on the root router, not a subrouter: mux answers 404
	// instead of 405 for a wrong method under a subrouter.
	r.Handle("/api/users", s.write(s.public(s.registerUser))).Methods(http.MethodPost)
	r.Handle("/api/users/{id}", s.read(s.authed(s.getUser))).Methods(http.MethodGet)
	r.Handle("/api/users/{id}/posts", s.read(s.authed(s.authorPosts))).Methods(http.MethodGet)
	r.Handle("/api/posts", s.write(s.authed(s.createPost))).Methods(http.MethodPost)
	r.Handle("/api/posts/{id}", s.read(s.authed(s.getPost))).Methods(http.MethodGet)
	r.Handle("/api/posts/{id}/replies", s.read(s.authed(s.postReplies))).Methods(http.MethodGet)
	r.Handle("/api/posts/{id}", s.write(s.authed(s.deletePost))).Methods(http.MethodDelete)
	r.Handle("/api/posts/{id}", s.write(s.authed(s.editPost))).Methods(http.MethodPatch)
	r.Handle("/api/posts/{id}/repost", s.write(s.authed(s.repost))).Methods(http.MethodPut)
	r.Handle("/api/posts/{id}/repost", s.write(s.authed(s.unrepost))).Methods(http.MethodDelete)
	r.Handle("/api/posts/{id}/like", s.write(s.authed(s.like))).Methods(http.MethodPut)
	r.Handle("/api/posts/{id}/like", s.write(s.authed(s.unlike))).Methods(http.MethodDelete)
	r.Handle("/api/following/{userId}", s.write(s.authed(s.follow))).Methods(http.MethodPut)
	r.Handle("/api/following/{userId}", s.write(s.authed(s.unfollow))).Methods(http.MethodDelete)
	r.Handle("/api/notifications", s.read(s.authed(s.notifications))).Methods(http.MethodGet)
	r.Handle("/api/notifications/stream", s.streaming(s.notificationsStream)).Methods(http.MethodGet)
	r.Handle("/api/markers", s.read(s.authed(s.getMarkers))).Methods(http.MethodGet)
	r.Handle("/api/markers", s.write(s.authed(s.putMarkers))).Methods(http.MethodPut)
	r.Handle("/api/muting/{userId}", s.write(s.authed(s.mute))).Methods(http.MethodPut)
	r.Handle("/api/muting/{userId}", s.write(s.authed(s.unmute))).Methods(http.MethodDelete)
	r.Handle("/api/blocking/{userId}", s.write(s.authed(s.block))).Methods(http.MethodPut)
	r.Handle("/api/blocking/{userId}", s.write(s.authed(s.unblock))).Methods(http.MethodDelete)
	s.router = r
	a, err := newAllowedMethods(r)
	if err != nil {
		panic(fmt.Sprintf("api: routes: %v", err)) // every route above has a path and methods
	}
	*allowed = *a

	return s.traced(r, s.recoverPanics(s.withRequestID(r)))
}

// Route is one method on one path template of the API.
type Route struct {
	Method string
	Path   string // the route's template, e.g. /api/users/{id}
}

// Routes lists every method and path the server routes, in routing
// order (the OpenAPI document at /openapi.json describes each).
func (s *Server) Routes() []Route {
	var out []Route
	_ = s.router.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		path, err := route.GetPathTemplate()
		if err != nil {
			return err
		}
		methods, err := route.GetMethods()
		if err != nil {
			return err
		}
		for _, m := range methods {
			out = append(out, Route{Method: m, Path: path})
		}
		return nil
	})
	return out
}

// ListenAndServe listens on Config.Addr and serves until ctx is done; see
// Serve.
func (s *Server) ListenAndServe(ctx context.Context, onListen func(addr net.Addr)) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.Addr, err)
	}
	if onListen != nil {
		onListen(ln.Addr())
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln with net/http's server until ctx is done, then shuts
// down gracefully: it stops accepting, lets requests in flight finish for
// up to ShutdownTimeout, and returns nil (or the shutdown's error if they
// did not finish).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.framingCheck(s.handler),
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    s.cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ConnState:         s.conns.state,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		// OPTIONS * reaches the handler (a 404), so that framingCheck
		// sees every request the server hands over.
		DisableGeneralOptionsHandler: true,
	}
	ln = s.conns.listener(ln)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve http: %w", err)
	case <-ctx.Done():
	}
	s.CloseStreams() // each ends with a retry hint, before Shutdown waits for them
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
		return fmt.Errorf("shut down http: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve http: %w", err)
	}
	return nil
}
