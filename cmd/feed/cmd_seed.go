package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/feedco/feed/cdc"
	"github.com/feedco/feed/seed"
)

func init() {
	register("seed", "load a deterministic social graph through the event log: feed seed [--users 50000] [--seed 1] ...", runSeed)
}

func runSeed(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("seed", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	users := fs.Int("users", 50_000, "accounts to create")
	seedN := fs.Uint64("seed", 1, "dataset seed: the same seed and sizes give the same dataset")
	avg := fs.Float64("avg-follows", 300, "mean follower count")
	posts := fs.Int("posts", 0, "posts to create (default 10 per user)")
	celebs := fs.Int("celebrities", 10, "accounts with 2x-5x FEED_CELEBRITY_THRESHOLD followers (capped at users-1)")
	days := fs.Float64("days", 7, "posts are spread over this many days before --end")
	end := fs.String("end", "", "RFC 3339 time the posts end at (default now, truncated to the hour); part of the dataset")
	batchN := fs.Int("batch", 20_000, "events per transaction")
	force := fs.Bool("force", false, "seed a non-empty database: new users get ids after the highest existing one")
	noSlot := fs.Bool("no-slot-check", false, "seed even when the CDC replication slot does not exist (those events are then never streamed)")
	dry := fs.Bool("dry-run", false, "generate and print the dataset's summary and digest; write nothing")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{"seed takes flags only"}
	}
	cfg, err := LoadConfig()
	if err != nil {
		return usageError{err.Error()}
	}
	endAt := time.Now().UTC().Truncate(time.Hour)
	if *end != "" {
		if endAt, err = time.Parse(time.RFC3339, *end); err != nil {
			return usageError{"--end: " + err.Error()}
		}
	}
	p := seed.Params{Users: *users, Seed: *seedN, AvgFollows: *avg, Posts: *posts, Celebrities: *celebs,
		Threshold: cfg.CelebrityThreshold, Days: *days, End: endAt.UTC()}
	if *avg == 0 {
		p.AvgFollows = 1e-9 // zero would mean "default"
	}
	if err := p.WithDefaults().Validate(); err != nil {
		return usageError{err.Error()}
	}
	var a *App
	if !*dry {
		if a, err = newApp(ctx, true, false); err != nil {
			return err
		}
		defer a.Close()
		off, nonEmpty, err := seed.IDOffset(ctx, a.Pool)
		if err != nil {
			return err
		}
		if nonEmpty && !*force {
			return fmt.Errorf("%w: it has users or events already. A seed is a dataset defined on an empty log "+
				"(user ids 1..N, follower counts from zero); seeding on top would mix two graphs and change its ids. "+
				"Use a fresh database (DATABASE_URL), or --force to add the generated users after id %d", seed.ErrNotEmpty, off)
		}
		p.IDOffset = off
		st, err := cdc.Status(ctx, a.Pool, cfg.Slot)
		if err != nil {
			return err
		}
		if !st.Exists && !*noSlot {
			return fmt.Errorf("replication slot %s does not exist: events committed before it exists are never streamed "+
				"to Kafka, so the projections would not see the seed. Start `feed dev` (or `feed cdc`) first, or pass --no-slot-check", cfg.Slot)
		}
	}
	t0 := time.Now()
	fmt.Fprintf(os.Stderr, "seed: generating %d users, avg %.0f follows, seed %d, posts until %s\n",
		p.Users, p.AvgFollows, p.Seed, p.End.Format(time.RFC3339))
	d, err := seed.Generate(p)
	if err != nil {
		return err
	}
	st := d.Stats()
	fmt.Printf("dataset %s (generated in %s)\n", d.Digest()[:16], time.Since(t0).Round(time.Millisecond))
	fmt.Printf("  users %d (ids %d..%d), follows %d, posts %d over %.1f days until %s\n",
		st.Users, p.IDOffset+1, p.IDOffset+int64(p.Users), st.Follows, st.Posts, p.WithDefaults().Days, p.End.Format(time.RFC3339))
	fmt.Printf("  followers: mean %.1f, p50 %d, p90 %d, p99 %d, max %d; %d accounts at or over the threshold %d\n",
		st.MeanFollowers, st.P50, st.P90, st.P99, st.MaxFollowers, st.OverThreshold, p.Threshold)
	fmt.Printf("  following: mean %d, min %d, max %d\n", st.MeanFollowing, st.MinFollowing, st.MaxFollowing)
	if *dry {
		return nil
	}
	sum, err := seed.Write(ctx, a.Pool, d, seed.WriteConfig{BatchEvents: *batchN, Progress: os.Stderr})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "seed: interrupted; the committed transactions stay (the database is now non-empty)")
		}
		return err
	}
	fmt.Printf("wrote %d events in %d transactions in %s (%.0f events/s)\n",
		sum.Events, sum.Transactions, sum.Elapsed.Round(time.Second), float64(sum.Events)/sum.Elapsed.Seconds())
	// A bulk load leaves the visibility map unset until autovacuum gets to
	// it (never, where autovacuum is off): until then the follower and
	// post queries fetch every row from the heap instead of answering
	// from their indexes, and the planner has no statistics.
	t1 := time.Now()
	fmt.Fprintln(os.Stderr, "seed: VACUUM (ANALYZE) of users, follows, posts and events")
	if _, err := a.Pool.Exec(ctx, "VACUUM (ANALYZE) users, follows, posts, events"); err != nil {
		return fmt.Errorf("vacuum after the seed (the data is written): %w", err)
	}
	fmt.Printf("vacuumed and analyzed in %s\n", time.Since(t1).Round(time.Millisecond))
	return nil
}
