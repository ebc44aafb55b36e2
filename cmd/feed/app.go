package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/migrations"
)

// App holds the configuration and the shared connections of one process.
type App struct {
	Cfg   Config
	Log   *slog.Logger
	Pool  *pgxpool.Pool
	Redis redis.UniversalClient
	// Metrics, when set (by `feed dev`), is the one registry every role of
	// the process registers on, so the API's /metrics shows them all.
	Metrics *prometheus.Registry
}

// openPostgres connects and, unless skipCheck, refuses an unmigrated schema.
func openPostgres(ctx context.Context, cfg Config, maxConns int32, skipCheck bool) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if maxConns > 0 {
		pc.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to PostgreSQL at %s: %w", redactURL(cfg.DatabaseURL), err)
	}
	if !skipCheck {
		if err := migrations.Check(pctx, pool); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return pool, nil
}

func openRedis(ctx context.Context, cfg Config, poolSize int) (redis.UniversalClient, error) {
	opt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	if poolSize > 0 {
		opt.PoolSize = poolSize
	}
	c := redis.NewClient(opt)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("connect to Redis at %s: %w", cfg.RedisURL, err)
	}
	return c, nil
}

// newApp loads the configuration and opens what the caller asks for.
func newApp(ctx context.Context, wantPG, wantRedis bool) (*App, error) {
	cfg, err := LoadConfig()
	if err != nil {
		return nil, usageError{err.Error()}
	}
	a := &App{Cfg: cfg, Log: slog.Default()}
	if wantPG {
		if a.Pool, err = openPostgres(ctx, cfg, 64, false); err != nil {
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

// Close releases the connections.
func (a *App) Close() {
	if a.Pool != nil {
		a.Pool.Close()
	}
	if a.Redis != nil {
		_ = a.Redis.Close()
	}
}

func redactURL(s string) string {
	// Never print a password from a connection string.
	if i, j := indexOf(s, "://"), indexOf(s, "@"); i >= 0 && j > i {
		user := s[i+3 : j]
		if k := indexOf(user, ":"); k >= 0 {
			return s[:i+3] + user[:k] + ":***" + s[j:]
		}
	}
	return s
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}
