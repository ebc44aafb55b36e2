package readmodel

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"time"

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
//   - `liked:{u}:<day>` and `reposted:{u}:<day>`, sets of the original
//     post ids (decimal) u likes and has a live repost of, one bucket per
//     creation day of the POST (DayOf): SADD on the change, SREM on its
//     undo. One pair's changes (u, p) come in one partition, in order (a
//     like and its unlike are keyed alike), so a redelivery replays them
//     in order and the set converges.
//   - `reposts:{O}`, a sorted set of the live reposts of original O, every
//     score 0, member RepostMember (the repost id then the reposter id,
//     big-endian uint64s): BYLEX order is repost-id order, the earliest
//     first. A member is one repost, added by its post.reposted and
//     removed by its post.unreposted, which come in order in the
//     reposter's partition.
//
// Memory is bounded by the Horizon (WithHorizon): counts:{p} expires at
// p's creation ms + H (PEXPIREAT at each write), a day bucket at its
// day's end + H, and reposts:{O} at its newest repost's ms + H (each add
// extends it, never shortens it), so a recent repost of an old original
// keeps the earliest-repost question answerable while the repost is in
// the horizon. A write whose expiry is past writes nothing: a like,
// repost or reply of a post older than the horizon touches neither its
// counts nor the buckets (the query side reads such a post's counts and
// the viewer's state from PostgreSQL).
//
// Every write is one command or one single-key script, so a batch may
// hold them in any slots; each is idempotent, and a crash between two of
// them is repaired by the redelivery of the event, which repeats them all.
type Engagement struct {
	keys Keys
	hz   Horizon
}

// NewEngagement returns the engagement operations under keys, without a
// horizon (WithHorizon).
func NewEngagement(keys Keys) Engagement { return Engagement{keys: keys} }

// WithHorizon returns m writing with horizon h: every key it writes
// expires (Horizon) and a write already past its expiry is dropped.
func (m Engagement) WithHorizon(h Horizon) Engagement { m.hz = h; return m }

// Horizon is the horizon m writes and reads with.
func (m Engagement) Horizon() Horizon { return m.hz }

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
// KEYS[1] counts:{p}; ARGV[1] the position; ARGV[2] the key's expiry
// (Unix ms, '0': none), set at every run that leaves the key; ARGV[3..]
// field, count pairs (the guard of field f is f .. 'v'). Returns the
// number of fields set.
var countsScript = redis.NewScript(`
local pos = tonumber(ARGV[1])
local n = 0
for i = 3, #ARGV, 2 do
  local g = ARGV[i] .. 'v'
  local cur = tonumber(redis.call('HGET', KEYS[1], g) or '0')
  if pos > cur then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i+1], g, ARGV[1])
    n = n + 1
  end
end
if ARGV[2] ~= '0' and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('PEXPIREAT', KEYS[1], ARGV[2])
end
return n
`)

// QueueSetCount queues the write of one count of post, count after the
// event at position (countsScript: only when position is above the
// field's guard), the key expiring at post's ms + H; nothing (nil) when
// that is past. Run the pipeline with Exec.
func (m Engagement) QueueSetCount(ctx context.Context, pipe redis.Pipeliner, post int64, field CountField, count, position int64) *redis.Cmd {
	at := m.hz.ExpiryOf(post)
	if m.hz.past(at) {
		return nil
	}
	return countsScript.EvalSha(ctx, pipe, []string{m.keys.Counts(post)}, position, at, string(field), count)
}

// SetCount is QueueSetCount run alone; it reports whether it wrote.
func (m Engagement) SetCount(ctx context.Context, rdb redis.Cmdable, post int64, field CountField, count, position int64) (bool, error) {
	at := m.hz.ExpiryOf(post)
	if m.hz.past(at) {
		return false, nil
	}
	n, err := countsScript.Run(ctx, rdb, []string{m.keys.Counts(post)}, position, at, string(field), count).Int()
	return n > 0, err
}

// QueueBuildCounts queues the rebuild of post's counts from a PostgreSQL
// snapshot read at log position position: each count is set unless the
// projector already applied an event newer than the snapshot. An all-zero
// snapshot writes nothing for a post with no counts key (absent is zero),
// and a post past the horizon nothing at all.
func (m Engagement) QueueBuildCounts(ctx context.Context, pipe redis.Pipeliner, post int64, c Counts, position int64) {
	at := m.hz.ExpiryOf(post)
	if m.hz.past(at) {
		return
	}
	countsScript.EvalSha(ctx, pipe, []string{m.keys.Counts(post)}, position, at,
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

// QueueLiked queues liker's like (liked) or unlike of post in its day
// bucket liked:{u}:<day>; a like also sets the bucket's expiry (its
// day's end + H). Nothing when the post is past the horizon (its state is
// then PostgreSQL's, QueueViewerState), though its bucket may live on.
func (m Engagement) QueueLiked(ctx context.Context, pipe redis.Pipeliner, liker, post int64, liked bool) {
	m.queueState(ctx, pipe, m.keys.Liked(liker, DayOf(post)), DayOf(post), post, liked)
}

// QueueReposted queues reposter's repost (reposted) or unrepost of post in
// its day bucket reposted:{u}:<day>, as QueueLiked.
func (m Engagement) QueueReposted(ctx context.Context, pipe redis.Pipeliner, reposter, post int64, reposted bool) {
	m.queueState(ctx, pipe, m.keys.Reposted(reposter, DayOf(post)), DayOf(post), post, reposted)
}

func (m Engagement) queueState(ctx context.Context, pipe redis.Pipeliner, key string, day, post int64, add bool) {
	if m.hz.past(m.hz.ExpiryOf(post)) {
		return
	}
	at := m.hz.DayExpiry(day)
	if !add {
		pipe.SRem(ctx, key, itoa(post))
		return
	}
	pipe.SAdd(ctx, key, itoa(post))
	if at != 0 {
		pipe.PExpireAt(ctx, key, time.UnixMilli(at))
	}
}

// QueueBuildViewerState queues part of the rebuild of user's liked
// (liked) or reposted (not liked) buckets: posts are added, each to its
// day's bucket, every bucket given its expiry; posts past the horizon
// are left out.
func (m Engagement) QueueBuildViewerState(ctx context.Context, pipe redis.Pipeliner, user int64, liked bool, posts []int64) {
	byDay := map[int64][]any{}
	var days []int64
	for _, p := range posts {
		d := DayOf(p)
		if m.hz.past(m.hz.ExpiryOf(p)) {
			continue
		}
		if _, ok := byDay[d]; !ok {
			days = append(days, d)
		}
		byDay[d] = append(byDay[d], itoa(p))
	}
	for _, d := range days {
		key := m.keys.Reposted(user, d)
		if liked {
			key = m.keys.Liked(user, d)
		}
		pipe.SAdd(ctx, key, byDay[d]...)
		if at := m.hz.DayExpiry(d); at != 0 {
			pipe.PExpireAt(ctx, key, time.UnixMilli(at))
		}
	}
}

// ViewerState is whether the viewer likes and has reposted one post.
// Unknown says Redis does not hold it (the post is older than the
// horizon): ask PostgreSQL.
type ViewerState struct{ Liked, Reposted, Unknown bool }

// ViewerStateReads are queued reads of a viewer's state (QueueViewerState).
type ViewerStateReads struct {
	n        int
	slot     []int // per post, its bucket's index in liked/reposted; -1: unknown
	at       []int // per post, its place among its bucket's members
	liked    []*redis.BoolSliceCmd
	reposted []*redis.BoolSliceCmd
}

// QueueViewerState queues whether viewer likes and has reposted each of
// posts: two commands (SMISMEMBER liked:{viewer}:<day>, SMISMEMBER
// reposted:{viewer}:<day>) per creation day the posts fall in (a page
// spans a few days), whatever the number of posts; none when there are no
// posts. A post older than the horizon at now is answered Unknown, asking
// nothing.
func (m Engagement) QueueViewerState(ctx context.Context, pipe redis.Pipeliner, viewer int64, posts []int64) ViewerStateReads {
	r := ViewerStateReads{n: len(posts), slot: make([]int, len(posts)), at: make([]int, len(posts))}
	if len(posts) == 0 {
		return r
	}
	now := time.UnixMilli(m.hz.nowMs())
	var days []int64
	var members [][]any
	for i, p := range posts {
		if !m.hz.Within(p, now) {
			r.slot[i] = -1
			continue
		}
		d := DayOf(p)
		j := slices.Index(days, d)
		if j < 0 {
			j = len(days)
			days = append(days, d)
			members = append(members, nil)
		}
		r.slot[i], r.at[i] = j, len(members[j])
		members[j] = append(members[j], itoa(p))
	}
	for j, d := range days {
		r.liked = append(r.liked, pipe.SMIsMember(ctx, m.keys.Liked(viewer, d), members[j]...))
		r.reposted = append(r.reposted, pipe.SMIsMember(ctx, m.keys.Reposted(viewer, d), members[j]...))
	}
	return r
}

// All returns the state of every post queued, in order.
func (r ViewerStateReads) All() ([]ViewerState, error) {
	if r.n == 0 {
		return nil, nil
	}
	liked := make([][]bool, len(r.liked))
	reposted := make([][]bool, len(r.reposted))
	for j := range r.liked {
		var err error
		if liked[j], err = r.liked[j].Result(); err != nil {
			return nil, err
		}
		if reposted[j], err = r.reposted[j].Result(); err != nil {
			return nil, err
		}
	}
	out := make([]ViewerState, r.n)
	for i := range out {
		j, k := r.slot[i], r.at[i]
		if j < 0 {
			out[i] = ViewerState{Unknown: true}
			continue
		}
		out[i] = ViewerState{Liked: k < len(liked[j]) && liked[j][k], Reposted: k < len(reposted[j]) && reposted[j][k]}
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

// incompleteMember is the member that marks a reposts:{O} possibly
// missing earlier reposts (Repost{0, 0}: it sorts first; no repost has
// id 0). addRepostScript writes it when it creates the set of an original
// already past the horizon: the reposts before may have expired with an
// earlier set.
var incompleteMember = RepostMember(Repost{})

// addRepostScript adds a repost to reposts:{O} and moves the key's expiry
// to the repost's, unless the key expires later already (an expiry is
// never shortened; a key without one, written before the horizon, gets
// it).
//
// KEYS[1] reposts:{O}; ARGV[1] the member; ARGV[2] the expiry (Unix ms,
// '0': none); ARGV[3] '1' when O is past the horizon (a new set is then
// marked with incompleteMember).
var addRepostScript = redis.NewScript(`
if ARGV[3] == '1' and redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('ZADD', KEYS[1], 0, ARGV[4])
end
redis.call('ZADD', KEYS[1], 0, ARGV[1])
if ARGV[2] ~= '0' then
  local cur = redis.call('PEXPIRETIME', KEYS[1])
  if cur < 0 or cur < tonumber(ARGV[2]) then
    redis.call('PEXPIREAT', KEYS[1], ARGV[2])
  end
end
return 1
`)

// QueueAddRepost queues r into original's reposts:{O}, the key's expiry
// extended to r's ms + H (addRepostScript); nothing when that is past.
// The set of an original the horizon has passed is created marked
// incomplete (RepostsPage.Incomplete).
func (m Engagement) QueueAddRepost(ctx context.Context, pipe redis.Pipeliner, original int64, r Repost) {
	at := m.hz.ExpiryOf(r.ID)
	if m.hz.past(at) {
		return
	}
	old := "0"
	if m.hz.past(m.hz.ExpiryOf(original)) {
		old = "1"
	}
	addRepostScript.EvalSha(ctx, pipe, []string{m.keys.Reposts(original)}, RepostMember(r), at, old, incompleteMember)
}

// QueueBuildRepost queues r into original's reposts:{O} for a rebuild
// that writes the whole set: the key expires at its newest repost's ms +
// H (newest, the newest live repost's id), so older reposts go in beside
// a recent one; nothing when that is past. The set is complete: no mark.
func (m Engagement) QueueBuildRepost(ctx context.Context, pipe redis.Pipeliner, original int64, r Repost, newest int64) {
	at := m.hz.ExpiryOf(max(newest, r.ID))
	if m.hz.past(at) {
		return
	}
	addRepostScript.EvalSha(ctx, pipe, []string{m.keys.Reposts(original)}, RepostMember(r), at, "0", incompleteMember)
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
	// incomplete is set by Result when the page holds incompleteMember.
	incomplete *bool
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
	// A first page asks one more: the incompleteness mark, first when
	// present, is not a repost.
	count := pageSize
	if start == "-" {
		count++
	}
	cmd := pipe.ZRangeArgs(ctx, redis.ZRangeArgs{Key: m.keys.Reposts(original), Start: start, Stop: stop, ByLex: true, Count: count})
	return RepostsPage{cmd: cmd, size: pageSize, incomplete: new(bool)}
}

// Result returns the page's reposts, earliest first, and whether a next
// page may hold more (the page is full). The incompleteness mark is not
// a repost: Incomplete reports it.
func (p RepostsPage) Result() ([]Repost, bool, error) {
	ms, err := p.cmd.Result()
	if err != nil {
		return nil, false, err
	}
	if len(ms) > 0 && ms[0] == incompleteMember {
		*p.incomplete = true
		ms = ms[1:]
	}
	more := int64(len(ms)) >= p.size
	if more {
		ms = ms[:p.size]
	}
	out := make([]Repost, 0, len(ms))
	for _, s := range ms {
		r, err := ParseRepostMember(s)
		if err != nil {
			return nil, false, err
		}
		out = append(out, r)
	}
	return out, more, nil
}

// Incomplete reports, after Result, that the set may miss reposts
// earlier than those it holds (it was created after the original left
// the horizon and older reposts with an earlier set): the earliest-repost
// question is then PostgreSQL's. Only a first page (after zero) can see
// the mark.
func (p RepostsPage) Incomplete() bool { return p.incomplete != nil && *p.incomplete }

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

// CountsKey is counts:{post}, StateKeys liked:{viewer}:<day> and
// reposted:{viewer}:<day>, RepostsKey reposts:{original}: the query
// side's read cache names what it keeps of them by their keys.
func (m Engagement) CountsKey(post int64) string { return m.keys.Counts(post) }

// AppendCountsKey appends CountsKey(post) to b.
func (m Engagement) AppendCountsKey(b []byte, post int64) []byte {
	return m.keys.AppendTagged(b, ProjectionPosts, "counts:", post, "")
}

// StateKeys returns viewer's two day buckets of day (see CountsKey).
func (m Engagement) StateKeys(viewer, day int64) (liked, reposted string) {
	return m.keys.Liked(viewer, day), m.keys.Reposted(viewer, day)
}

// RepostsKey is reposts:{original} (see CountsKey).
func (m Engagement) RepostsKey(original int64) string { return m.keys.Reposts(original) }

// StateScanCount is the COUNT of the one SSCAN step that reads a viewer's
// day bucket whole (the query side's read cache): Redis's default
// set-max-intset-entries, the largest set of ids kept compact.
const StateScanCount = 512

// QueueStateScan queues one SSCAN step of the day bucket key (StateKeys)
// from cursor 0: the whole bucket when its cursor comes back 0.
func (m Engagement) QueueStateScan(ctx context.Context, pipe redis.Pipeliner, key string) *redis.ScanCmd {
	return pipe.SScan(ctx, key, 0, "", StateScanCount)
}

// Key is name:{user} (see Engagement.CountsKey).
func (m Names) Key(user int64) string { return m.keys.Name(user) }
