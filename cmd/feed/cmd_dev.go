package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/feedco/feed/cdc"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/internal/service"
)

func newDevCommand(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "dev",
		Short: "Everything in one process: migrations, embedded broker, CDC, projectors, API",
		Long: longHelp("Runs the whole system in one process: applies the migrations, starts the embedded broker when KAFKA_BROKERS\n"+
			"is empty (else creates the topics there), then CDC, every projector and the HTTP API, with one /metrics.\n"+
			"It accepts the built-in development JWT secret when FEED_JWT_SECRET is unset.",
			envPostgres, envRedis, envKafka, []string{"FEED_STATE_DIR"}, envCDC, envProjections, envAPI, []string{"FEED_VERIFY_EVERY"}),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := c.config()
			if err != nil {
				return err
			}
			return runDev(cmd.Context(), cfg, log, c.stdout)
		},
	}
}

// runDev is `feed dev`: the parts of `feed migrate`, `feed kafka`,
// `feed cdc`, `feed project` and `feed api` in one process, sharing the
// connections and one metrics registry (served by the API).
func runDev(ctx context.Context, cfg Config, log *slog.Logger, stdout io.Writer) error {
	pool, err := openPostgres(ctx, cfg, 64, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := migrate(ctx, pool, log); err != nil {
		return err
	}
	if cfg, err = resolvePolicy(ctx, cfg, pool, log); err != nil {
		return err
	}
	rdb, err := openRedis(ctx, cfg, 256)
	if err != nil {
		return err
	}
	defer rdb.Close()

	if len(cfg.KafkaBrokers) > 0 {
		if err := checkKafka(ctx, cfg); err != nil {
			return err
		}
		if err := kafka.EnsureTopics(ctx, connOf(cfg), topicsOf(cfg)); err != nil {
			return fmt.Errorf("create topics: %w", err)
		}
	} else {
		broker, err := startEmbedded(ctx, cfg, kafkaOptions{brokers: 1})
		if err != nil {
			return err
		}
		defer broker.Close()
		cfg.KafkaBrokers = broker.Addrs()
	}

	reg := newRoleRegistry()
	// The slot exists before the API takes its first write: an event
	// committed before it would never be streamed.
	if err := cdc.PrepareFirstStart(ctx, cdcConfig(cfg, reg, log), pool); err != nil {
		return scrubDSN(cfg.DatabaseURL, fmt.Errorf("prepare the replication slot: %w", err))
	}
	projectors, err := newProjectors(ctx, cfg, pool, rdb, nil, reg, log)
	if err != nil {
		return err
	}
	a, err := newAPI(ctx, cfg, apiParts{Pool: pool, Redis: rdb, Registry: reg, Log: log, Stdout: stdout, AllowDevSecret: true})
	if err != nil {
		return err
	}
	vs, err := verifyService(cfg, pool, rdb, reg, log)
	if err != nil {
		return err
	}

	// Started in this order, each once the one before is ready: the
	// pipeline streams and consumes before the API takes its first
	// request (the query side's background work starts just before the
	// server); stopped in the reverse order, the API first. The embedded
	// broker (deferred above) stops after all of them.
	svcs := []*service.Service{cdcService(cfg, pool, reg, log), projectors}
	if vs != nil {
		svcs = append(svcs, vs)
	}
	if svcs, err = withAdmin(cfg, a, stdout, append(svcs, a.services()...)...); err != nil {
		return err
	}
	log.Info("dev: starting", "http", "http://"+a.addr, "kafka", cfg.KafkaBrokers, "state", cfg.StateDir)
	return service.Run(ctx, log, "dev", svcs...)
}
