package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/feedco/feed/cdc"
)

// statusSection prints one part of `feed status`. Each area registers its
// own with registerStatusSection; a failing section does not hide the others.
type statusSection struct {
	name  string
	print func(ctx context.Context, a *App, w io.Writer) error
}

var statusSections []statusSection

// registerStatusSection adds a section to `feed status`, printed in
// registration order.
func registerStatusSection(name string, print func(ctx context.Context, a *App, w io.Writer) error) {
	statusSections = append(statusSections, statusSection{name: name, print: print})
}

func init() {
	register("status", "CDC slot lag and events published, consumer lag per projector", runStatus)
	// Registered here, in this order; other areas may append theirs.
	registerStatusSection("cdc", printCDCStatus)
	registerStatusSection("projections", func(ctx context.Context, a *App, w io.Writer) error {
		return printProjectionStatus(ctx, a, w)
	})
}

func runStatus(ctx context.Context, args []string) error {
	if len(args) > 0 {
		return usageError{"status takes no arguments"}
	}
	a, err := newApp(ctx, true, false)
	if err != nil {
		return err
	}
	defer a.Close()
	var failed []string
	for i, s := range statusSections {
		if i > 0 {
			fmt.Println()
		}
		if err := s.print(ctx, a, os.Stdout); err != nil {
			fmt.Printf("%s: unavailable: %v\n", s.name, err)
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
