package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	wk "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/feedco/feed/cdc"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/internal/service"
)

func newCDCCommand(c *cli) *cobra.Command {
	var metricsAddr string
	cmd := &cobra.Command{
		Use:   "cdc",
		Short: "Stream the event log to Kafka; `feed cdc drop-slot` drops the replication slot",
		Long: longHelp("Streams the event log to Kafka over a logical replication slot (created on first start).\n"+
			"When CDC is decommissioned, `feed cdc drop-slot` drops the slot so that PostgreSQL stops keeping WAL for it.",
			envPostgres, envKafka, envCDC, []string{"GOGC"}),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := c.config()
			if err != nil {
				return err
			}
			return runCDC(cmd.Context(), cfg, log, metricsAddr)
		},
	}
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "", "the admin listener's address (/metrics, /healthz, /status, pprof), over FEED_ADMIN_ADDR")
	cmd.AddCommand(newDropSlotCommand(c), newReseedCommand(c))
	return cmd
}

// runCDC is `feed cdc`: PostgreSQL (migrated), the topics, the CDC
// stream, and its metrics on metricsAddr ("" serves none).
func runCDC(ctx context.Context, cfg Config, log *slog.Logger, metricsAddr string) error {
	if os.Getenv("GOGC") == "" {
		// CDC allocates a few short-lived objects per event (the watermill
		// message, sarama's record); collecting less often cuts its CPU per
		// event by about a quarter (docs/benchmarks.md), for a heap of a
		// few hundred MiB at most. Only for the role alone, not `feed dev`.
		debug.SetGCPercent(400)
	}
	pool, err := openPostgres(ctx, cfg, 64, true)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := readyTopics(ctx, cfg); err != nil {
		return err
	}
	reg := newRoleRegistry()
	return runRole(ctx, log, "cdc", cmp.Or(metricsAddr, cfg.AdminAddr), reg, statusSource(cfg, pool, nil), cdcService(cfg, pool, reg, log))
}

// cdcConfig is CDC's configuration from the process's.
func cdcConfig(cfg Config, reg prometheus.Registerer, log *slog.Logger) cdc.Config {
	return cdc.Config{
		DatabaseURL:  cfg.DatabaseURL,
		Slot:         cfg.Slot,
		Topic:        cfg.Topic,
		LagWarnBytes: cfg.LagWarnBytes,
		OnSlotLoss:   cdc.SlotLossMode(cfg.OnSlotLoss), // "heal" (default) or "stop": docs/cdc.md, Slot loss
		Registerer:   reg,
		Logger:       log,
		// Nil unless OTEL_* turns tracing on (tracing.go).
		TracerProvider: tracerProvider,
	}
}

// cdcService streams the event log to the topic (streamCDC); it is ready
// once the replication session streams.
func cdcService(cfg Config, pool *pgxpool.Pool, reg prometheus.Registerer, log *slog.Logger) *service.Service {
	streaming := make(chan struct{})
	return service.New("cdc", func(ctx context.Context) error {
		return streamCDC(ctx, cfg, pool, reg, log, func() { close(streaming) })
	}, service.ReadyWhen(streaming))
}

// streamCDC streams the event log to the topic until ctx ends, calling
// onStreaming once the replication session streams. It waits for the
// broker when it is not up yet, as the replication side waits for
// PostgreSQL.
func streamCDC(ctx context.Context, cfg Config, pool *pgxpool.Pool, reg prometheus.Registerer, log *slog.Logger, onStreaming func()) error {
	brokers := connOf(cfg)
	var pub *wk.Publisher
	for backoff := 200 * time.Millisecond; ; backoff = min(backoff*2, 15*time.Second) {
		var err error
		if pub, err = kafka.NewPublisher(brokers, kafka.Logger(log)); err == nil {
			break
		}
		log.Warn("cdc: Kafka is not reachable yet, retrying", "brokers", brokers, "backoff", backoff, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
	defer pub.Close()
	cc := cdcConfig(cfg, reg, log)
	cc.OnStreaming = onStreaming
	c, err := cdc.New(cc, pool, pub)
	if err != nil {
		return usageError{dsnReason(cfg.DatabaseURL, err)}
	}
	log.Info("cdc: streaming", "slot", cfg.Slot, "topic", cfg.Topic, "brokers", brokers)
	return scrubDSN(cfg.DatabaseURL, c.Run(ctx))
}

func newDropSlotCommand(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "drop-slot",
		Short: "Drop CDC's replication slot and its progress (when decommissioning CDC)",
		Long: longHelp("Drops the replication slot (FEED_SLOT, or derived from DATABASE_URL's database) and its progress row:\n"+
			"PostgreSQL no longer keeps WAL for it. A later `feed cdc` creates a new slot at the WAL position of that moment.",
			envPostgres, []string{"FEED_SLOT"}),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, _, err := c.config()
			if err != nil {
				return err
			}
			return runDropSlot(cmd.Context(), cfg, c.stdout)
		},
	}
}

// runDropSlot is `feed cdc drop-slot`.
func runDropSlot(ctx context.Context, cfg Config, stdout io.Writer) error {
	pool, err := openPostgres(ctx, cfg, 2, true)
	if err != nil {
		return err
	}
	defer pool.Close()
	err = cdc.DropSlot(ctx, pool, cfg.Slot)
	switch {
	case errors.Is(err, cdc.ErrNoSlot):
		fmt.Fprintf(stdout, "cdc: no replication slot %s; nothing dropped\n", cfg.Slot)
		return nil
	case err != nil:
		return fmt.Errorf("drop slot %s: %w", cfg.Slot, err)
	}
	fmt.Fprintf(stdout, "cdc: dropped replication slot %s and its progress row; PostgreSQL no longer keeps WAL for it.\n"+
		"A later `feed cdc` creates a new slot that starts at the WAL position of that moment: events committed in between are not streamed.\n", cfg.Slot)
	return nil
}

// readyTopics checks that the brokers answer (a clear error, not a retry
// loop) and creates the event topics that are missing, as CDC and reseed
// need them before they publish.
func readyTopics(ctx context.Context, cfg Config) error {
	if err := checkKafka(ctx, cfg); err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := kafka.EnsureTopics(tctx, connOf(cfg), topicsOf(cfg)); err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	return nil
}
