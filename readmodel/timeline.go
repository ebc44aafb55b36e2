package readmodel

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
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
// the result does not depend on the order. It leaves ~built as it is. In
// the same round trip it clears the author's newest-post marker
// (MarkNewest) when it marks this post or an older one: the timeline is
// no longer behind it.
func (m Timelines) Add(ctx context.Context, rdb redis.UniversalClient, author, post, ms int64) error {
	return Exec(ctx, rdb, func(pipe redis.Pipeliner) {
		boundedAddScript.EvalSha(ctx, pipe, []string{m.keys.Timeline(author)}, m.max, 0, "", "", "0", "0", ms, itoa(post))
		clearNewestScript.EvalSha(ctx, pipe, []string{m.keys.Newest(author)}, itoa(post))
	})
}

// AddRepost adds a repost's own entry (its id and millisecond) to the
// reposter's timeline exactly, as Add adds a post, and leaves the
// newest-post marker alone: the marker is the API's read-your-writes of
// posts, and a repost is never marked.
func (m Timelines) AddRepost(ctx context.Context, rdb redis.UniversalClient, reposter, repost, ms int64) error {
	return boundedAddScript.Run(ctx, rdb, []string{m.keys.Timeline(reposter)}, m.max, 0, "", "", "0", "0", ms, itoa(repost)).Err()
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

// NewestTTL is how long an author's newest-post marker (MarkNewest)
// lives: far longer than the timelines projector takes to write the post
// into the author's timeline (seconds), after which the marker has
// nothing left to say.
const NewestTTL = 10 * time.Minute

// newestScript raises an author's newest-post marker to ARGV[1] (a post
// id, decimal) unless it holds a newer one, and sets its TTL (ARGV[2]
// seconds). Ids are compared as decimals: by length, then digit by digit
// (a double holds 53 bits; Lua's string '<' is strcoll). One key, so it
// is valid on Redis Cluster.
var newestScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
local id = ARGV[1]
if cur and #cur >= #id then
  local newer = #cur > #id
  if not newer then
    newer = true -- equal: nothing to raise
    for i = 1, #id do
      local a, b = string.byte(cur, i), string.byte(id, i)
      if a ~= b then newer = a > b break end
    end
  end
  if newer then return 0 end
end
redis.call('SET', KEYS[1], id, 'EX', ARGV[2])
return 1
`)

// clearNewestScript deletes an author's newest-post marker when it holds
// ARGV[1] (a post id, decimal) or an older post (compared as
// newestScript compares). Returns 1 when it deleted it.
var clearNewestScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
local id = ARGV[1]
if not cur or #cur > #id then return 0 end
if #cur == #id then
  for i = 1, #id do
    local a, b = string.byte(cur, i), string.byte(id, i)
    if a > b then return 0 end
    if a < b then break end
  end
end
redis.call('DEL', KEYS[1])
return 1
`)

// MarkNewest records post as author's newest post (unless a newer one is
// recorded) for NewestTTL: read-your-writes. The API marks a post it has
// just committed; the timelines projector clears the marker when it adds
// that post (Add), so a marker says the timeline is behind it. A home read
// of the author fetches the marker with the author's own timeline
// (QueueNewest) and, while there is one, reads the author's posts newer
// than the timeline's from PostgreSQL. The marker is the only thing the
// API writes to Redis for a new post: the post and the timeline entry are
// the projectors'.
func (m Timelines) MarkNewest(ctx context.Context, rdb redis.Cmdable, author, post int64) error {
	return newestScript.Run(ctx, rdb, []string{m.keys.Newest(author)}, itoa(post), int64(NewestTTL/time.Second)).Err()
}

// QueueNewest queues the read of author's newest-post marker; give its
// reply to NewestOf.
func (m Timelines) QueueNewest(ctx context.Context, pipe redis.Pipeliner, author int64) *redis.StringCmd {
	return pipe.Get(ctx, m.keys.Newest(author))
}

// NewestOf is the post id a QueueNewest reply holds, 0 when there is none.
func NewestOf(c *redis.StringCmd) int64 {
	n, err := c.Int64()
	if err != nil {
		return 0
	}
	return n
}

// NewestKey is author's newest-post marker key, for the query side's
// read cache, which tracks replies by key.
func (m Timelines) NewestKey(author int64) string { return m.keys.Newest(author) }

// AppendNewestKey appends author's newest-post marker key to b.
func (m Timelines) AppendNewestKey(b []byte, author int64) []byte {
	return m.keys.appendTagged(b, ProjectionTimelines, "newest:", author, "")
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

// timelineSnapshotSQL is an author's newest entries: non-deleted posts
// and live reposts (whose originals the read checks), as the timelines
// projector writes them.
const timelineSnapshotSQL = `
(SELECT id, created_at FROM posts WHERE author_id = $1 AND NOT deleted
 ORDER BY created_at DESC, id DESC LIMIT $2)
UNION ALL
(SELECT id, created_at FROM reposts WHERE user_id = $1
 ORDER BY created_at DESC, id DESC LIMIT $2)
ORDER BY created_at DESC, id DESC LIMIT $2`

// Rebuild rebuilds author's timeline from PostgreSQL, for a read that
// found it not built: the author's newest Max entries, then ~built
// (WriteRebuilt).
func (m Timelines) Rebuild(ctx context.Context, db VersionQuerier, rdb redis.UniversalClient, author int64) error {
	rows, err := db.Query(ctx, timelineSnapshotSQL, author, m.max)
	if err != nil {
		return fmt.Errorf("read timeline snapshot of %d: %w", author, err)
	}
	posts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) {
		var e Entry
		var at time.Time
		err := r.Scan(&e.ID, &at)
		e.Ms = at.UnixMilli()
		return e, err
	})
	if err != nil {
		return fmt.Errorf("read timeline snapshot of %d: %w", author, err)
	}
	if err := m.WriteRebuilt(ctx, rdb, author, posts); err != nil {
		return fmt.Errorf("write rebuilt timeline of %d: %w", author, err)
	}
	return nil
}
