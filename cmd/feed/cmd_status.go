package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/feedco/feed/cdc"
)

func newStatusCommand(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "CDC slot lag and events published; per projection its version, consumer group and lag; poison counts; per Redis node its keys",
		Long: longHelp("Prints the CDC replication slot's state and lag (bytes, seconds) and the events published, then per projection\n"+
			"its active version, consumer group and lag, and whether a rebuild is running, then the poison queue's\n"+
			"records per consumer group (pending, replayed, discarded), then per Redis node (every master\n"+
			"of a cluster) its keys, memory and commands processed. A section that fails does not hide the others.",
			envPostgres, envRedis, envKafka, []string{"FEED_SLOT", "FEED_LAG_WARN_BYTES"}),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := c.config()
			if err != nil {
				return err
			}
			return runStatus(cmd.Context(), cfg, log, c.stdout)
		},
	}
}

// runStatus is `feed status`: its sections in order, each printed even
// when another failed.
func runStatus(ctx context.Context, cfg Config, log *slog.Logger, stdout io.Writer) error {
	a, err := openApp(ctx, cfg, log, true, false)
	if err != nil {
		return err
	}
	defer a.Close()
	sections := []struct {
		name  string
		print func(ctx context.Context, a *App, w io.Writer) error
	}{
		{"cdc", printCDCStatus},
		{"projections", printProjectionStatus},
		{"poison", printPoisonStatus},
		{"redis", printRedisStatus},
	}
	var failed []string
	for i, s := range sections {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		if err := s.print(ctx, a, stdout); err != nil {
			fmt.Fprintf(stdout, "%s: unavailable: %v\n", s.name, err)
			failed = append(failed, s.name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("status incomplete: %v", failed)
	}
	return nil
}

// printCDCStatus shows the replication slot's lag in bytes and seconds and
// the events CDC published.
func printCDCStatus(ctx context.Context, a *App, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := cdc.Status(ctx, a.Pool, a.Cfg.Slot)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "cdc (slot %s, topic %s):\n", st.Slot, a.Cfg.Topic)
	fmt.Fprint(w, st.SlotLossLine())
	if !st.Exists {
		fmt.Fprintln(w, "  slot             missing: `feed cdc` creates it (events committed before that are not streamed)")
		return nil
	}
	state := "active (a CDC process is streaming)"
	if !st.Active {
		state = "INACTIVE: no CDC process is streaming; PostgreSQL keeps WAL until one does"
	}
	fmt.Fprintf(w, "  state            %s\n", state)
	fmt.Fprintf(w, "  confirmed LSN    %s (server at %s)\n", st.ConfirmedLSN, st.CurrentLSN)
	warn := ""
	if st.LagBytes > a.Cfg.LagWarnBytes {
		warn = fmt.Sprintf("  <-- over FEED_LAG_WARN_BYTES (%d)", a.Cfg.LagWarnBytes)
	}
	fmt.Fprintf(w, "  lag              %d bytes, %.1f s%s\n", st.LagBytes, st.LagSeconds, warn)
	if st.WALStatus != "" && st.WALStatus != "reserved" {
		fmt.Fprintf(w, "  wal status       %s (see docs/cdc.md)\n", st.WALStatus)
	}
	published := "none recorded yet"
	if !st.UpdatedAt.IsZero() {
		published = fmt.Sprintf("%d (progress saved %s ago)", st.EventsPublished, time.Since(st.UpdatedAt).Round(time.Second))
	}
	fmt.Fprintf(w, "  events published %s\n", published)
	if !st.LastCommitAt.IsZero() {
		fmt.Fprintf(w, "  newest published commit %s\n", st.LastCommitAt.UTC().Format(time.RFC3339))
	}
	return nil
}
