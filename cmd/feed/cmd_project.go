package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/feedco/feed/internal/service"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
)

func newProjectCommand(c *cli) *cobra.Command {
	var only []string
	var metricsAddr string
	cmd := &cobra.Command{
		Use:   "project",
		Short: "Run the projectors (all, or --only some of them)",
		Long: longHelp("Runs the projectors that build the Redis read models from the Kafka topic, each in its consumer group,\n"+
			"at its projection's active version (following `feed rebuild`'s switches).",
			envPostgres, envRedis, envKafka, envProjections, []string{"FEED_VERIFY_EVERY", "FEED_SLOT"}),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := c.config()
			if err != nil {
				return err
			}
			var names []string
			for _, n := range only {
				if n = strings.TrimSpace(n); n != "" {
					if !slices.Contains(projections.Names(), n) {
						return flagUsage("only", "unknown projector %q (want some of %s)", n, strings.Join(projections.Names(), ","))
					}
					names = append(names, n)
				}
			}
			return runProject(cmd.Context(), cfg, log, names, metricsAddr)
		},
	}
	cmd.Flags().StringSliceVar(&only, "only", nil, "comma-separated projectors to run (default: all of "+strings.Join(projections.Names(), ",")+")")
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "", "the admin listener's address (/metrics, /healthz, /status, pprof), over FEED_ADMIN_ADDR")
	return cmd
}

// runProject is `feed project`: PostgreSQL (migrated) and Redis, the
// projectors names (nil: all), and their metrics on metricsAddr ("": none).
func runProject(ctx context.Context, cfg Config, log *slog.Logger, names []string, metricsAddr string) error {
	pool, rdb, closeStores, err := openStores(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeStores()
	if cfg, err = resolvePolicy(ctx, cfg, pool, log); err != nil {
		return err
	}
	if err := checkKafka(ctx, cfg); err != nil {
		return err
	}
	reg := newRoleRegistry()
	svcs, err := projectServices(ctx, cfg, pool, rdb, names, reg, log)
	if err != nil {
		return err
	}
	return runRole(ctx, log, "project", cmp.Or(metricsAddr, cfg.AdminAddr), reg, statusSource(cfg, pool, rdb), svcs...)
}

// projectServices builds the services of `feed project`, their metrics on reg:
// the projectors names (nil: all) and, with FEED_VERIFY_EVERY, the
// periodic verification. cfg's policy is resolved (resolvePolicy).
func projectServices(ctx context.Context, cfg Config, pool *pgxpool.Pool, rdb redis.UniversalClient, names []string, reg prometheus.Registerer, log *slog.Logger) ([]*service.Service, error) {
	projectors, err := newProjectors(ctx, cfg, pool, rdb, names, reg, log)
	if err != nil {
		return nil, err
	}
	svcs := []*service.Service{projectors}
	if vs, err := verifyService(cfg, pool, rdb, reg, log); err != nil {
		return nil, err
	} else if vs != nil {
		svcs = append(svcs, vs)
	}
	return svcs, nil
}

// newProjectors builds the supervisor of the projectors names (nil: all):
// each runs at its projection's active version, with that version's
// recorded policy, and restarts on the new one when `feed rebuild`
// switches it (docs/rebuild.md). cfg's policy is resolved
// (resolvePolicy). The service is ready once every projector consumes.
func newProjectors(ctx context.Context, cfg Config, pool *pgxpool.Pool, rdb redis.UniversalClient, names []string, reg prometheus.Registerer, log *slog.Logger) (*service.Service, error) {
	m, err := projections.NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("register projection metrics: %w", err)
	}
	if _, err := projections.New(projectionConfig(cfg), pool, rdb, m, names...); err != nil {
		return nil, usageError{err.Error()}
	}
	if len(names) == 0 {
		names = projections.Names()
	}
	poison, err := projections.NewPoisonQueue(connOf(cfg), cfg.Topic, pool)
	if err != nil {
		return nil, err
	}
	s, err := projections.NewSupervisor(projections.SupervisorConfig{
		Projections: projectionConfig(cfg),
		Runner: projections.RunnerConfig{Brokers: brokersOf(cfg), Security: cfg.KafkaSecurity, Topic: cfg.Topic, Logger: log, Metrics: m,
			TracerProvider: tracerProvider},
		Names:  names,
		Poison: poison,
	}, pool, rdb, m)
	if err != nil {
		return nil, fmt.Errorf("build the projectors: %w", err)
	}
	return service.New("projections", func(ctx context.Context) error {
		log.Info("project: running", "projectors", names, "topic", cfg.Topic)
		return s.Run(ctx)
	}, service.ReadyWhen(s.Ready())), nil
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
