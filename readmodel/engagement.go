package readmodel

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Engagement is what people do with posts, as the posts projector keeps it
// for hydration and the feed rules, all in the posts projection's
// namespace:
//
//   - `counts:{p}`, a hash: the likes, reposts and replies of original p
//     (fields l, r, p), each beside its guard (lv, rv, pv): the log
//     position of the event that set it. The events carry the count after
//     the change, and the write side serialises one post's count changes
//     on its row lock, inserting the event after the UPDATE, so for one
//     post position order is the order of the counts: a field set only by
//     an event above its guard keeps the newest count under redelivery and
//     any reordering across partitions (likes come keyed by the post's
//     author, reposts by the reposter, replies by the reply's author). An
//     absent key or field is zero.
//   - `liked:{u}` and `reposted:{u}`, sets of the original post ids
//     (decimal) u likes and has a live repost of: SADD on the change, SREM
//     on its undo. One pair's changes (u, p) come in one partition, in
//     order (a like and its unlike are keyed alike), so a redelivery
//     replays them in order and the set converges.
//   - `reposts:{O}`, a sorted set of the live reposts of original O, every
//     score 0, member RepostMember (the repost id then the reposter id,
//     big-endian uint64s): BYLEX order is repost-id order, the earliest
//     first. A member is one repost, added by its post.reposted and
//     removed by its post.unreposted, which come in order in the
//     reposter's partition.
//
// Every write is one command or one single-key script, so a batch may
// hold them in any slots; each is idempotent, and a crash between two of
// them is repaired by the redelivery of the event, which repeats them all.
type Engagement struct{ keys Keys }

// NewEngagement returns the engagement operations under keys.
func NewEngagement(keys Keys) Engagement { return Engagement{keys: keys} }

// CountField names one count of counts:{p}; its guard is the field name
// followed by "v".
type CountField string

// The three counts of a post.
const (
	CountLikes   CountField = "l"
	CountReposts CountField = "r"
	CountReplies CountField = "p"
)

// Counts are a post's likes, reposts and replies.
type Counts struct{ Likes, Reposts, Replies int64 }

// countsScript sets counts of one post, each only when the event's
// position is above the field's guard: a redelivered or older event
// changes nothing, whatever the order of delivery.
//
// KEYS[1] counts:{p}; ARGV[1] the position; ARGV[2..] field, count pairs
// (the guard of field f is f .. 'v'). Returns the number of fields set.
var countsScript = redis.NewScript(`
local pos = tonumber(ARGV[1])
local n = 0
for i = 2, #ARGV, 2 do
  local g = ARGV[i] .. 'v'
  local cur = tonumber(redis.call('HGET', KEYS[1], g) or '0')
  if pos > cur then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i+1], g, ARGV[1])
    n = n + 1
  end
end
return n
`)

// QueueSetCount queues the write of one count of post, count after the
// event at position (countsScript: only when position is above the
// field's guard). Run the pipeline with Exec.
func (m Engagement) QueueSetCount(ctx context.Context, pipe redis.Pipeliner, post int64, field CountField, count, position int64) *redis.Cmd {
	return countsScript.EvalSha(ctx, pipe, []string{m.keys.Counts(post)}, position, string(field), count)
}

// SetCount is QueueSetCount run alone; it reports whether it wrote.
func (m Engagement) SetCount(ctx context.Context, rdb redis.Cmdable, post int64, field CountField, count, position int64) (bool, error) {
	n, err := countsScript.Run(ctx, rdb, []string{m.keys.Counts(post)}, position, string(field), count).Int()
	return n > 0, err
}

// QueueBuildCounts queues the rebuild of post's counts from a PostgreSQL
// snapshot read at log position position: each count is set unless the
// projector already applied an event newer than the snapshot. An all-zero
// snapshot writes nothing for a post with no counts key (absent is zero).
func (m Engagement) QueueBuildCounts(ctx context.Context, pipe redis.Pipeliner, post int64, c Counts, position int64) {
	countsScript.EvalSha(ctx, pipe, []string{m.keys.Counts(post)}, position,
		string(CountLikes), c.Likes, string(CountReposts), c.Reposts, string(CountReplies), c.Replies)
}

// CountReads are queued reads of counts (QueueCounts).
type CountReads struct{ cmds []*redis.SliceCmd }

// QueueCounts queues the read of the counts of posts: one HMGET each.
func (m Engagement) QueueCounts(ctx context.Context, pipe redis.Pipeliner, posts []int64) CountReads {
	cmds := make([]*redis.SliceCmd, len(posts))
	for j, p := range posts {
		cmds[j] = pipe.HMGet(ctx, m.keys.Counts(p), string(CountLikes), string(CountReposts), string(CountReplies))
	}
	return CountReads{cmds: cmds}
}

// Len is the number of posts queued.
func (r CountReads) Len() int { return len(r.cmds) }

// At returns the counts of the j-th post (zero when absent).
func (r CountReads) At(j int) (Counts, error) {
	vals, err := r.cmds[j].Result()
	if err != nil {
		return Counts{}, err
	}
	var c Counts
	for i, dst := range []*int64{&c.Likes, &c.Reposts, &c.Replies} {
		if i >= len(vals) {
			break
		}
		if *dst, err = intOf(vals[i]); err != nil {
			return Counts{}, fmt.Errorf("counts of %s: %w", r.cmds[j].Args()[1], err)
		}
	}
	return c, nil
}

// intOf reads a hash field of HMGET: absent (nil) is 0.
func intOf(v any) (int64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// QueueLiked queues liker's like (liked) or unlike of post in liked:{u}.
func (m Engagement) QueueLiked(ctx context.Context, pipe redis.Pipeliner, liker, post int64, liked bool) {
	if liked {
		pipe.SAdd(ctx, m.keys.Liked(liker), itoa(post))
	} else {
		pipe.SRem(ctx, m.keys.Liked(liker), itoa(post))
	}
}

// QueueReposted queues reposter's repost (reposted) or unrepost of post in
// reposted:{u}.
func (m Engagement) QueueReposted(ctx context.Context, pipe redis.Pipeliner, reposter, post int64, reposted bool) {
	if reposted {
		pipe.SAdd(ctx, m.keys.Reposted(reposter), itoa(post))
	} else {
		pipe.SRem(ctx, m.keys.Reposted(reposter), itoa(post))
	}
}

// QueueBuildViewerState queues part of the rebuild of user's liked:{u}
// (liked) or reposted:{u} (not liked) set: posts are added.
func (m Engagement) QueueBuildViewerState(ctx context.Context, pipe redis.Pipeliner, user int64, liked bool, posts []int64) {
	if len(posts) == 0 {
		return
	}
	ms := make([]any, len(posts))
	for i, p := range posts {
		ms[i] = itoa(p)
	}
	key := m.keys.Reposted(user)
	if liked {
		key = m.keys.Liked(user)
	}
	pipe.SAdd(ctx, key, ms...)
}

// ViewerState is whether the viewer likes and has reposted one post.
type ViewerState struct{ Liked, Reposted bool }

// ViewerStateReads are queued reads of a viewer's state (QueueViewerState).
type ViewerStateReads struct{ liked, reposted *redis.BoolSliceCmd }

// QueueViewerState queues whether viewer likes and has reposted each of
// posts: two commands (SMISMEMBER liked:{viewer}, SMISMEMBER
// reposted:{viewer}) whatever the number of posts; none when there are
// no posts.
func (m Engagement) QueueViewerState(ctx context.Context, pipe redis.Pipeliner, viewer int64, posts []int64) ViewerStateReads {
	if len(posts) == 0 {
		return ViewerStateReads{}
	}
	ms := make([]any, len(posts))
	for i, p := range posts {
		ms[i] = itoa(p)
	}
	return ViewerStateReads{
		liked:    pipe.SMIsMember(ctx, m.keys.Liked(viewer), ms...),
		reposted: pipe.SMIsMember(ctx, m.keys.Reposted(viewer), ms...),
	}
}

// All returns the state of every post queued, in order.
func (r ViewerStateReads) All() ([]ViewerState, error) {
	if r.liked == nil {
		return nil, nil
	}
	l, err := r.liked.Result()
	if err != nil {
		return nil, err
	}
	rp, err := r.reposted.Result()
	if err != nil {
		return nil, err
	}
	out := make([]ViewerState, len(l))
	for i := range l {
		out[i] = ViewerState{Liked: l[i], Reposted: i < len(rp) && rp[i]}
	}
	return out, nil
}

// Repost is one live repost of an original: its own id and its reposter.
type Repost struct{ ID, Reposter int64 }

// RepostMember is r's member of reposts:{O}: 16 bytes, r.ID then
// r.Reposter, each a big-endian uint64.
func RepostMember(r Repost) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(r.ID))
	binary.BigEndian.PutUint64(b[8:], uint64(r.Reposter))
	return string(b[:])
}

// ParseRepostMember decodes a member of reposts:{O}.
func ParseRepostMember(s string) (Repost, error) {
	if len(s) != 16 {
		return Repost{}, fmt.Errorf("repost member of %d bytes, want 16", len(s))
	}
	return Repost{ID: int64(binary.BigEndian.Uint64([]byte(s[:8]))), Reposter: int64(binary.BigEndian.Uint64([]byte(s[8:])))}, nil
}

// QueueAddRepost queues r into original's reposts:{O}.
func (m Engagement) QueueAddRepost(ctx context.Context, pipe redis.Pipeliner, original int64, r Repost) {
	pipe.ZAdd(ctx, m.keys.Reposts(original), redis.Z{Score: 0, Member: RepostMember(r)})
}

// QueueRemoveRepost queues r out of original's reposts:{O}.
func (m Engagement) QueueRemoveRepost(ctx context.Context, pipe redis.Pipeliner, original int64, r Repost) {
	pipe.ZRem(ctx, m.keys.Reposts(original), RepostMember(r))
}

// RepostsPage is one queued page of an original's reposts
// (QueueRepostsPage).
type RepostsPage struct {
	cmd  *redis.StringSliceCmd
	size int64
}

// QueueRepostsPage queues one page of at most pageSize live reposts of
// original whose ids are below before (0: all), from the earliest, after
// the repost after (zero: from the first): ZRANGE reposts:{O} BYLEX
// LIMIT 0 pageSize. The next page starts after the last repost of this
// one.
func (m Engagement) QueueRepostsPage(ctx context.Context, pipe redis.Pipeliner, original, before int64, after Repost, pageSize int64) RepostsPage {
	start, stop := "-", "+"
	if after != (Repost{}) {
		start = "(" + RepostMember(after)
	}
	if before > 0 {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(before))
		// A member with before's 8 bytes in front is longer than them,
		// so above them: the range ends at the reposts with smaller ids.
		stop = "(" + string(b[:])
	}
	cmd := pipe.ZRangeArgs(ctx, redis.ZRangeArgs{Key: m.keys.Reposts(original), Start: start, Stop: stop, ByLex: true, Count: pageSize})
	return RepostsPage{cmd: cmd, size: pageSize}
}

// Result returns the page's reposts, earliest first, and whether a next
// page may hold more (the page is full).
func (p RepostsPage) Result() ([]Repost, bool, error) {
	ms, err := p.cmd.Result()
	if err != nil {
		return nil, false, err
	}
	out := make([]Repost, 0, len(ms))
	for _, s := range ms {
		r, err := ParseRepostMember(s)
		if err != nil {
			return nil, false, err
		}
		out = append(out, r)
	}
	return out, int64(len(ms)) == p.size, nil
}

// EarlierReposts lists every live repost of original with an id below
// before (0: all), earliest first, paging pageSize at a time until the
// set is exhausted: the answer is exact.
func (m Engagement) EarlierReposts(ctx context.Context, rdb redis.Cmdable, original, before int64, pageSize int64) ([]Repost, error) {
	if pageSize <= 0 {
		pageSize = 128
	}
	var all []Repost
	var after Repost
	for {
		pipe := rdb.Pipeline()
		page := m.QueueRepostsPage(ctx, pipe, original, before, after, pageSize)
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, err
		}
		rs, more, err := page.Result()
		if err != nil {
			return nil, err
		}
		all = append(all, rs...)
		if !more || len(rs) == 0 {
			return all, nil
		}
		after = rs[len(rs)-1]
	}
}

// Names are users' display names, `name:{u}` (a string in the posts
// projection's namespace), written once by the posts projector on
// user.registered (SET NX: names never change), so a reader may cache
// them in process for as long as it likes.
type Names struct{ keys Keys }

// NewNames returns the name operations under keys.
func NewNames(keys Keys) Names { return Names{keys: keys} }

// QueueSet queues the write of user's name unless one is written.
func (m Names) QueueSet(ctx context.Context, pipe redis.Pipeliner, user int64, name string) {
	pipe.SetNX(ctx, m.keys.Name(user), name, 0)
}

// NameReads are queued reads of names (QueueNames).
type NameReads struct{ gets []*redis.StringCmd }

// QueueNames queues the read of the names of users: one GET each (the
// keys are in many slots).
func (m Names) QueueNames(ctx context.Context, pipe redis.Pipeliner, users []int64) NameReads {
	gets := make([]*redis.StringCmd, len(users))
	for j, u := range users {
		gets[j] = pipe.Get(ctx, m.keys.Name(u))
	}
	return NameReads{gets: gets}
}

// At returns the j-th user's name, false when none is written (an error
// is the read's, not an absent name).
func (r NameReads) At(j int) (string, bool, error) {
	s, err := r.gets[j].Result()
	if err == redis.Nil {
		return "", false, nil
	}
	return s, err == nil, err
}
