package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/feedco/feed/cdc"
	"github.com/feedco/feed/internal/progress"
	"github.com/feedco/feed/seed"
)

// seedOptions are `feed seed`'s flags.
type seedOptions struct {
	users, posts, celebrities, batch int
	seed                             uint64
	avgFollows, days                 float64
	end                              string
	force, noSlotCheck, dryRun       bool
}

func newSeedCommand(c *cli) *cobra.Command {
	var o seedOptions
	cmd := &cobra.Command{
		Use:   "seed",
		Short: "Load a deterministic, heavy-tailed social graph through the event log",
		Long: longHelp("Generates a deterministic social graph (the same seed and sizes give the same dataset) and appends it as events,\n"+
			"then vacuums and analyzes the tables (docs/bench.md). It applies the migrations first, as `feed migrate` does.\n"+
			"Start `feed dev` or `feed cdc` first (or run `feed migrate`, which creates it): the replication slot must exist.",
			envPostgres, []string{"FEED_SLOT", "FEED_CELEBRITY_THRESHOLD"}),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := c.config()
			if err != nil {
				return err
			}
			return runSeed(cmd.Context(), cfg, log, o, c.stdout, c.stderr)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.users, "users", 50_000, "accounts to create")
	f.Uint64Var(&o.seed, "seed", 1, "dataset seed: the same seed and sizes give the same dataset")
	f.Float64Var(&o.avgFollows, "avg-follows", 300, "mean follower count")
	f.IntVar(&o.posts, "posts", 0, "posts to create (default 10 per user)")
	f.IntVar(&o.celebrities, "celebrities", 10, "accounts with 2x-5x FEED_CELEBRITY_THRESHOLD followers (capped at users-1)")
	f.Float64Var(&o.days, "days", 7, "posts are spread over this many days before --end")
	f.StringVar(&o.end, "end", "", "RFC 3339 time the posts end at (default now, truncated to the hour); part of the dataset")
	f.IntVar(&o.batch, "batch", 20_000, "events per transaction")
	f.BoolVar(&o.force, "force", false, "seed a non-empty database: new users get ids after the highest existing one")
	f.BoolVar(&o.noSlotCheck, "no-slot-check", false, "seed even when the CDC replication slot does not exist (those events are then never streamed)")
	f.BoolVar(&o.dryRun, "dry-run", false, "generate and print the dataset's summary and digest; write nothing")
	return cmd
}

// runSeed is `feed seed`: the summary on stdout, progress on stderr.
func runSeed(ctx context.Context, cfg Config, log *slog.Logger, o seedOptions, stdout, stderr io.Writer) error {
	var err error
	endAt := time.Now().UTC().Truncate(time.Hour)
	if o.end != "" {
		if endAt, err = time.Parse(time.RFC3339, o.end); err != nil {
			return flagUsage("end", "%v", err)
		}
	}
	p := seed.Params{Users: o.users, Seed: o.seed, AvgFollows: o.avgFollows, Posts: o.posts, Celebrities: o.celebrities,
		Threshold: cfg.CelebrityThreshold, Days: o.days, End: endAt.UTC()}
	if o.avgFollows == 0 {
		p.AvgFollows = 1e-9 // zero would mean "default"
	}
	if err := p.WithDefaults().Validate(); err != nil {
		return usageError{err.Error()}
	}
	var a *App
	if !o.dryRun {
		// The schema first, as `feed migrate` applies it (idempotent, under
		// its advisory lock): a seed on a fresh database needs no other
		// command before it.
		pool, err := openPostgres(ctx, cfg, 64, false)
		if err != nil {
			return err
		}
		if _, err := migrate(ctx, pool, log); err != nil {
			pool.Close()
			return err
		}
		a = &App{Cfg: cfg, Log: log, Pool: pool}
		defer a.Close()
		off, nonEmpty, err := seed.IDOffset(ctx, a.Pool)
		if err != nil {
			return err
		}
		if nonEmpty && !o.force {
			return fmt.Errorf("%w: it has users or events already. A seed is a dataset defined on an empty log "+
				"(user ids 1..N, follower counts from zero); seeding on top would mix two graphs and change its ids. "+
				"Use a fresh database (DATABASE_URL), or --force to add the generated users after id %d", seed.ErrNotEmpty, off)
		}
		p.IDOffset = off
		st, err := cdc.Status(ctx, a.Pool, cfg.Slot)
		if err != nil {
			return err
		}
		if !st.Exists && !o.noSlotCheck {
			return fmt.Errorf("replication slot %s does not exist: events committed before it exists are never streamed "+
				"to Kafka, so the projections would not see the seed. Start `feed dev` (or `feed cdc`) first, or pass --no-slot-check", cfg.Slot)
		}
	}
	t0 := time.Now()
	fmt.Fprintf(stderr, "seed: generating %d users, avg %.0f follows, seed %d, posts until %s\n",
		p.Users, p.AvgFollows, p.Seed, p.End.Format(time.RFC3339))
	d, err := seed.Generate(p)
	if err != nil {
		return err
	}
	st := d.Stats()
	fmt.Fprintf(stdout, "dataset %s (generated in %s)\n", d.Digest()[:16], time.Since(t0).Round(time.Millisecond))
	fmt.Fprintf(stdout, "  users %d (ids %d..%d), follows %d, posts %d over %.1f days until %s\n",
		st.Users, p.IDOffset+1, p.IDOffset+int64(p.Users), st.Follows, st.Posts, p.WithDefaults().Days, p.End.Format(time.RFC3339))
	fmt.Fprintf(stdout, "  followers: mean %.1f, p50 %d, p90 %d, p99 %d, max %d; %d accounts at or over the threshold %d\n",
		st.MeanFollowers, st.P50, st.P90, st.P99, st.MaxFollowers, st.OverThreshold, p.Threshold)
	fmt.Fprintf(stdout, "  following: mean %d, min %d, max %d\n", st.MeanFollowing, st.MinFollowing, st.MaxFollowing)
	if o.dryRun {
		return nil
	}
	sum, err := seed.Write(ctx, a.Pool, d, seed.WriteConfig{BatchEvents: o.batch, Progress: progress.New(stderr, progress.IsTerminal(stderr))})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(stderr, "seed: interrupted; the committed transactions stay (the database is now non-empty)")
		}
		return err
	}
	fmt.Fprintf(stdout, "wrote %d events in %d transactions in %s (%.0f events/s)\n",
		sum.Events, sum.Transactions, sum.Elapsed.Round(time.Second), float64(sum.Events)/sum.Elapsed.Seconds())
	// A bulk load leaves the visibility map unset until autovacuum gets to
	// it (never, where autovacuum is off): until then the follower and
	// post queries fetch every row from the heap instead of answering
	// from their indexes, and the planner has no statistics.
	t1 := time.Now()
	fmt.Fprintln(stderr, "seed: VACUUM (ANALYZE) of users, follows, posts and events")
	if _, err := a.Pool.Exec(ctx, "VACUUM (ANALYZE) users, follows, posts, events"); err != nil {
		return fmt.Errorf("vacuum after the seed (the data is written): %w", err)
	}
	fmt.Fprintf(stdout, "vacuumed and analyzed in %s\n", time.Since(t1).Round(time.Millisecond))
	return nil
}
