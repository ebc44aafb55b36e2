package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/feedco/feed/internal/service"
	"github.com/feedco/feed/verify"
)

// verifyOptions are `feed verify`'s flags.
type verifyOptions struct {
	users  int
	user   int64
	depth  int
	settle time.Duration
}

func newVerifyCommand(c *cli) *cobra.Command {
	var o verifyOptions
	cmd := &cobra.Command{
		Use:   "verify [--users N | --user ID]",
		Short: "Compare sampled users' feeds, read through the query side, with the truth from PostgreSQL",
		Long: longHelp("The convergence oracle against the live system (docs/rebuild.md, \"Verifying a live system\"): samples active users,\n"+
			"waits until CDC and every consumer group have consumed what was committed before it started, reads each user's\n"+
			"newest --depth posts through a read-only query side and compares them with PostgreSQL; a difference is re-checked\n"+
			"after a second such barrier and printed with what the read models hold. Exits 0 with no difference, 1 with any\n"+
			"(or when it could not verify), 2 on a bad invocation.",
			envPostgres, envRedis, envKafka, envProjections, []string{"FEED_SLOT"}),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("users") && cmd.Flags().Changed("user") {
				return usageError{"--users and --user: give one"}
			}
			if o.users < 1 {
				return flagUsage("users", "want at least 1, got %d", o.users)
			}
			if cmd.Flags().Changed("user") && o.user < 1 {
				return flagUsage("user", "want a positive id, got %d", o.user)
			}
			if o.depth < 1 || o.depth > 10_000 {
				return flagUsage("depth", "want 1..10000, got %d", o.depth)
			}
			if o.settle <= 0 {
				return flagUsage("settle-timeout", "must be positive")
			}
			cfg, log, err := c.config()
			if err != nil {
				return err
			}
			return runVerify(cmd.Context(), cfg, log, o, c.stdout)
		},
	}
	cmd.Flags().IntVar(&o.users, "users", 20, "how many active users to sample")
	cmd.Flags().Int64Var(&o.user, "user", 0, "verify this user alone")
	cmd.Flags().IntVar(&o.depth, "depth", 50, "how many of each user's newest feed posts to compare")
	cmd.Flags().DurationVar(&o.settle, "settle-timeout", time.Minute, "how long to wait for the pipeline to consume what was committed before each barrier")
	return cmd
}

// verifyConfig is verify's configuration for the process's system, at the
// active versions (read at each run) and cfg's resolved policy.
func verifyConfig(cfg Config, log *slog.Logger) verify.Config {
	return verify.Config{Policy: cfg.Policy, Slot: cfg.Slot, Kafka: connOf(cfg), Topic: cfg.Topic, Logger: log}
}

// runVerify is `feed verify`: the report on stdout; differences are a
// failure (exit 1).
func runVerify(ctx context.Context, cfg Config, log *slog.Logger, o verifyOptions, stdout io.Writer) error {
	a, cfg, err := openResolvedApp(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()
	vc := verifyConfig(cfg, log)
	vc.Users, vc.User, vc.Depth, vc.SettleTimeout = o.users, o.user, o.depth, o.settle
	start := time.Now()
	rep, err := verify.Run(ctx, vc, a.Pool, a.Redis)
	if ctx.Err() == nil {
		// The last result, for `feed status` and the status page.
		if serr := verify.SaveResult(ctx, a.Pool, verify.NewResult(verify.SourceCommand, rep, err, time.Now(), time.Since(start))); serr != nil {
			log.Warn("verify: could not record the result for `feed status`", "err", serr)
		}
	}
	if err != nil {
		return err
	}
	rep.Write(stdout)
	if !rep.OK() {
		return fmt.Errorf("%d differences from the truth", len(rep.Differences))
	}
	return nil
}

// verifyService runs verify every cfg.VerifyEvery inside a long-running
// role (`feed project`, `feed dev`), with the feed_verify_* metrics on
// reg; it is nil when FEED_VERIFY_EVERY is unset.
func verifyService(cfg Config, pool *pgxpool.Pool, rdb redis.UniversalClient, reg prometheus.Registerer, log *slog.Logger) (*service.Service, error) {
	if cfg.VerifyEvery <= 0 {
		return nil, nil
	}
	m, err := verify.NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("register verify metrics: %w", err)
	}
	vc := verifyConfig(cfg, log)
	return service.New("verify", func(ctx context.Context) error {
		log.Info("verify: running periodically", "every", cfg.VerifyEvery)
		return verify.Every(ctx, cfg.VerifyEvery, vc, pool, rdb, m, log)
	}), nil
}
