package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/feedco/feed/status"
)

func newStatusCommand(c *cli) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status [--output text|json]",
		Short: "CDC slot lag and events published; per projection its version, policy, consumer group and lag, and a running rebuild's progress; poison counts; the last verification; per Redis node its keys",
		Long: longHelp("Prints the CDC replication slot's state and lag (bytes, seconds) and the events published, then per projection\n"+
			"its active version, the policy recorded with it, its consumer group and lag, and the running rebuild's phase\n"+
			"and counts, then the poison queue's records per consumer group (pending, replayed, discarded), then the last\n"+
			"result of `feed verify` and of FEED_VERIFY_EVERY, then per Redis node (every master of a cluster) its keys,\n"+
			"memory and commands processed. A section that fails does not hide the others (exit 1 after printing them).\n"+
			"--output json prints the same as one JSON object (docs/api.md, Status); the API's /status page shows it as HTML.",
			envPostgres, envRedis, envKafka, []string{"FEED_SLOT", "FEED_LAG_WARN_BYTES"}),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return flagUsage("output", "want text or json, got %q", output)
			}
			cfg, log, err := c.config()
			if err != nil {
				return err
			}
			return runStatus(cmd.Context(), cfg, log, output, c.stdout)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

// runStatus is `feed status`: every section gathered at once, then printed
// as text or JSON, each one even when another failed.
func runStatus(ctx context.Context, cfg Config, log *slog.Logger, output string, stdout io.Writer) error {
	a, err := openApp(ctx, cfg, log, true, false)
	if err != nil {
		return err
	}
	defer a.Close()
	sc, done := a.statusConfig(ctx)
	defer done()
	r := status.Gather(ctx, sc)
	if output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		r.WriteText(stdout)
	}
	if failed := r.Failed(); len(failed) > 0 {
		return fmt.Errorf("status incomplete: %v", failed)
	}
	return nil
}

// statusConfig is where the App's status is read from: its PostgreSQL, its
// Redis (or a small client of its own, which done closes; a Redis that
// cannot be reached fails the sections that need it), the broker and
// topic, the slot.
func (a *App) statusConfig(ctx context.Context) (status.Config, func()) {
	sc := status.Config{Pool: a.Pool, Kafka: connOf(a.Cfg), Topic: a.Cfg.Topic, Slot: a.Cfg.Slot, LagWarnBytes: a.Cfg.LagWarnBytes}
	rdb, done, err := a.statusRedis(ctx)
	if err != nil {
		sc.RedisErr = err
		return sc, func() {}
	}
	sc.Redis = rdb
	return sc, done
}
