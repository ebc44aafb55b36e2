package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/feedco/feed/migrations"
)

// devRole is one part of the system that `feed dev` runs in its process.
// Roles are registered by the files of their subcommands, in start order.
type devRole struct {
	name string
	run  func(ctx context.Context, a *App) error
}

var devRoles []devRole

func registerDevRole(name string, run func(ctx context.Context, a *App) error) {
	devRoles = append(devRoles, devRole{name: name, run: run})
}

// devHooks run before the roles, in order (migrations, the embedded broker);
// they may change the App's configuration (e.g. set the broker address).
var devHooks []func(ctx context.Context, a *App) (cleanup func(), err error)

func init() {
	register("dev", "everything in one process: migrations, embedded broker, CDC, projectors, API", runDev)
}

func runDev(ctx context.Context, args []string) error {
	if len(args) > 0 {
		return usageError{"dev takes no arguments (configure it with the environment)"}
	}
	// The development secret is acceptable here, and only here.
	_ = os.Setenv("FEED_ALLOW_DEV_SECRET", "1")
	cfg, err := LoadConfig()
	if err != nil {
		return usageError{err.Error()}
	}
	pool, err := openPostgres(ctx, cfg, 64, true)
	if err != nil {
		return err
	}
	mctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	applied, err := migrations.Up(mctx, pool)
	cancel()
	if err != nil {
		pool.Close()
		return err
	}
	fmt.Fprintf(os.Stderr, "dev: migrations applied: %v\n", applied)
	rc, err := openRedis(ctx, cfg, 256)
	if err != nil {
		pool.Close()
		return err
	}
	a := &App{Cfg: cfg, Log: logger(), Pool: pool, Redis: rc, Metrics: prometheus.NewRegistry()}
	defer a.Close()
	for _, hook := range devHooks {
		cleanup, err := hook(ctx, a)
		if err != nil {
			return err
		}
		if cleanup != nil {
			defer cleanup()
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, r := range devRoles {
		g.Go(func() error {
			if err := r.run(gctx, a); err != nil && gctx.Err() == nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
			return nil
		})
	}
	return g.Wait()
}
