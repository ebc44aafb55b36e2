package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/rebuild"
)

// rebuildOptions are `feed rebuild`'s flags.
type rebuildOptions struct {
	catchUpLag int64
	handover   time.Duration
	// inboxMax is the new inbox version's bound (0: the active version's);
	// celebrityThreshold the new followers and inbox versions' (0: the
	// active versions').
	inboxMax           int
	celebrityThreshold int64
	// celebrityBand is the new followers and inbox versions' celebrity
	// band when bandSet (--celebrity-band given; else the active
	// versions').
	celebrityBand int64
	bandSet       bool
	// notificationsMax is the new notifications version's bound (0: the
	// active version's).
	notificationsMax int
	// verifyUsers is how many active users are verified on the new
	// version before the switch; force switches despite differences.
	verifyUsers int
	force       bool
}

func newRebuildCommand(c *cli) *cobra.Command {
	var o rebuildOptions
	cmd := &cobra.Command{
		Use:   "rebuild inbox|timelines|followers|posts|all",
		Short: "Rebuild a projection from scratch, blue/green",
		Long: longHelp("Rebuilds a projection's read model at a new version while readers use the active one, catches up from Kafka,\n"+
			"switches the active version in one write and deletes the old keys (docs/rebuild.md).\n"+
			"--inbox-layout and --inbox-max build the new inbox version in another layout or bound: the switch records them,\n"+
			"and the running projectors and readers move to them with the version.\n"+
			"--celebrity-threshold builds new followers and inbox versions at another celebrity threshold and switches both\n"+
			"at once (rebuild inbox, followers or all); the running projectors and readers adopt it with the versions.\n"+
			"--celebrity-band does the same for the celebrity band (an author stops being a celebrity only below threshold - band).\n"+
			"--notifications-max builds the new notifications version with another bound per user (rebuild notifications or all).\n"+
			"Before the switch it verifies --verify-users sampled users on the new version (as `feed verify` does) and refuses\n"+
			"to switch on a difference; --force switches anyway.",
			envPostgres, envRedis, envKafka, envProjections),
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{"want one projection name: inbox, timelines, followers, posts, notifications or all"}
			}
			if _, err := rebuild.Names(args[0]); err != nil {
				return usageError{err.Error()}
			}
			return nil
		},
		ValidArgs: []string{"inbox", "timelines", "followers", "posts", "notifications", "all"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.catchUpLag < 0 {
				return flagUsage("catch-up-lag", "must not be negative")
			}
			if o.inboxMax != 0 && args[0] != "inbox" && args[0] != rebuild.All {
				return usageError{"--inbox-max is the inbox projection's: rebuild inbox (or all)"}
			}
			if o.celebrityThreshold != 0 && args[0] != "inbox" && args[0] != "followers" && args[0] != rebuild.All {
				return usageError{"--celebrity-threshold is the followers and inbox projections': rebuild inbox, followers or all"}
			}
			if o.celebrityThreshold < 0 {
				return flagUsage("celebrity-threshold", "want at least 1, got %d", o.celebrityThreshold)
			}
			o.bandSet = cmd.Flags().Changed("celebrity-band")
			if o.bandSet && args[0] != "inbox" && args[0] != "followers" && args[0] != rebuild.All {
				return usageError{"--celebrity-band is the followers and inbox projections': rebuild inbox, followers or all"}
			}
			if o.celebrityBand < 0 {
				return flagUsage("celebrity-band", "want at least 0, got %d", o.celebrityBand)
			}
			if o.notificationsMax != 0 && args[0] != "notifications" && args[0] != rebuild.All {
				return usageError{"--notifications-max is the notifications projection's: rebuild notifications (or all)"}
			}
			if o.notificationsMax < 0 || o.notificationsMax > readmodel.MaxNotificationsMax {
				return flagUsage("notifications-max", "want 1..%d, got %d", readmodel.MaxNotificationsMax, o.notificationsMax)
			}
			if o.verifyUsers < 1 {
				return flagUsage("verify-users", "want at least 1, got %d", o.verifyUsers)
			}
			if o.inboxMax != 0 && o.inboxMax < 20 {
				return flagUsage("inbox-max", "want at least 20, got %d", o.inboxMax)
			}
			cfg, log, err := c.config()
			if err != nil {
				return err
			}
			return runRebuild(cmd.Context(), cfg, log, args[0], o, c.stderr)
		},
	}
	cmd.Flags().Int64Var(&o.catchUpLag, "catch-up-lag", 1000, "switch once the new version is at most this many messages behind")
	cmd.Flags().DurationVar(&o.handover, "handover", 3*time.Second, "keep the catch-up consumer running this long after the switch")
	cmd.Flags().IntVar(&o.verifyUsers, "verify-users", 20, "how many active users to verify on the new version before the switch")
	cmd.Flags().BoolVar(&o.force, "force", false, "switch even when the verification of the new version finds differences")
	cmd.Flags().IntVar(&o.inboxMax, "inbox-max", 0, "build the new inbox version with this bound (default: the active version's)")
	cmd.Flags().Int64Var(&o.celebrityThreshold, "celebrity-threshold", 0,
		"build new followers and inbox versions with this celebrity threshold and switch them together (default: the active versions')")
	cmd.Flags().Int64Var(&o.celebrityBand, "celebrity-band", 0,
		"build new followers and inbox versions with this celebrity band and switch them together (default: the active versions')")
	cmd.Flags().IntVar(&o.notificationsMax, "notifications-max", 0,
		"build the new notifications version with this bound per user (default: the active version's)")
	return cmd
}

// rebuildPolicy returns cfg with the new versions' bound,
// celebrity threshold and band from o's flags (the trim slack and band
// derived again for a new bound).
func rebuildPolicy(cfg Config, o rebuildOptions) Config {
	rec := readmodel.VersionRecord{InboxMax: o.inboxMax, CelebrityThreshold: o.celebrityThreshold,
		CelebrityBand: o.celebrityBand, BandRecorded: o.bandSet, NotificationsMax: o.notificationsMax}
	cfg.Policy = rec.Apply(cfg.Policy).WithDefaults()
	cfg.InboxMax, cfg.CelebrityThreshold = cfg.Policy.InboxMax, cfg.Policy.CelebrityThreshold
	cfg.CelebrityBand = cfg.Policy.CelebrityBand
	cfg.NotificationsMax = cfg.Policy.NotificationsMax
	return cfg
}

// runRebuild is `feed rebuild NAME`, with its progress on stderr.
func runRebuild(ctx context.Context, cfg Config, log *slog.Logger, name string, o rebuildOptions, stderr io.Writer) error {
	cfg.rebuildsInbox = name == "inbox" || name == rebuild.All
	a, cfg, err := openResolvedApp(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()
	// The new versions' policy: the active one's, with the flags'
	// changes; the switch records it, and the projectors and readers
	// adopt it with the versions. A new celebrity threshold makes the
	// rebuild build and switch the followers and the inbox versions
	// together (rebuild.Rebuilder.Run).
	if o.inboxMax != 0 || o.celebrityThreshold != 0 || o.bandSet || o.notificationsMax != 0 {
		cfg = rebuildPolicy(cfg, o)
		if err := cfg.Policy.Validate(); err != nil {
			return usageError{err.Error()}
		}
		fmt.Fprintf(stderr, "rebuild: the new versions' policy: inbox max %d, celebrity threshold %d, band %d, notifications max %d\n",
			cfg.Policy.InboxMax, cfg.Policy.CelebrityThreshold, cfg.Policy.CelebrityBand, cfg.Policy.NotificationsMax)
	}
	vc := verifyConfig(cfg, log)
	vc.Users = o.verifyUsers
	r, err := rebuild.New(rebuild.Config{
		Projections: projectionConfig(cfg),
		Runner:      projections.RunnerConfig{Brokers: brokersOf(cfg), Security: cfg.KafkaSecurity, Topic: cfg.Topic, Logger: log},
		CatchUpLag:  o.catchUpLag,
		Verify:      &vc,
		Force:       o.force,
		Handover:    o.handover,
		Progress:    rebuild.NewProgress(stderr, isTerminal(stderr)),
		Logger:      log,
	}, a.Pool, a.Redis)
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := r.Run(ctx, name)
	for _, x := range res {
		fmt.Fprintf(stderr, "rebuild: %s version %d -> %d: built %d %s in %v, caught up in %v\n",
			x.Projection, x.From, x.To, x.Built, x.Unit, x.BuildFor.Round(time.Millisecond), x.CatchUpFor.Round(time.Millisecond))
		if x.Verify != nil && !x.Verify.OK() {
			x.Verify.Write(stderr)
		}
	}
	if errors.Is(err, rebuild.ErrVerify) {
		fmt.Fprintln(stderr, "rebuild: the new version was verified and differs from the truth; the live version is untouched")
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "rebuild: interrupted; the live versions are untouched, run it again to start over")
		return err
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "rebuild: %s done in %v\n", name, time.Since(start).Round(time.Millisecond))
	return nil
}
