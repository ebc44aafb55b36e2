package readmodel

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Live streams' Redis names (docs/streams.md): the Pub/Sub channels that
// wake a stream up, the sorted set of users with an open stream, and the
// Redis Stream of recent edits and deletions. None is a read model: they
// carry no state a read needs to be right (a stream that misses a wake-up
// reads anyway, at its start and after every resubscription), so they
// are not versioned and a rebuild leaves them alone. Channels are sharded
// Pub/Sub channels (SPUBLISH, SSUBSCRIBE): on a Redis Cluster a channel
// lives on the node of its hash slot, so the `{...}` of a user's and of
// an author's channel spread them over the nodes like their keys.
type Live struct{ prefix string }

// NewLive names the live streams' channels and keys under keys.Prefix.
func NewLive(keys Keys) Live { return Live{prefix: keys.Prefix} }

// WakeUser is the channel the inbox projector publishes on after it
// pushed entries into user's inbox (only for users with an open stream).
func (l Live) WakeUser(user int64) string {
	return l.prefix + "wake:{" + strconv.FormatInt(user, 10) + "}"
}

// WakeAuthor is the channel the timelines projector publishes on for
// every post of author: a stream listens to its own user's and to those
// of the celebrities its user follows (their posts are pulled, not
// pushed).
func (l Live) WakeAuthor(author int64) string {
	return l.prefix + "wake:a:{" + strconv.FormatInt(author, 10) + "}"
}

// WakeNotifications is the channel the notifications projector's
// notifier publishes on after it added a notification of user's (only
// for users with an open stream).
func (l Live) WakeNotifications(user int64) string {
	return l.prefix + "wake:n:{" + strconv.FormatInt(user, 10) + "}"
}

// WokenAuthor returns the author of a WakeAuthor channel.
func (l Live) WokenAuthor(channel string) (int64, bool) {
	rest, ok := strings.CutPrefix(channel, l.prefix+"wake:a:{")
	if !ok {
		return 0, false
	}
	id, ok := strings.CutSuffix(rest, "}")
	if !ok {
		return 0, false
	}
	a, err := strconv.ParseInt(id, 10, 64)
	return a, err == nil
}

// ChangesChannel is the channel the posts projector publishes on after
// it appended an edit or a deletion to the changes stream.
func (l Live) ChangesChannel() string { return l.prefix + "changes" }

// changesKey is the Redis Stream of recent edits and deletions (no hash
// tag: Redis hashes the whole name, which the marks name as their tag).
func (l Live) changesKey() string { return l.prefix + "changes" }

// onlineKey is the sorted set of users with an open stream, each scored
// with the Unix millisecond its registration expires at.
func (l Live) onlineKey() string { return l.prefix + "online" }

// Publish sends a wake-up on channel (SPUBLISH: sharded Pub/Sub, which a
// single Redis 7 server serves as well as a cluster).
func (l Live) Publish(ctx context.Context, rdb redis.Cmdable, channel string) error {
	if err := rdb.SPublish(ctx, channel, "1").Err(); err != nil {
		return fmt.Errorf("publish %s: %w", channel, err)
	}
	return nil
}

// QueuePublish queues Publish in pipe.
func (l Live) QueuePublish(ctx context.Context, pipe redis.Pipeliner, channel string) {
	pipe.SPublish(ctx, channel, "1")
}

// MarkOnline registers users as having an open stream until the given
// time (a stream's process refreshes it before it runs out).
func (l Live) MarkOnline(ctx context.Context, rdb redis.Cmdable, users []int64, until time.Time) error {
	if len(users) == 0 {
		return nil
	}
	zs := make([]redis.Z, len(users))
	for i, u := range users {
		zs[i] = redis.Z{Score: float64(until.UnixMilli()), Member: strconv.FormatInt(u, 10)}
	}
	if err := rdb.ZAdd(ctx, l.onlineKey(), zs...).Err(); err != nil {
		return fmt.Errorf("mark users online: %w", err)
	}
	return nil
}

// Online returns the users whose registration runs past now, and drops
// the expired ones.
func (l Live) Online(ctx context.Context, rdb redis.Cmdable, now time.Time) ([]int64, error) {
	ms := strconv.FormatInt(now.UnixMilli(), 10)
	pipe := rdb.Pipeline()
	pipe.ZRemRangeByScore(ctx, l.onlineKey(), "-inf", "("+ms)
	get := pipe.ZRangeByScore(ctx, l.onlineKey(), &redis.ZRangeBy{Min: ms, Max: "+inf"})
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("read online users: %w", err)
	}
	out := make([]int64, 0, len(get.Val()))
	for _, s := range get.Val() {
		if id, err := strconv.ParseInt(s, 10, 64); err == nil {
			out = append(out, id)
		}
	}
	return out, nil
}

// Change is an edit or a deletion of a post, as the changes stream keeps
// it: Pos is its place in the stream (Redis Stream ids, in order).
type Change struct {
	Pos     ChangePos
	Post    int64
	Author  int64
	Deleted bool
	// Version, Content and EditedAt are an edit's (the post's content
	// version, its new text and the edit's time); empty for a deletion.
	Version  int64
	Content  string
	EditedAt time.Time
}

// ChangePos is a place in the changes stream: a Redis Stream id
// (millisecond, sequence). The zero value is before every change.
type ChangePos struct{ Ms, Seq uint64 }

// Less reports whether p is before q.
func (p ChangePos) Less(q ChangePos) bool { return p.Ms < q.Ms || p.Ms == q.Ms && p.Seq < q.Seq }

func (p ChangePos) String() string {
	return strconv.FormatUint(p.Ms, 10) + "-" + strconv.FormatUint(p.Seq, 10)
}

func parseChangePos(s string) (ChangePos, error) {
	a, b, ok := strings.Cut(s, "-")
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return ChangePos{}, fmt.Errorf("bad stream id %q", s)
	}
	return ChangePos{Ms: ms, Seq: seq}, nil
}

// ChangesKept is how long the changes stream keeps an entry: a stream
// that resumes later than that after its last event misses the edits and
// deletions older than it (docs/streams.md).
const ChangesKept = 15 * time.Minute

// appendChangeScript appends a change to the changes stream (KEYS[1])
// once: only when its mark (KEYS[2], kept as long as the stream keeps
// entries) is new. ARGV: the mark's lifetime in ms, the MINID the stream
// is trimmed to, then the entry's field and value pairs.
var appendChangeScript = redis.NewScript(`
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[1]) then return 0 end
local entry = {}
for i = 3, #ARGV do entry[#entry + 1] = ARGV[i] end
redis.call('XADD', KEYS[1], 'MINID', '~', ARGV[2], '*', unpack(entry))
return 1`)

// changeMark is the key that says c is in the changes stream: an edit by
// its post and version, a deletion by its post. Its hash tag is the
// stream's name, so the script touches one slot.
func (l Live) changeMark(c Change) string {
	k := l.prefix + "changes:seen{" + l.prefix + "changes}:" + strconv.FormatInt(c.Post, 10)
	if c.Deleted {
		return k + ":d"
	}
	return k + ":" + strconv.FormatInt(c.Version, 10)
}

// AppendChange adds c (its Pos ignored) to the changes stream once,
// trimming what is older than ChangesKept (XADD MINID ~), then publishes
// the changes channel. A redelivered event finds its change's mark and
// appends nothing, but publishes again: a crash between the two steps
// loses no wake-up, and a stream never sees one change twice.
func (l Live) AppendChange(ctx context.Context, rdb redis.UniversalClient, c Change, now time.Time) error {
	return l.AppendChanges(ctx, rdb, []Change{c}, now)
}

// AppendChanges is AppendChange of each of cs, in order, in one pipeline,
// then one publish.
func (l Live) AppendChanges(ctx context.Context, rdb redis.UniversalClient, cs []Change, now time.Time) error {
	if len(cs) == 0 {
		return nil
	}
	err := Exec(ctx, rdb, func(pipe redis.Pipeliner) {
		for _, c := range cs {
			args := []any{ChangesKept.Milliseconds(), strconv.FormatInt(now.Add(-ChangesKept).UnixMilli(), 10), "p", c.Post, "a", c.Author}
			if c.Deleted {
				args = append(args, "d", 1)
			} else {
				args = append(args, "v", c.Version, "c", c.Content, "e", c.EditedAt.UnixMilli())
			}
			appendChangeScript.EvalSha(ctx, pipe, []string{l.changesKey(), l.changeMark(c)}, args...)
		}
	})
	if err != nil && err != redis.Nil {
		return fmt.Errorf("append change of post %d: %w", cs[0].Post, err)
	}
	if err := rdb.SPublish(ctx, l.ChangesChannel(), "1").Err(); err != nil {
		return fmt.Errorf("publish change of post %d: %w", cs[0].Post, err)
	}
	return nil
}

func init() { scripts = append(scripts, appendChangeScript) }

// LastChange is the position of the newest change (zero when none).
func (l Live) LastChange(ctx context.Context, rdb redis.Cmdable) (ChangePos, error) {
	xs, err := rdb.XRevRangeN(ctx, l.changesKey(), "+", "-", 1).Result()
	if err != nil {
		return ChangePos{}, fmt.Errorf("read the last change: %w", err)
	}
	if len(xs) == 0 {
		return ChangePos{}, nil
	}
	return parseChangePos(xs[0].ID)
}

// ChangesAfter returns up to n changes strictly after pos, oldest first.
func (l Live) ChangesAfter(ctx context.Context, rdb redis.Cmdable, pos ChangePos, n int64) ([]Change, error) {
	xs, err := rdb.XRangeN(ctx, l.changesKey(), "("+pos.String(), "+", n).Result()
	if err != nil {
		return nil, fmt.Errorf("read changes: %w", err)
	}
	out := make([]Change, 0, len(xs))
	for _, x := range xs {
		p, err := parseChangePos(x.ID)
		if err != nil {
			return nil, err
		}
		c := Change{Pos: p}
		c.Post, _ = strconv.ParseInt(fmt.Sprint(x.Values["p"]), 10, 64)
		c.Author, _ = strconv.ParseInt(fmt.Sprint(x.Values["a"]), 10, 64)
		if _, ok := x.Values["d"]; ok {
			c.Deleted = true
		} else {
			c.Version, _ = strconv.ParseInt(fmt.Sprint(x.Values["v"]), 10, 64)
			c.Content, _ = x.Values["c"].(string)
			if ms, err := strconv.ParseInt(fmt.Sprint(x.Values["e"]), 10, 64); err == nil {
				c.EditedAt = time.UnixMilli(ms).UTC()
			}
		}
		out = append(out, c)
	}
	return out, nil
}
