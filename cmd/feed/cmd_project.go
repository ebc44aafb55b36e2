package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
)

func init() {
	register("project", "run the projectors (--only inbox,timelines,followers,posts; --metrics-addr HOST:PORT)", runProject)
	// `feed dev` runs every projector; the dev hooks set KafkaBrokers first.
	registerDevRole("projections", func(ctx context.Context, a *App) error {
		return runProjectors(ctx, a, nil, a.Metrics)
	})
}

func runProject(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("project", flag.ContinueOnError)
	only := fs.String("only", "", "comma-separated projectors to run (default: all of "+strings.Join(projections.Names(), ",")+")")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus /metrics on this address (default: none)")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	var names []string
	for _, n := range strings.Split(*only, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	a, err := newApp(ctx, true, true)
	if err != nil {
		return err
	}
	defer a.Close()
	reg := prometheus.NewRegistry()
	defer serveMetrics(*metricsAddr, reg, a.Log, "project")()
	return runProjectors(ctx, a, names, reg)
}

// projectionConfig maps the process configuration to the projectors' policies.
func projectionConfig(cfg Config) projections.Config {
	return projections.Config{
		Keys:              readmodel.Keys{},
		FollowerCacheRows: followerCacheRows(cfg.FollowerCacheRows),
	}.WithPolicy(cfg.Policy)
}

// followerCacheRows maps FEED_FOLLOWER_CACHE_ROWS to the projector's
// setting: 0 or less turns the cache off (the projector's 0 would mean
// its default).
func followerCacheRows(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// brokersOf returns the configured brokers, or the development broker's
// address (`feed kafka`) when KAFKA_BROKERS is empty.
func brokersOf(cfg Config) []string {
	if len(cfg.KafkaBrokers) > 0 {
		return cfg.KafkaBrokers
	}
	return []string{cfg.KafkaAddr}
}

func runProjectors(ctx context.Context, a *App, names []string, reg prometheus.Registerer) error {
	m, err := projections.NewMetrics(reg)
	if err != nil {
		return err
	}
	if _, err := projections.New(projectionConfig(a.Cfg), a.Pool, a.Redis, m, names...); err != nil {
		return usageError{err.Error()}
	}
	ps := names
	if len(ps) == 0 {
		ps = projections.Names()
	}
	readmodel.WarnListpack(ctx, a.Redis, a.Cfg.Policy, a.Log)
	// Each projector runs at its projection's active version and restarts
	// on the new one when `feed rebuild` switches it (docs/rebuild.md).
	s, err := projections.NewSupervisor(projections.SupervisorConfig{
		Projections: projectionConfig(a.Cfg),
		Runner:      projections.RunnerConfig{Brokers: brokersOf(a.Cfg), Topic: a.Cfg.Topic, Logger: a.Log, Metrics: m},
		Names:       ps,
	}, a.Pool, a.Redis, m)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "project: running %v on topic %s (following projection versions)\n", ps, a.Cfg.Topic)
	return s.Run(ctx)
}
