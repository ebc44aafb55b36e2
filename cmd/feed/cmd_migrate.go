package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"
)

func newMigrateCommand(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply the embedded database migrations",
		Long:  longHelp("Applies the embedded, numbered SQL migrations under an advisory lock; the other roles refuse an outdated schema.", envPostgres),
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := c.config()
			if err != nil {
				return err
			}
			return runMigrate(cmd.Context(), cfg, log, c.stdout)
		},
	}
}

// runMigrate is `feed migrate`.
func runMigrate(ctx context.Context, cfg Config, log *slog.Logger, stdout io.Writer) error {
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
	return nil
}
