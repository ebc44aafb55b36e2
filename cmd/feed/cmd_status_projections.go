package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/feedco/feed/projections"
)

// projectionGroups are the consumer groups `feed status` reports.
var projectionGroups = []string{projections.GroupInbox, projections.GroupTimelines, projections.GroupFollowers, projections.GroupPosts}

// printProjectionStatus writes the consumer lag of every projector's group:
// the messages of the topic it has not committed yet. `feed status` calls it
// for its projections section.
func printProjectionStatus(ctx context.Context, cfg Config, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lags, err := projections.ConsumerLag(ctx, brokersOf(cfg), cfg.Topic, projectionGroups)
	if err != nil {
		return fmt.Errorf("projection lag: %w", err)
	}
	fmt.Fprintln(w, "projections (consumer lag, messages):")
	for _, g := range projectionGroups {
		fmt.Fprintf(w, "  %-34s %d\n", g, lags[g])
	}
	return nil
}
