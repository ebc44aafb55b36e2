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

	"github.com/feedco/feed/internal/progress"
	"github.com/feedco/feed/internal/service"
	"github.com/feedco/feed/replay"
)

func newEventsCommand(c *cli) *cobra.Command {
	var f eventsFlags
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Replay the event stream to stdout as JSON lines, CSV or Parquet",
		Long: longHelp("Streams events to stdout, oldest first, from the PostgreSQL event log or the Kafka topic (docs/replay.md).\n"+
			"A range bound (--from, --to) is a position (123), a commit LSN (16/B374D848, kafka only) or an RFC 3339 timestamp.\n"+
			"--checkpoint FILE saves a resume token (every --checkpoint-every and at the end); --resume TOKEN continues exactly\n"+
			"after it, no event missed or repeated (PostgreSQL source).",
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
	fs.StringVar(&f.format, "format", "jsonl", "jsonl: one JSON envelope per line; csv: CSV with a header; parquet: one Parquet file (not with --follow)")
	fs.StringVar(&f.from, "from", "", "first event: a position, a commit LSN (kafka only) or an RFC 3339 timestamp (recorded_at)")
	fs.StringVar(&f.to, "to", "", "last event, like --from (inclusive)")
	fs.StringVar(&f.types, "type", "", "comma-separated event types, e.g. post.created.v1,post.deleted.v1")
	fs.StringVar(&f.stream, "stream", "", "one stream, e.g. post-123")
	fs.StringVar(&f.author, "author", "", "events about account ID: its posts, follows of it, its registration")
	fs.StringVar(&f.limit, "limit", "", "stop after N events")
	fs.BoolVar(&f.follow, "follow", false, "keep streaming new events until interrupted (not with --to)")
	fs.BoolVar(&f.withLSN, "with-lsn", false, "add commitLsn (kafka only; the event log does not record it)")
	fs.StringVar(&f.checkpoint, "checkpoint", "", "save the resume token to this file, replaced atomically (pg source)")
	fs.DurationVar(&f.checkpointEvery, "checkpoint-every", 5*time.Second, "how often --checkpoint saves while running (it also saves at the end)")
	fs.StringVar(&f.resume, "resume", "", "continue after this token (the content of a --checkpoint file; pg source, not with --from)")
	fs.StringVar(&f.partitionBy, "partition-by", "", "write into --output DIR, one Hive-style directory per day and/or type (day, type or day,type)")
	fs.StringVar(&f.output, "output", "", "with --partition-by: the directory to write into (instead of stdout)")
	return cmd
}

// eventsFlags are `feed events`'s flags as given.
type eventsFlags struct {
	source, format, from, to, types, stream, author, limit string
	follow, withLSN                                        bool
	checkpoint, resume                                     string
	checkpointEvery                                        time.Duration
	partitionBy, output                                    string
}

// eventsOptions is a parsed `feed events` command line.
type eventsOptions struct {
	source  string
	format  replay.Format
	filter  replay.Filter
	limit   int64
	follow  bool
	withLSN bool
	// checkpoint is the file resume tokens go to ("": none), every
	// checkpointEvery; resume the token to continue from (nil: none).
	checkpoint      string
	checkpointEvery time.Duration
	resume          *replay.Token
	partitionBy     []replay.PartitionKey
	output          string
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
	if o.format == replay.Parquet && o.follow {
		return o, usageError{"--format parquet: a Parquet file is complete only when closed; not with --follow (use jsonl or csv)"}
	}
	if (f.partitionBy == "") != (f.output == "") {
		return o, usageError{"--partition-by and --output go together: the partitions are directories under --output"}
	}
	if f.partitionBy != "" {
		if o.partitionBy, err = replay.ParsePartitionBy(f.partitionBy); err != nil {
			return o, usageError{err.Error()}
		}
		o.output = f.output
	}
	o.checkpoint, o.checkpointEvery = f.checkpoint, f.checkpointEvery
	if (o.checkpoint != "" || f.resume != "") && o.source != "pg" {
		return o, usageError{"--checkpoint and --resume need --source pg: resume tokens are positions in the event log"}
	}
	if o.checkpointEvery < 0 {
		return o, usageError{"--checkpoint-every must not be negative"}
	}
	if f.resume != "" {
		if o.filter.From.Kind != replay.BoundNone {
			return o, usageError{"--resume continues where the token says: not with --from"}
		}
		tok, err := replay.ParseToken(f.resume)
		if err != nil {
			return o, usageError{"--resume: " + err.Error()}
		}
		o.resume = &tok
	}
	return o, nil
}

// eventsTo runs `feed events` with its output and progress going to the
// given writers.
func eventsTo(ctx context.Context, o eventsOptions, cfg Config, stdout, stderr io.Writer, tty bool) error {
	var src replay.Source
	var pgSrc *replay.PG
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
		if pgSrc, err = replay.NewPG(pool, replay.PGConfig{Filter: o.filter, Follow: o.follow, Resume: o.resume}); err != nil {
			return asUsage(err)
		}
		src = pgSrc
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
	if o.output != "" {
		if w, err = replay.NewPartitionedWriter(o.output, o.format, o.withLSN, o.partitionBy); err != nil {
			return asUsage(err)
		}
	}
	start := time.Now()
	var shown *service.Service
	if tty {
		shown = countShown(progress.New(stderr, true), w)
		_ = shown.Start(ctx)
	}
	var n int64
	if o.checkpoint != "" {
		n, err = replay.CopyCheckpointed(ctx, pgSrc, w, o.limit, replay.Checkpoint{Every: o.checkpointEvery,
			Save: func(t replay.Token) error { return writeFileAtomic(o.checkpoint, []byte(t.String()+"\n")) }})
	} else {
		n, err = replay.Copy(ctx, src, w, o.limit)
	}
	if shown != nil {
		_ = shown.Stop()
	}
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

// writeFileAtomic replaces path with data: a temporary file beside it,
// synced, renamed over it, so a crash leaves the old or the new content.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return nil
}

func asUsage(err error) error {
	if errors.Is(err, replay.ErrInvalid) {
		return usageError{err.Error()}
	}
	return err
}

// countShown shows the count of events written on p (a terminal's bar;
// the total is not known) every second from Start to Stop, which erases
// it: the command prints its own summary line.
func countShown(p *progress.Progress, w *replay.Writer) *service.Service {
	return service.New("progress", func(ctx context.Context) error {
		p.Start("events:", "events", 0)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				p.Clear()
				return nil
			case <-t.C:
				p.Set(w.Count())
			}
		}
	})
}

// rate formats events per second compactly: 950, 12.3k, 1.2M.
func rate(n int64, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return progress.Rate(float64(n) / d.Seconds())
}

// isTerminal says whether w is a terminal (for progress bars).
func isTerminal(w io.Writer) bool { return progress.IsTerminal(w) }
