package main

import (
	"context"
	"fmt"
	"net"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedco/feed/api"
	feedcmd "github.com/feedco/feed/commands"
	"github.com/feedco/feed/internal/auth"
	"github.com/feedco/feed/internal/snowflake"
)

func init() {
	register("api", "the HTTP API (write side, and the query side when wired)", runAPICommand)
	registerDevRole("api", runAPI)
}

// apiExtensions plug other components into the API server before it starts:
// the query side sets deps.Feed (and, if it wants, deps.AfterPostCreated)
// from its own file (e.g. cmd/feed/api_queries.go with an init that appends
// here), registering its metrics in deps.Registry. A cleanup runs after the
// server stopped.
var apiExtensions []func(ctx context.Context, a *App, deps *api.Deps) (cleanup func(), err error)

func runAPICommand(ctx context.Context, args []string) error {
	if len(args) > 0 {
		return usageError{"api takes no arguments (configure it with the environment)"}
	}
	a, err := newApp(ctx, true, true)
	if err != nil {
		return err
	}
	defer a.Close()
	a.Log = logger()
	return runAPI(ctx, a)
}

// runAPI serves the API until ctx is done, then shuts down gracefully.
func runAPI(ctx context.Context, a *App) error {
	cfg := a.Cfg
	reg := a.Metrics
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	deps := api.Deps{Logger: a.Log, Registry: reg}
	if cfg.AuthMode == api.AuthJWT {
		if cfg.JWTSecret == devSecret && os.Getenv("FEED_ALLOW_DEV_SECRET") != "1" {
			return usageError{"FEED_JWT_SECRET is unset (the built-in development secret is only accepted by `feed dev` or with FEED_ALLOW_DEV_SECRET=1)"}
		}
		signer, err := auth.NewSigner(cfg.JWTSecret)
		if err != nil {
			return usageError{err.Error()}
		}
		deps.Tokens = signer
	}
	ids, err := snowflake.New(cfg.NodeID)
	if err != nil {
		return usageError{fmt.Sprintf("FEED_NODE_ID: %v", err)}
	}
	deps.Commands, err = feedcmd.New(a.Pool, ids, feedcmd.Config{MaxContentChars: cfg.MaxContentChars})
	if err != nil {
		return err
	}
	deps.Ready = map[string]func(context.Context) error{"postgres": a.Pool.Ping}
	if a.Redis != nil {
		deps.Ready["redis"] = func(ctx context.Context) error { return a.Redis.Ping(ctx).Err() }
	}
	for _, ext := range apiExtensions {
		cleanup, err := ext(ctx, a, &deps)
		if err != nil {
			return err
		}
		if cleanup != nil {
			defer cleanup()
		}
	}
	srv, err := api.New(api.Config{Addr: cfg.HTTPAddr, AuthMode: cfg.AuthMode}, deps)
	if err != nil {
		return err
	}
	return srv.ListenAndServe(ctx, func(addr net.Addr) {
		fmt.Printf("api: listening on http://%s\n", addr)
	})
}
