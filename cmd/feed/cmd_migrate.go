package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/feedco/feed/cdc"
)

func newMigrateCommand(c *cli) *cobra.Command {
	var skipSlot bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the embedded database migrations and create CDC's replication slot",
		Long: longHelp("Applies the embedded, numbered SQL migrations under an advisory lock; the other roles refuse an outdated schema.\n"+
			"Then, on CDC's first start only (no slot, no progress row), creates the replication slot, so that every write\n"+
			"from then on is streamed even if an API takes writes before `feed cdc` first runs (this needs a role with\n"+
			"REPLICATION; --skip-slot leaves it to `feed cdc`, which must then start before any writer).",
			append(append([]string{}, envPostgres...), "FEED_SLOT")),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := c.config()
			if err != nil {
				return err
			}
			return runMigrate(cmd.Context(), cfg, log, c.stdout, !skipSlot)
		},
	}
	cmd.Flags().BoolVar(&skipSlot, "skip-slot", false, "do not create the replication slot")
	return cmd
}

// runMigrate is `feed migrate`: the migrations, then (withSlot) CDC's
// slot on its first start (cdc.PrepareFirstStart).
func runMigrate(ctx context.Context, cfg Config, log *slog.Logger, stdout io.Writer, withSlot bool) error {
	pool, err := openPostgres(ctx, cfg, 2, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	applied, err := migrate(ctx, pool, log)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintln(stdout, "migrate: schema is up to date")
	}
	for _, v := range applied {
		fmt.Fprintf(stdout, "migrate: applied %03d\n", v)
	}
	if !withSlot {
		return nil
	}
	if err := cdc.PrepareFirstStart(ctx, cdcConfig(cfg, nil, log), pool); err != nil {
		return scrubDSN(cfg.DatabaseURL, fmt.Errorf("prepare the replication slot %s (--skip-slot to leave it to feed cdc): %w", cfg.Slot, err))
	}
	fmt.Fprintf(stdout, "migrate: replication slot %s ready: every write from now on is streamed\n", cfg.Slot)
	return nil
}
