package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/rebuild"
)

// printProjectionStatus writes, per projection, its active version (from
// PostgreSQL, with a note when the Redis registry differs), the
// active version's consumer group and its lag (the messages of the topic it
// has not committed yet), the policy recorded with the inbox and
// followers versions, and whether a rebuild is running. `feed status`
// calls it for its projections section.
func printProjectionStatus(ctx context.Context, a *App, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rdb, done, err := a.statusRedis(ctx)
	if err != nil {
		return err
	}
	defer done()
	st, err := rebuild.ReadStatus(ctx, a.Pool, rdb, projections.RunnerConfig{Brokers: brokersOf(a.Cfg), Security: a.Cfg.KafkaSecurity, Topic: a.Cfg.Topic}, "")
	if len(st.Projections) == 0 {
		return fmt.Errorf("projection status: %w", err)
	}
	fmt.Fprintln(w, "projections (active version, consumer group, lag in messages):")
	for _, p := range st.Projections {
		lag := fmt.Sprint(p.Lag)
		if p.Lag < 0 {
			lag = "unknown"
		}
		note := ""
		if p.Dirty && !st.Running {
			note = "  (an interrupted rebuild left keys of another version: the next `feed rebuild " + p.Name + "` deletes them)"
		}
		switch {
		case p.Name == "inbox" && p.InboxLayout != "":
			note += fmt.Sprintf("  (layout %s, inbox max %d, celebrity threshold %d)", p.InboxLayout, p.InboxMax, p.CelebrityThreshold)
		case p.Name == "followers" && p.CelebrityThreshold > 0:
			note += fmt.Sprintf("  (celebrity threshold %d)", p.CelebrityThreshold)
		}
		if p.Cached != p.Version {
			note += fmt.Sprintf("  (the Redis registry says v%d, 0 = missing: the projectors and the query side restore it from PostgreSQL)", p.Cached)
		}
		fmt.Fprintf(w, "  %-10s v%-3d %-34s %s%s\n", p.Name, p.Version, p.Group, lag, note)
	}
	if st.Running {
		fmt.Fprintf(w, "  rebuild running: %s to v%s, phase %s (started %s)\n",
			st.Info["projection"], st.Info["version"], st.Info["phase"], st.Info["started"])
	} else {
		fmt.Fprintln(w, "  rebuild running: no")
	}
	if err != nil {
		return fmt.Errorf("projection lag: %w", err)
	}
	return nil
}
