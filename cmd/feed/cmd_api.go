package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/feedco/feed/api"
	feedcmd "github.com/feedco/feed/commands"
	"github.com/feedco/feed/internal/auth"
	"github.com/feedco/feed/internal/service"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/live"
	"github.com/feedco/feed/queries"
)

func newAPICommand(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "api",
		Short: "The HTTP API: the write side and the query side",
		Long: longHelp("The HTTP API: the write side (commands) and the query side (home feed, author timelines),\n"+
			"with /healthz and /readyz; /metrics, the operators' status page /status (which reads Kafka too) and pprof\n"+
			"on the admin listener (FEED_ADMIN_ADDR).", envPostgres, envRedis, envKafka, envAPI, []string{"FEED_SLOT", "FEED_LAG_WARN_BYTES"}),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := c.config()
			if err != nil {
				return err
			}
			return runAPI(cmd.Context(), cfg, log, c.stdout)
		},
	}
}

// runAPI is `feed api`: PostgreSQL (migrated) and Redis, the API server
// with the query side, served until ctx ends.
func runAPI(ctx context.Context, cfg Config, log *slog.Logger, stdout io.Writer) error {
	pool, rdb, closeStores, err := openStores(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeStores()
	if cfg, err = resolvePolicy(ctx, cfg, pool, log); err != nil {
		return err
	}
	reg := newRoleRegistry()
	a, err := newAPI(ctx, cfg, apiParts{Pool: pool, Redis: rdb, Registry: reg, Log: log, Stdout: stdout, AllowDevSecret: cfg.AllowDevSecret})
	if err != nil {
		return err
	}
	log.Info("api: starting", "http", "http://"+a.addr)
	svcs, err := withAdmin(cfg, a, stdout, a.services()...)
	if err != nil {
		return err
	}
	return service.Run(ctx, log, "api", svcs...)
}

// apiParts are what the API is built from.
type apiParts struct {
	Pool  *pgxpool.Pool
	Redis redis.UniversalClient
	// Registry receives every metric of the API and serves them at
	// /metrics: `feed dev` passes the one its other components use.
	Registry *prometheus.Registry
	Log      *slog.Logger
	// Stdout gets the "listening on" line.
	Stdout io.Writer
	// AllowDevSecret accepts the built-in development JWT secret (`feed
	// dev`, or FEED_ALLOW_DEV_SECRET=1 for `feed api`).
	AllowDevSecret bool
}

// apiService is the API server bound to its address: its service serves
// it (ready once started: the listener already accepts connections), and
// feed runs the query side's background work (queries.Feed.Run).
type apiService struct {
	// lease renews the Snowflake node id's lease and releases it; it
	// starts before the API and stops after it.
	lease *service.Service
	feed  *service.Service
	hub   *service.Service // the live streams' hub, started before the server and stopped after it
	svc   *service.Service
	addr  string
	admin http.Handler // the server's admin handler (api.Server.Admin)
}

// withAdmin returns svcs after the API's admin listener on
// FEED_ADMIN_ADDR (none when it is ""), whose address it prints on
// stdout: the operators' pages serve from the start.
func withAdmin(cfg Config, a apiService, stdout io.Writer, svcs ...*service.Service) ([]*service.Service, error) {
	if cfg.AdminAddr == "" {
		return svcs, nil
	}
	l, err := adminListener(cfg.AdminAddr)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "admin: listening on http://%s\n", l.Addr())
	h := a.admin
	return append([]*service.Service{service.New("admin", func(ctx context.Context) error { return serveHTTP(ctx, l, h) })}, svcs...), nil
}

// services are the API's services in their starting order: the node id's
// lease, the query side's background work, the live streams' hub, then
// the server (stopped first, ending its streams; the lease is released
// last).
func (a apiService) services() []*service.Service {
	return []*service.Service{a.lease, a.feed, a.hub, a.svc}
}

// newAPI builds the API: token verification, the write side, the query
// side (GET /api/feed and GET /api/users/{id}/posts, with every post the
// API creates written through to its author's read models at once), and
// the server listening on HTTP_ADDR.
func newAPI(ctx context.Context, cfg Config, p apiParts) (apiService, error) {
	users, err := auth.NewUsers(p.Pool, 0)
	if err != nil {
		return apiService{}, err
	}
	deps := api.Deps{Logger: p.Log, Registry: p.Registry, Users: users, QuotaRedis: p.Redis}
	if tracerProvider != nil {
		deps.TracerProvider = tracerProvider
	}
	if cfg.AuthMode == api.AuthJWT {
		if cfg.JWTSecret == devSecret && !p.AllowDevSecret {
			return apiService{}, usageError{"FEED_JWT_SECRET is unset (the built-in development secret is only accepted by `feed dev` or with FEED_ALLOW_DEV_SECRET=1)"}
		}
		signer, err := auth.New(cfg.JWT())
		if err != nil {
			return apiService{}, usageError{err.Error()}
		}
		deps.Tokens = signer
	}
	// The Snowflake node id, leased: two live processes never share one.
	lease, err := snowflake.AcquireLease(ctx, p.Pool, snowflake.LeaseConfig{Node: cfg.NodeID, Holder: leaseHolder(), WaitForExpiry: true, Logger: p.Log})
	switch {
	case errors.Is(err, snowflake.ErrNodeTaken):
		return apiService{}, usageError{fmt.Sprintf("FEED_NODE_ID=%d: %v. "+
			"Give this process another FEED_NODE_ID, or leave it unset to lease a free one", cfg.NodeID, err)}
	case err != nil:
		return apiService{}, err
	}
	p.Log.Info("api: leased a Snowflake node id", "node", lease.Node())
	built := false
	defer func() {
		if !built { // a start that fails gives the node id back at once
			_ = lease.Release()
		}
	}()
	if deps.Commands, err = feedcmd.New(p.Pool, lease.Generator(), feedcmd.Config{MaxContentChars: cfg.MaxContentChars}); err != nil {
		return apiService{}, err
	}
	deps.Ready = map[string]func(context.Context) error{"postgres": p.Pool.Ping}
	// Without Redis the API still answers (feeds from PostgreSQL, writes
	// skip the newest-post marker): ready, degraded.
	deps.Degradable = map[string]func(context.Context) error{
		"redis": func(ctx context.Context) error { return p.Redis.Ping(ctx).Err() },
	}

	f, err := queries.New(queries.Config{
		CelebrityCacheTTL:  cfg.CelebrityCacheTTL,
		RefreshSettle:      cfg.RefreshSettle,
		ReadCacheKeys:      readCacheKeys(cfg.ReadCacheKeys),
		ReadCacheBarrier:   cfg.ReadCacheBarrier,
		StreamPlainReads:   cfg.StreamsPlainReads,
		RebuildConcurrency: cfg.RebuildConcurrency,
		Registerer:         p.Registry,
		Logger:             p.Log,
	}.WithPolicy(cfg.Policy), readRetryDB{p.Pool}, p.Redis)
	if err != nil {
		return apiService{}, fmt.Errorf("build the query side: %w", err)
	}
	deps.Feed = f
	// The live streams' hub: one Pub/Sub subscription for the process.
	hub, err := live.NewHub(live.HubConfig{OnAuthorWake: f.ForgetTimelineHead, Logger: p.Log}, p.Redis)
	if err != nil {
		return apiService{}, err
	}
	deps.Streams = hub
	// The operators' page, GET /status on the admin listener.
	deps.Status = statusSource(cfg, p.Pool, p.Redis)
	deps.AfterPostCreated = func(ctx context.Context, post feedcmd.Post) {
		err := f.PostCreated(ctx, api.NewPostOf(post))
		if err != nil && !errors.Is(err, queries.ErrCircuitOpen) { // skipped while Redis is down: the circuit logs that once
			// The post is committed; the projectors will show it.
			p.Log.Warn("queries: marking a new post as its author's newest failed", "post", post.ID, "err", err)
		}
	}
	deps.AfterPostEdited = func(ctx context.Context, post feedcmd.Post) {
		if post.EditedAt == nil {
			return // the content was unchanged: nothing to show
		}
		err := f.PostEdited(ctx, queries.EditedPost{ID: post.ID, AuthorID: post.AuthorID, Content: post.Content,
			Version: post.Version, EditedAt: *post.EditedAt})
		if err != nil && !errors.Is(err, queries.ErrCircuitOpen) {
			// The edit is committed; this process shows it already, the
			// posts projector writes it to Redis and the other API
			// processes learn it from the change feed.
			p.Log.Warn("queries: write-through of an edit failed", "post", post.ID, "err", err)
		}
	}

	srv, err := api.New(api.Config{
		Addr: cfg.HTTPAddr, AuthMode: cfg.AuthMode,
		GatewaySecret: cfg.GatewaySecret, TrustedNetworks: cfg.TrustedNetworks,
		MaxReadsInFlight: offIsNegative(cfg.MaxReadsInFlight), MaxWritesInFlight: offIsNegative(cfg.MaxWritesInFlight),
		FullHomeReads: offIsNegative(cfg.FullHomeReads), ReadsRunning: offIsNegative(cfg.ReadsRunning),
		MaxConns: offIsNegative(cfg.MaxConns), MaxIdleConns: offIsNegative(cfg.MaxIdleConns),
		BodyReadTimeout: cfg.BodyReadTimeout,
		WritesPerMinute: cfg.QuotaWritesPerMinute, ReadsPerSecond: cfg.QuotaReadsPerSecond,
		RegistrationsPerHour: cfg.QuotaRegistrationsPerHour,
		StreamsPerUser:       cfg.StreamsPerUser, StreamsMax: cfg.StreamsMax, StreamsHijacked: !cfg.StreamsGoroutine,
	}, deps)
	if err != nil {
		return apiService{}, err
	}
	l, err := listen(cfg.HTTPAddr)
	if err != nil {
		return apiService{}, err
	}
	addr := l.Addr().String()
	built = true
	fmt.Fprintf(p.Stdout, "api: listening on http://%s\n", addr)
	return apiService{addr: addr, admin: srv.Admin(), lease: service.New("node-lease", lease.Run), feed: f.Service(), hub: hub.Service(), svc: service.New("api", func(ctx context.Context) error {
		return srv.Serve(ctx, l)
	})}, nil
}

// leaseHolder names this process in the node id's lease: host and pid.
func leaseHolder() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s pid %d", cmp.Or(host, "unknown host"), os.Getpid())
}

// offIsNegative maps a load-shedding variable's 0 (off) to api.Config's
// negative (its 0 would mean the default).
func offIsNegative(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// readCacheKeys maps FEED_READ_CACHE_KEYS to the query side's setting: 0
// turns the cache off (the query side's 0 would mean its default).
func readCacheKeys(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
