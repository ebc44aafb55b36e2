package projections

import (
	"context"

	"github.com/feedco/feed/readmodel"
)

// BuildInboxesWithZADD is BuildInboxes writing every inbox with ZADD +
// PEXPIRE (the fallback for servers that refuse the RESTORE payload).
func (p *Inbox) BuildInboxesWithZADD(ctx context.Context, db Beginner, progress BuildProgress) (int64, error) {
	return p.buildInboxes(ctx, db, progress, false)
}

// SetFollowerChunk sets the followers build's fields per command (and
// commands per pipeline) and returns the previous value.
func SetFollowerChunk(n int) int {
	old := followerChunk
	followerChunk = n
	return old
}

// AuthorPostsAmongSQL is removeAuthor's query.
const AuthorPostsAmongSQL = authorPostsAmongSQL

// EffectiveConfig is cfg with the defaults filled in, as a projector uses it.
func EffectiveConfig(cfg Config) Config { return cfg.withDefaults() }

// Sampled is the hot path's choice of the pushes that check an inbox's size.
func Sampled(post, user int64, every int) bool { return readmodel.Sampled(post, user, every) }

// FollowEdgesRead is what the followers build reads below horizon: the
// events kept and the capacity the slice was given for them.
func FollowEdgesRead(ctx context.Context, pg Querier, horizon uint64) (n, capacity int, err error) {
	edges, _, _, err := (&Followers{pol: readmodel.DefaultPolicy()}).readFollowEdges(ctx, pg, horizon, noProgress{})
	return len(edges), cap(edges), err
}

// SetPoisonAfterApply sets the hook a replay runs between applying a key's
// events and recording them (a crash there, in tests).
func SetPoisonAfterApply(q *PoisonQueue, f func(key string) error) { q.afterApply = f }
