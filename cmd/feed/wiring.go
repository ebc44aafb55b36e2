package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/internal/service"
	"github.com/feedco/feed/migrations"
	"github.com/feedco/feed/status"
)

// The parts the roles' wiring functions compose: connections, and running
// their services (internal/service) together until the first fails or the
// context ends.

// App holds the configuration and the shared connections of one process,
// for the commands that hand them around (`feed status`, `feed rebuild`).
type App struct {
	Cfg   Config
	Log   *slog.Logger
	Pool  *pgxpool.Pool
	Redis redis.UniversalClient
}

// Close releases the connections.
func (a *App) Close() {
	if a.Pool != nil {
		a.Pool.Close()
	}
	if a.Redis != nil {
		_ = a.Redis.Close()
	}
}

// openApp opens the connections a command asks for.
func openApp(ctx context.Context, cfg Config, log *slog.Logger, wantPG, wantRedis bool) (*App, error) {
	a := &App{Cfg: cfg, Log: log}
	var err error
	if wantPG {
		if a.Pool, err = openPostgres(ctx, cfg, 64, true); err != nil {
			return nil, err
		}
	}
	if wantRedis {
		if a.Redis, err = openRedis(ctx, cfg, 256); err != nil {
			a.Close()
			return nil, err
		}
	}
	return a, nil
}

// openResolvedApp opens PostgreSQL and Redis for a tool that reads and
// writes the read models of the active versions (feed rebuild, feed
// verify): cfg's feed policy resolved against the recorded one, and the
// broker checked, since both wait on consumer groups.
func openResolvedApp(ctx context.Context, cfg Config, log *slog.Logger) (*App, Config, error) {
	a, err := openApp(ctx, cfg, log, true, true)
	if err != nil {
		return nil, cfg, err
	}
	if cfg, err = resolvePolicy(ctx, cfg, a.Pool, log); err != nil {
		a.Close()
		return nil, cfg, err
	}
	if err := checkKafka(ctx, cfg); err != nil {
		a.Close()
		return nil, cfg, err
	}
	a.Cfg = cfg
	return a, cfg, nil
}

// openPostgres connects (maxConns > 0 bounds the pool) and, if
// checkSchema, refuses an unmigrated schema.
func openPostgres(ctx context.Context, cfg Config, maxConns int32, checkSchema bool) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, usageError{fmt.Sprintf("DATABASE_URL %s: %s", redactDSN(cfg.DatabaseURL), dsnReason(cfg.DatabaseURL, err))}
	}
	if maxConns > 0 {
		pc.MaxConns = maxConns
	}
	pc.ShouldPing = pingAfterDeadConn
	if _, set := pc.ConnConfig.RuntimeParams["application_name"]; !set && cfg.AppName != "" {
		pc.ConnConfig.RuntimeParams["application_name"] = cfg.AppName
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL at %s: %s", redactDSN(cfg.DatabaseURL), dsnReason(cfg.DatabaseURL, err))
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to PostgreSQL at %s: %s", redactDSN(cfg.DatabaseURL), dsnReason(cfg.DatabaseURL, err))
	}
	if checkSchema {
		if err := migrations.Check(pctx, pool); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return pool, nil
}

// openStores opens what a long-running role reads and writes: PostgreSQL,
// whose schema must be migrated, and Redis; close releases both.
func openStores(ctx context.Context, cfg Config) (pool *pgxpool.Pool, rdb redis.UniversalClient, close func(), err error) {
	if pool, err = openPostgres(ctx, cfg, 64, true); err != nil {
		return nil, nil, nil, err
	}
	if rdb, err = openRedis(ctx, cfg, 256); err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	return pool, rdb, func() { _ = rdb.Close(); pool.Close() }, nil
}

// isClusterURL reports whether a REDIS_URL is go-redis's cluster form: a
// seed node in the host and more in addr query parameters
// (redis://h1:p1?addr=h2:p2&addr=h3:p3).
func isClusterURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.Query().Has("addr")
}

// openRedis connects to REDIS_URL with a pool of poolSize connections
// (0: go-redis's default; per node on a cluster). The cluster form
// (isClusterURL) gives a *redis.ClusterClient, which routes each command
// by its key's slot and splits pipelines per node; a single address a
// *redis.Client.
func openRedis(ctx context.Context, cfg Config, poolSize int) (redis.UniversalClient, error) {
	var c redis.UniversalClient
	if isClusterURL(cfg.RedisURL) {
		opt, err := redis.ParseClusterURL(cfg.RedisURL)
		if err != nil {
			return nil, redisURLError(cfg.RedisURL, err)
		}
		if poolSize > 0 {
			opt.PoolSize = poolSize
		}
		failFast(&opt.DialTimeout, &opt.DialerRetries, &opt.MaxRetries, &opt.MinRetryBackoff, &opt.MaxRetryBackoff)
		c = redis.NewClusterClient(opt)
	} else {
		opt, err := redis.ParseURL(cfg.RedisURL)
		if err != nil {
			return nil, redisURLError(cfg.RedisURL, err)
		}
		if poolSize > 0 {
			opt.PoolSize = poolSize
		}
		failFast(&opt.DialTimeout, &opt.DialerRetries, &opt.MaxRetries, &opt.MinRetryBackoff, &opt.MaxRetryBackoff)
		c = redis.NewClient(opt)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pingRedis(pctx, c); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("connect to Redis at %s: %s", redactDSN(cfg.RedisURL), dsnReason(cfg.RedisURL, err))
	}
	if err := traceRedis(c); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// failFast sets go-redis's dialing and retries, where REDIS_URL leaves
// them unset, so that a Redis that is down fails a command at once and the
// query side's circuit breaker opens on the first failures: one dial per
// attempt (go-redis dials 5 times, 100 ms apart, by default), within 1 s,
// and one retry at once (for a pooled connection Redis closed, e.g. after
// a restart), not three with a backoff.
func failFast(dialTimeout *time.Duration, dialerRetries, maxRetries *int, minBackoff, maxBackoff *time.Duration) {
	if *dialTimeout == 0 {
		*dialTimeout = time.Second
	}
	if *dialerRetries == 0 {
		*dialerRetries = 1
	}
	if *maxRetries == 0 {
		*maxRetries = 1
		*minBackoff, *maxBackoff = -1, -1
	}
}

// pingRedis checks that Redis answers: on a cluster, every master (which
// also loads the slot map), and that the cluster serves all its slots.
func pingRedis(ctx context.Context, c redis.UniversalClient) error {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return c.Ping(ctx).Err()
	}
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() }); err != nil {
		return err
	}
	info, err := cc.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return errors.New("the cluster's state is not ok (CLUSTER INFO)")
	}
	return nil
}

// redisURLError is the usage error of a REDIS_URL that does not parse.
func redisURLError(raw string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		// net/url's message quotes the URL, password included.
		err = errors.New("not a valid URL")
	}
	return usageError{fmt.Sprintf("REDIS_URL %s: %s", redactDSN(raw), dsnReason(raw, err))}
}

// migrate applies the embedded migrations and logs what it applied.
func migrate(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) ([]int, error) {
	mctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	applied, err := migrations.Up(mctx, pool)
	if err != nil {
		return nil, fmt.Errorf("apply migrations: %w", err)
	}
	log.Info("migrations applied", "versions", applied)
	return applied, nil
}

// runRole runs a role's services with service.Run, after its admin
// listener on adminAddr ("": not served; adminListener) and a start-up
// line with what it serves.
func runRole(ctx context.Context, log *slog.Logger, role, adminAddr string, reg *prometheus.Registry, st api.StatusSource, svcs ...*service.Service) error {
	served := []any{}
	if adminAddr != "" {
		l, err := adminListener(adminAddr)
		if err != nil {
			return err
		}
		svcs = append([]*service.Service{adminService(l, reg, st, log)}, svcs...)
		served = append(served, "metrics", "http://"+l.Addr().String()+"/metrics", "health", "http://"+l.Addr().String()+"/healthz")
	}
	log.Info(role+": starting", served...)
	return service.Run(ctx, log, role, svcs...)
}

// adminListener binds the admin listener (FEED_ADMIN_ADDR), or says which
// variable to change.
func adminListener(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("the admin listener (/metrics, /status, pprof): listen on FEED_ADMIN_ADDR=%s: %w "+
			"(another process of feed on this machine holds it? give each its own, e.g. 127.0.0.1:0)", addr, err)
	}
	return l, nil
}

// statusSource is the operators' page of a role (GET /status on the admin
// listener): the model of `feed status`, gathered at most once a second
// with what the role has (rdb may be nil), redacted as `feed config`
// redacts (redactedStatus).
func statusSource(cfg Config, pool *pgxpool.Pool, rdb redis.UniversalClient) api.StatusSource {
	sc := status.Config{Pool: pool, Redis: rdb, Kafka: connOf(cfg), Topic: cfg.Topic, Slot: cfg.Slot, LagWarnBytes: cfg.LagWarnBytes}
	if rdb == nil {
		sc.RedisErr = errors.New("this role does not connect to Redis")
	}
	return redactedStatus{Cache: status.NewCache(sc, time.Second), secrets: connectionSecrets(cfg)}
}

// redactedStatus is a status cache whose reports are redacted.
type redactedStatus struct {
	*status.Cache
	secrets []string
}

func (r redactedStatus) Status(ctx context.Context) status.Report {
	return status.Redact(r.Cache.Status(ctx), r.secrets...)
}

// connectionSecrets are what the status page must not show of cfg's
// connections: the hosts, ports, users, databases and passwords of
// DATABASE_URL and REDIS_URL, and the Kafka brokers' addresses.
func connectionSecrets(cfg Config) []string {
	var out []string
	if pc, err := pgconn.ParseConfig(cfg.DatabaseURL); err == nil {
		out = append(out, pc.Host, net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))), pc.User, pc.Database, pc.Password)
		for _, fb := range pc.Fallbacks {
			out = append(out, fb.Host, net.JoinHostPort(fb.Host, strconv.Itoa(int(fb.Port))))
		}
	}
	if u, err := url.Parse(cfg.RedisURL); err == nil {
		out = append(out, u.Host, u.Hostname(), u.User.Username())
		if pw, ok := u.User.Password(); ok {
			out = append(out, pw)
		}
		for _, a := range u.Query()["addr"] {
			out = append(out, a)
			if h, _, err := net.SplitHostPort(a); err == nil {
				out = append(out, h)
			}
		}
	}
	for _, b := range append(slices.Clone(cfg.KafkaBrokers), cfg.KafkaAddr) {
		out = append(out, b)
		if h, _, err := net.SplitHostPort(b); err == nil {
			out = append(out, h)
		}
	}
	return slices.DeleteFunc(out, func(s string) bool { return s == "" })
}

// listen opens a TCP listener on addr, for a service that serves HTTP.
func listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return l, nil
}

// serveHTTP serves h on l until ctx ends, then closes the server.
func serveHTTP(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	defer stop()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// adminService serves the admin listener on l (api.AdminHandler): reg's
// /metrics, st's /status, Go's profiles, and GET /healthz: 200 while the
// process serves (what `feed healthcheck` asks of cdc and project in
// compose.yaml; like the API's /healthz it checks no dependency). l is
// bound, so it is ready once started.
func adminService(l net.Listener, reg *prometheus.Registry, st api.StatusSource, log *slog.Logger) *service.Service {
	h := api.AdminHandler(reg, st, log)
	return service.New("admin", func(ctx context.Context) error { return serveHTTP(ctx, l, h) })
}

// statusRedis is the App's Redis client, or, when the App has none, a
// small one of its own for a `feed status` section; done closes what it
// opened.
func (a *App) statusRedis(ctx context.Context) (redis.UniversalClient, func(), error) {
	if a.Redis != nil {
		return a.Redis, func() {}, nil
	}
	rdb, err := openRedis(ctx, a.Cfg, 4)
	if err != nil {
		return nil, nil, err
	}
	return rdb, func() { _ = rdb.Close() }, nil
}
