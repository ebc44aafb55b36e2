package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/feedco/feed/replay"
)

func newEventsCommand(c *cli) *cobra.Command {
	var f eventsFlags
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Replay the event stream to stdout as JSON lines or CSV",
		Long: longHelp("Streams events to stdout, oldest first, from the PostgreSQL event log or the Kafka topic (docs/replay.md).\n"+
			"A range bound (--from, --to) is a position (123), a commit LSN (16/B374D848, kafka only) or an RFC 3339 timestamp.",
			envPostgres, envKafka),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := parseEventsFlags(f)
			if err != nil {
				return err
			}
			cfg, _, err := c.config()
			if err != nil {
				return err
			}
			// A closed pipe (feed events | head) must end the replay quietly:
			// with SIGPIPE ignored, writes fail with EPIPE, which eventsTo
			// treats as done.
			signal.Ignore(syscall.SIGPIPE)
			return eventsTo(cmd.Context(), o, cfg, c.stdout, c.stderr, isTerminal(c.stderr))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.source, "source", "pg", "pg: the PostgreSQL event log; kafka: the topic FEED_TOPIC")
	fs.StringVar(&f.format, "format", "jsonl", "jsonl: one JSON envelope per line; csv: CSV with a header")
	fs.StringVar(&f.from, "from", "", "first event: a position, a commit LSN (kafka only) or an RFC 3339 timestamp (recorded_at)")
	fs.StringVar(&f.to, "to", "", "last event, like --from (inclusive)")
	fs.StringVar(&f.types, "type", "", "comma-separated event types, e.g. post.created.v1,post.deleted.v1")
	fs.StringVar(&f.stream, "stream", "", "one stream, e.g. post-123")
	fs.StringVar(&f.author, "author", "", "events about account ID: its posts, follows of it, its registration")
	fs.StringVar(&f.limit, "limit", "", "stop after N events")
	fs.BoolVar(&f.follow, "follow", false, "keep streaming new events until interrupted (not with --to)")
	fs.BoolVar(&f.withLSN, "with-lsn", false, "add commitLsn (kafka only; the event log does not record it)")
	return cmd
}

// eventsFlags are `feed events`'s flags as given.
type eventsFlags struct {
	source, format, from, to, types, stream, author, limit string
	follow, withLSN                                        bool
}

// eventsOptions is a parsed `feed events` command line.
type eventsOptions struct {
	source  string
	format  replay.Format
	filter  replay.Filter
	limit   int64
	follow  bool
	withLSN bool
}

// parseEventsFlags checks the flags; a bad one is a usage error.
func parseEventsFlags(f eventsFlags) (eventsOptions, error) {
	o := eventsOptions{follow: f.follow, withLSN: f.withLSN}
	source, format, from, to, types, stream, author, limit := &f.source, &f.format, &f.from, &f.to, &f.types, &f.stream, &f.author, &f.limit
	o.source = *source
	if o.source != "pg" && o.source != "kafka" {
		return o, usageError{fmt.Sprintf("--source %q: want pg or kafka", o.source)}
	}
	var err error
	if o.format, err = replay.ParseFormat(*format); err != nil {
		return o, usageError{err.Error()}
	}
	if o.filter.From, err = replay.ParseBound(*from); err != nil {
		return o, usageError{"--from: " + err.Error()}
	}
	if o.filter.To, err = replay.ParseBound(*to); err != nil {
		return o, usageError{"--to: " + err.Error()}
	}
	if *types != "" {
		for _, t := range strings.Split(*types, ",") {
			o.filter.Types = append(o.filter.Types, strings.TrimSpace(t))
		}
	}
	o.filter.Stream = *stream
	if *author != "" {
		if o.filter.Author, err = strconv.ParseInt(*author, 10, 64); err != nil || o.filter.Author <= 0 {
			return o, usageError{fmt.Sprintf("--author %q: want a positive account id", *author)}
		}
	}
	if *limit != "" {
		if o.limit, err = strconv.ParseInt(*limit, 10, 64); err != nil || o.limit <= 0 {
			return o, usageError{fmt.Sprintf("--limit %q: want a positive integer", *limit)}
		}
	}
	if err := o.filter.Validate(); err != nil {
		return o, usageError{err.Error()}
	}
	if o.withLSN && o.source == "pg" {
		return o, usageError{"--with-lsn: the PostgreSQL event log does not record commit LSNs; use --source kafka"}
	}
	return o, nil
}

// eventsTo runs `feed events` with its output and progress going to the
// given writers.
func eventsTo(ctx context.Context, o eventsOptions, cfg Config, stdout, stderr io.Writer, tty bool) error {
	var src replay.Source
	var err error
	switch o.source {
	case "pg":
		if o.filter.From.Kind == replay.BoundLSN || o.filter.To.Kind == replay.BoundLSN {
			return usageError{"a commit LSN range needs --source kafka: the PostgreSQL event log does not record commit LSNs (use a position or a timestamp)"}
		}
		pool, err := openPostgres(ctx, cfg, 2, true)
		if err != nil {
			return err
		}
		defer pool.Close()
		if src, err = replay.NewPG(pool, replay.PGConfig{Filter: o.filter, Follow: o.follow}); err != nil {
			return asUsage(err)
		}
	case "kafka":
		// brokersOf: KAFKA_BROKERS, or the development broker of `feed dev` / `feed kafka`.
		if err := checkKafka(ctx, cfg); err != nil {
			return err
		}
		if src, err = replay.NewKafka(replay.KafkaConfig{Brokers: brokersOf(cfg), Security: cfg.KafkaSecurity, Topic: cfg.Topic, Filter: o.filter, Follow: o.follow}); err != nil {
			return asUsage(err)
		}
	}

	w := replay.NewWriter(stdout, o.format, o.withLSN)
	start := time.Now()
	stopProgress := func() {}
	if tty {
		stopProgress = progress(stderr, w, start)
	}
	n, err := replay.Copy(ctx, src, w, o.limit)
	stopProgress()
	el := time.Since(start)
	fmt.Fprintf(stderr, "events: %d events in %s (%s/s)\n", n, el.Round(time.Millisecond), rate(n, el))
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return nil
	case errors.Is(err, syscall.EPIPE):
		return nil // the reader went away (| head): not an error
	case errors.Is(err, replay.ErrInvalid):
		return asUsage(err)
	}
	return err
}

func asUsage(err error) error {
	if errors.Is(err, replay.ErrInvalid) {
		return usageError{err.Error()}
	}
	return err
}

// progress prints the running count on a terminal once a second.
func progress(stderr io.Writer, w *replay.Writer, start time.Time) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(stderr, "\r\033[K")
				return
			case <-t.C:
				n := w.Count()
				fmt.Fprintf(stderr, "\revents: %d (%s/s)\033[K", n, rate(n, time.Since(start)))
			}
		}
	}()
	return func() { close(done); <-finished }
}

// rate formats events per second compactly: 950, 12.3k, 1.2M.
func rate(n int64, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	r := float64(n) / d.Seconds()
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.2fM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk", r/1e3)
	}
	return fmt.Sprintf("%.0f", r)
}

// isTerminal says whether w is a terminal (for progress bars).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
