package readmodel

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Timelines is the author timeline read model, `timeline:{a}`: an
// author's newest posts, bounded to max, with ~built (the timelines
// projector sees every post from the oldest offset) and ~floor when cut.
// It is the pull side of the hybrid feed and each reader's own posts.
type Timelines struct {
	keys Keys
	max  int
}

// NewTimelines returns the timeline operations under keys, bounded to max
// posts per author.
func NewTimelines(keys Keys, max int) Timelines { return Timelines{keys: keys, max: max} }

// Key is the timeline's key name, for the query side's read cache.
func (m Timelines) Key(author int64) string { return m.keys.Timeline(author) }

// Add adds a post exactly (no trim slack: one write per post is cheap), so
// the result does not depend on the order.
func (m Timelines) Add(ctx context.Context, rdb redis.UniversalClient, author, post, ms int64) error {
	return boundedAddScript.Run(ctx, rdb, []string{m.keys.Timeline(author)},
		m.max, 0, "", "", "1", "0", ms, itoa(post)).Err()
}

// Remove removes a (deleted) post from its author's timeline.
func (m Timelines) Remove(ctx context.Context, rdb redis.Cmdable, author, post int64) error {
	return rdb.ZRem(ctx, m.keys.Timeline(author), itoa(post)).Err()
}

// ownPostScript adds a post to its author's timeline the way the timelines
// projector does, minus the trim: only strictly above ~floor (every real
// member of a timeline scores above its floor; below it the set claims
// nothing). The projector's later ZADD of the same member is a no-op, and
// its trim runs then. One key, so it is valid on Redis Cluster.
//
// KEYS[1] timeline:{author}; ARGV[1] score (created_at ms); ARGV[2] post id.
var ownPostScript = lua(`
local f = redis.call('ZSCORE', KEYS[1], $FLOOR)
if f and tonumber(ARGV[1]) <= tonumber(f) then return 0 end
return redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
`)

// QueueOwnPost queues the write-through of a just-committed post into its
// author's timeline (ownPostScript, by EVAL: the request path of POST
// /api/posts must not fail on NOSCRIPT).
func (m Timelines) QueueOwnPost(ctx context.Context, pipe redis.Pipeliner, author, post, ms int64) {
	pipe.Eval(ctx, ownPostScript, []string{m.keys.Timeline(author)}, ms, itoa(post))
}

// QueueRead queues the read of author's timeline from fromMs (MaxScoreMs:
// the first page) with n entries, with ~floor (a reader's own timeline in
// the home read).
func (m Timelines) QueueRead(ctx context.Context, pipe redis.Pipeliner, author, fromMs int64, n int) SetRead {
	return queueSetRead(ctx, pipe, m.keys.Timeline(author), fromMs, n, false)
}

// QueueRange queues the read of the newest n posts of author's timeline at
// or below fromMs, with its ~floor.
func (m Timelines) QueueRange(ctx context.Context, pipe redis.Pipeliner, author, fromMs int64, n int) RangeRead {
	return queueRangeRead(ctx, pipe, m.keys.Timeline(author), fromMs, n)
}
