package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/feedco/feed/cdc"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/internal/progress"
)

// reseedOptions are `feed cdc reseed`'s flags.
type reseedOptions struct {
	from  string
	topic string
}

func newReseedCommand(c *cli) *cobra.Command {
	var o reseedOptions
	cmd := &cobra.Command{
		Use:   "reseed --from POSITION|TIME [--topic T]",
		Short: "Republish the event log from a position or time to Kafka (a new topic, a lost cluster)",
		Long: longHelp("Republishes every event of the log from --from on, in commit order and with CDC's visibility guarantee,\n"+
			"to --topic (default FEED_TOPIC), through the lanes CDC publishes with, and waits until Kafka acknowledged them all.\n"+
			"--from is a position (1 for the whole log) or an RFC 3339 time (the first event recorded at or after it).\n"+
			"CDC must be stopped: reseed refuses while a process streams from the slot (FEED_SLOT), and a CDC that\n"+
			"starts meanwhile waits for it. Start CDC (with FEED_TOPIC set to the topic) afterwards: it streams what\n"+
			"committed since its slot's position; events in both are published twice, which the projectors absorb\n"+
			"(docs/cdc.md, Reseed).",
			envPostgres, envKafka, []string{"FEED_PARTITIONS", "FEED_SLOT"}),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			from, err := parseReseedFrom(o.from)
			if err != nil {
				return err
			}
			cfg, log, err := c.config()
			if err != nil {
				return err
			}
			if o.topic != "" {
				cfg.Topic = o.topic
			}
			return runReseed(cmd.Context(), cfg, log, from, c.stderr)
		},
	}
	cmd.Flags().StringVar(&o.from, "from", "", "the first event: a position (1: the whole log) or an RFC 3339 time (required)")
	cmd.Flags().StringVar(&o.topic, "topic", "", "publish to this topic, created when missing (default FEED_TOPIC)")
	return cmd
}

// parseReseedFrom reads --from: a position or an RFC 3339 time. A commit
// LSN is refused with the reason: the event log does not record commit
// LSNs, so none can be mapped to a place in it.
func parseReseedFrom(s string) (cdc.ReseedFrom, error) {
	switch {
	case s == "":
		return cdc.ReseedFrom{}, flagUsage("from", "required: a position (1 for the whole log) or an RFC 3339 time")
	case strings.Contains(s, "/"):
		return cdc.ReseedFrom{}, flagUsage("from", "%q looks like a commit LSN: the event log does not record commit LSNs, so reseed cannot start at one; "+
			"give the position of the first event to republish (`feed events --source kafka --with-lsn` shows each event's position beside its commit LSN) or a time", s)
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 1 {
			return cdc.ReseedFrom{}, flagUsage("from", "position %d: positions start at 1", n)
		}
		return cdc.ReseedFrom{Position: n}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return cdc.ReseedFrom{}, flagUsage("from", "%q is neither a position nor an RFC 3339 time (like 2026-11-30T09:41:12Z)", s)
	}
	return cdc.ReseedFrom{Time: t}, nil
}

// runReseed is `feed cdc reseed`: the topic made sure of, the events
// republished with progress on stderr, and a summary.
func runReseed(ctx context.Context, cfg Config, log *slog.Logger, from cdc.ReseedFrom, stderr io.Writer) error {
	pool, err := openPostgres(ctx, cfg, 8, true)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := readyTopics(ctx, cfg); err != nil {
		return err
	}
	pub, err := kafka.NewPublisher(connOf(cfg), kafka.Logger(log))
	if err != nil {
		return fmt.Errorf("connect to Kafka: %w", err)
	}
	defer pub.Close()
	fmt.Fprintf(stderr, "reseed: republishing the event log from %s to topic %s\n", from, cfg.Topic)
	bar := progress.New(stderr, isTerminal(stderr))
	show := func(p cdc.ReseedProgress) {
		if !bar.Started() {
			bar.Start("reseed", "events acknowledged", p.Total)
		}
		bar.Set(p.Acked)
	}
	res, err := cdc.Reseed(ctx, cdcConfig(cfg, nil, log), pool, from, show, pub)
	if bar.Started() {
		bar.Finish()
	}
	switch {
	case errors.Is(err, cdc.ErrCDCRunning), errors.Is(err, cdc.ErrUnknownPosition):
		return fmt.Errorf("reseed: %w", err)
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "reseed: interrupted; what was published stays in the topic (duplicates are harmless): run it again")
		return err
	case err != nil:
		return scrubDSN(cfg.DatabaseURL, fmt.Errorf("reseed: %w", err))
	}
	rate := float64(res.Events) / max(res.Took.Seconds(), 1e-9)
	fmt.Fprintf(stderr, "reseed: %d events, positions %d to %d (transactions below id %d, commit LSN %s in their envelopes), to topic %s in %v (%.0f/s)\n",
		res.Events, res.FromPosition, res.ToPosition, res.Below, res.CommitLSN, res.Topic, res.Took.Round(time.Millisecond), rate)
	fmt.Fprintln(stderr, "reseed: done; start CDC with FEED_TOPIC="+res.Topic+" to stream what commits from now on")
	return nil
}
