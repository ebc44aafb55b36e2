package readmodel

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Timelines is the author timeline read model, `timeline:{a}`: an
// author's newest posts, bounded to max, with ~floor when cut. It is the
// pull side of the hybrid feed and each reader's own posts.
//
// A timeline is complete (above its ~floor) only with ~built, which only a
// build from the log writes: the bulk build of `feed rebuild timelines`,
// or WriteRebuilt, the query side's rebuild from PostgreSQL of a timeline
// it found without it. The projector's adds never create ~built: a
// timeline lost with Redis (a restart without persistence, a FLUSHDB, an
// eviction) and recreated by the next post holds that post alone, and
// must read as "not known", never as the author's whole history.
type Timelines struct {
	keys Keys
	max  int
}

// DefaultTimelineMax is the default bound of a timeline, in posts: the
// projector's trim and the query side's rebuilds.
const DefaultTimelineMax = 1000

// NewTimelines returns the timeline operations under keys, bounded to max
// posts per author.
func NewTimelines(keys Keys, max int) Timelines { return Timelines{keys: keys, max: max} }

// Key is the timeline's key name, for the query side's read cache.
func (m Timelines) Key(author int64) string { return m.keys.Timeline(author) }

// AppendKey appends Key(author) to b.
func (m Timelines) AppendKey(b []byte, author int64) []byte {
	return m.keys.appendTagged(b, ProjectionTimelines, "timeline:", author, "")
}

// Add adds a post exactly (no trim slack: one write per post is cheap), so
// the result does not depend on the order. It leaves ~built as it is.
func (m Timelines) Add(ctx context.Context, rdb redis.UniversalClient, author, post, ms int64) error {
	return boundedAddScript.Run(ctx, rdb, []string{m.keys.Timeline(author)},
		m.max, 0, "", "", "0", "0", ms, itoa(post)).Err()
}

// WriteRebuilt writes the rebuild of author's timeline from PostgreSQL:
// posts, author's newest non-deleted posts newest first, at most the
// bound (a full snapshot is cut: ~floor at its oldest millisecond), and
// then ~built. Like the inbox's it only adds: a post the projector added
// between the snapshot and this write stays, and a post deleted in
// between is hidden at read. One script, one key: valid on Cluster.
func (m Timelines) WriteRebuilt(ctx context.Context, rdb redis.UniversalClient, author int64, posts []Entry) error {
	floor := ""
	if len(posts) >= m.max {
		floor = strconv.FormatInt(posts[len(posts)-1].Ms, 10)
	}
	args := make([]any, 0, 6+2*len(posts))
	args = append(args, m.max, 0, floor, "", "1", "0")
	for _, e := range posts {
		args = append(args, e.Ms, itoa(e.ID))
	}
	return boundedAddScript.Run(ctx, rdb, []string{m.keys.Timeline(author)}, args...).Err()
}

// Max is the bound of a timeline: how many posts a rebuild reads.
func (m Timelines) Max() int { return m.max }

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
// the first page) with n entries, with ~floor and ~built (a reader's own
// timeline in the home read).
func (m Timelines) QueueRead(ctx context.Context, pipe redis.Pipeliner, author, fromMs int64, n int) SetRead {
	return queueSetRead(ctx, pipe, m.keys.Timeline(author), fromMs, n, true)
}

// QueueRange queues the read of the newest n posts of author's timeline at
// or below fromMs, with its ~floor and ~built.
func (m Timelines) QueueRange(ctx context.Context, pipe redis.Pipeliner, author, fromMs int64, n int) RangeRead {
	return queueRangeRead(ctx, pipe, m.keys.Timeline(author), fromMs, n)
}
