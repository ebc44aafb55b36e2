package projections

import (
	"context"

	"github.com/feedco/feed/readmodel"
)

// SetFollowerChunk sets the followers build's fields per command (and
// commands per pipeline) and returns the previous value.
func SetFollowerChunk(n int) int {
	old := followerChunk
	followerChunk = n
	return old
}

// EffectiveConfig is cfg with the defaults filled in, as a projector uses it.
func EffectiveConfig(cfg Config) Config { return cfg.withDefaults() }

// FollowEdgesRead is what the followers build reads below horizon: the
// events kept and the capacity the slice was given for them.
func FollowEdgesRead(ctx context.Context, pg Querier, horizon uint64) (n, capacity int, err error) {
	edges, _, _, err := (&Followers{pol: readmodel.DefaultPolicy()}).readFollowEdges(ctx, pg, horizon, noProgress{})
	return len(edges), cap(edges), err
}

// SetPoisonAfterApply sets the hook a replay runs between applying a key's
// events and recording them (a crash there, in tests).
func SetPoisonAfterApply(q *PoisonQueue, f func(key string) error) { q.afterApply = f }
