package readmodel

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Inboxes is the home-feed read model, `feed:{u}`: a sorted set per user
// of the posts pushed to them (bounded by the Policy's trim rule, see
// Policy.InboxTrimSlack), with ~floor and ~built (doc.go), expiring
// Policy.InboxTTL after its owner's last read.
type Inboxes struct {
	keys Keys
	pol  Policy
}

// NewInboxes returns the inbox operations under keys by pol (defaulted
// here, so a zero Policy means the defaults).
func NewInboxes(keys Keys, pol Policy) Inboxes {
	return Inboxes{keys: keys, pol: pol.WithDefaults()}
}

// Key is the inbox's key name, for the query side's read cache, which
// tracks replies by key.
func (m Inboxes) Key(user int64) string { return m.keys.Inbox(user) }

// AppendKey appends Key(user) to b.
func (m Inboxes) AppendKey(b []byte, user int64) []byte {
	return m.keys.appendTagged(b, ProjectionInbox, "feed:", user, "")
}

// InboxPush is one post's fan-out, prepared once per post and queued once
// per follower.
type InboxPush struct {
	z     redis.Z
	args  []any
	exact bool
	ttl   time.Duration
	over  int64
}

// NewPush prepares the fan-out of post (score ms).
func (m Inboxes) NewPush(post, ms int64) InboxPush {
	return InboxPush{
		z:     redis.Z{Score: float64(ms), Member: itoa(post)},
		args:  m.boundedArgs([]any{ms, itoa(post)}, ""),
		exact: m.pol.InboxTrimEvery == 1,
		ttl:   m.pol.InboxTTL(),
		// Both sentinels assumed present: a trim never starts early.
		over: int64(m.pol.InboxTrimOver() + 2),
	}
}

// Exact reports whether every push runs the bounded-add script
// (InboxTrimEvery 1: exact trims) instead of a plain ZADD.
func (p InboxPush) Exact() bool { return p.exact }

// QueuePush queues the hot path's plain ZADD of the post into user's
// inbox. It does not look at the floor: a late push (its score at or below
// a floor that a trim or backfill raised meanwhile) lands there and stays
// until the script next runs on that inbox; readers take only entries
// strictly above ~floor, so it is never shown.
func (m Inboxes) QueuePush(ctx context.Context, pipe redis.Pipeliner, user int64, p InboxPush) *redis.IntCmd {
	return pipe.ZAdd(ctx, m.keys.Inbox(user), p.z)
}

// QueuePushExact queues the bounded-add script with the post (Exact): the
// push, the trim and the fallback TTL in one step. Its reply is the number
// of members added.
func (m Inboxes) QueuePushExact(ctx context.Context, pipe redis.Pipeliner, user int64, p InboxPush) *redis.Cmd {
	return queueBounded(ctx, pipe, m.keys.Inbox(user), p.args)
}

// QueueCheck queues a sampled push's size and TTL check: ZCARD, and EXPIRE
// NX with the inbox TTL (the fallback for an inbox that pushes created).
// Give the reply to NeedsTrim.
func (m Inboxes) QueueCheck(ctx context.Context, pipe redis.Pipeliner, user int64, p InboxPush) *redis.IntCmd {
	k := m.keys.Inbox(user)
	c := pipe.ZCard(ctx, k)
	pipe.ExpireNX(ctx, k, p.ttl)
	return c
}

// NeedsTrim reports whether a QueueCheck reply found the inbox over the
// trim band (Policy.InboxTrimOver, both sentinels assumed).
func (p InboxPush) NeedsTrim(card *redis.IntCmd) bool { return card.Val() > p.over }

// trimScript trims an inbox that a sampled push found over InboxMax -
// slack + band (Config.InboxTrimBand): the
// hot path's trim (backfills and exact trims use boundedAddScript, with the
// same bound rule). It keeps the newest ARGV[1] (InboxMax - slack) real
// entries, raises ~floor to the highest
// score it cuts (never lowers it: ZADD GT), and removes everything below
// ~floor, late pushes included: the same result as boundedAddScript
// without entries to add. It moves ~floor first and cuts by rank below it,
// so Redis walks only the head of the listpack (the entries cut), where
// boundedAddScript's ZADD of a ~floor it had just removed scanned the
// whole inbox; one key, so valid on Redis Cluster. An inbox that expired
// meanwhile stays gone (nothing is written when the ZRANGE finds nothing).
// An inbox at or under its bound only loses what lies below ~floor.
//
// ~floor sorts after every post id of the same score ('~' is above the
// digits), so "below ~floor by rank" is "at or below the floor's score",
// ties included, as boundedAddScript's ZREMRANGEBYSCORE -inf floor.
//
// KEYS[1] the inbox; ARGV[1] the real entries to keep. Returns the number
// of members cut.
var trimScript = redis.NewScript(lua(`
local k = KEYS[1]
local n = tonumber(ARGV[1]) + 1
local top = redis.call('ZRANGE', k, -1, -1)
if top[1] == $BUILT then n = n + 1 end
local c = redis.call('ZRANGE', k, -n, -n, 'WITHSCORES')
if c[1] and c[1] ~= $BUILT then redis.call('ZADD', k, 'GT', c[2], $FLOOR) end
local r = redis.call('ZRANK', k, $FLOOR)
if not r then return 0 end
if r > 0 then redis.call('ZREMRANGEBYRANK', k, 0, r - 1) end
return r
`))

// QueueTrim queues trimScript on user's inbox: it keeps the newest
// Policy.InboxKeep real entries.
func (m Inboxes) QueueTrim(ctx context.Context, pipe redis.Pipeliner, user int64) *redis.Cmd {
	return trimScript.EvalSha(ctx, pipe, []string{m.keys.Inbox(user)}, m.pol.InboxKeep())
}

// boundedArgs returns the bounded-add script's arguments for an inbox: the
// entries a trim keeps (InboxMax - slack) and the band, so the script
// trims when over InboxMax - slack + band, back to InboxMax - slack, as
// the hot path does with trimScript; then the floor raise
// (unconditional), no ~built, the fallback TTL, then the pairs.
func (m Inboxes) boundedArgs(pairs []any, raiseTo string) []any {
	ttl := int64(m.pol.InboxTTL() / time.Second)
	return append([]any{m.pol.InboxKeep(), m.pol.InboxTrimBand, raiseTo, "", "0", ttl}, pairs...)
}

// InboxBackfill is what a follow (or a downward celebrity crossing) copies
// into inboxes, prepared once and queued per inbox.
type InboxBackfill struct{ args []any }

// NewBackfill prepares the copy of posts (the followee's newest) and, when
// raise is set (the followee has more posts than were copied), the floor
// raise to floorMs, the oldest copied score. The floor is raised
// unconditionally, not only when more posts lie above the inbox's current
// floor: the conditional rule would leave a floor that depends on which
// partition's pushes and trims came first.
func (m Inboxes) NewBackfill(posts []Entry, floorMs int64, raise bool) InboxBackfill {
	pairs := make([]any, 0, 2*len(posts))
	for _, e := range posts {
		pairs = append(pairs, e.Ms, itoa(e.ID))
	}
	raiseTo := ""
	if raise {
		raiseTo = itoa(floorMs)
	}
	return InboxBackfill{args: m.boundedArgs(pairs, raiseTo)}
}

// QueueBackfill queues the bounded-add script with b on user's inbox. Its
// reply is the number of members added.
func (m Inboxes) QueueBackfill(ctx context.Context, pipe redis.Pipeliner, user int64, b InboxBackfill) *redis.Cmd {
	return queueBounded(ctx, pipe, m.keys.Inbox(user), b.args)
}

// Posts returns the post ids in user's inbox, whatever their score
// (sentinels left out).
func (m Inboxes) Posts(ctx context.Context, rdb redis.Cmdable, user int64) ([]int64, error) {
	all, err := rdb.ZRange(ctx, m.keys.Inbox(user), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("read inbox of %d: %w", user, err)
	}
	ids := make([]int64, 0, len(all))
	for _, s := range all {
		if id, err := strconv.ParseInt(s, 10, 64); err == nil && !IsSentinel(s) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Remove removes posts from user's inbox; the floor is left alone (what
// is removed must not be shown anyway).
func (m Inboxes) Remove(ctx context.Context, rdb redis.UniversalClient, user int64, posts []int64) error {
	if len(posts) == 0 {
		return nil
	}
	members := make([]any, len(posts))
	for i, p := range posts {
		members[i] = itoa(p)
	}
	return rdb.ZRem(ctx, m.keys.Inbox(user), members...).Err()
}

// QueueRemove queues the removal of post from user's inbox (ZREM never
// creates a key).
func (m Inboxes) QueueRemove(ctx context.Context, pipe redis.Pipeliner, user, post int64) {
	pipe.ZRem(ctx, m.keys.Inbox(user), itoa(post))
}

// Touch moves user's inbox expiry to Policy.InboxTTL from now, after an
// activity write (EXPIRE on a missing inbox does nothing).
func (m Inboxes) Touch(ctx context.Context, rdb redis.Cmdable, user int64) error {
	return rdb.Expire(ctx, m.keys.Inbox(user), m.pol.InboxTTL()).Err()
}

// WriteRebuilt writes a cold rebuild: posts (user's followees' and user's
// newest, newest first, at most Policy.InboxMax), then ~floor at the
// oldest score when the rebuild was cut at the bound (its own millisecond
// may have lost same-ms posts to the cut), ~built and the inbox TTL.
//
// It only adds (ZADD, floor with GT), never DEL: a push that landed
// between the caller's snapshot and this write must survive. The members,
// ~built and the expiry go in one MULTI (one key, one slot) so no reader
// sees ~built over a half-written inbox.
func (m Inboxes) WriteRebuilt(ctx context.Context, rdb redis.UniversalClient, user int64, posts []Entry) error {
	k := m.keys.Inbox(user)
	pipe := rdb.TxPipeline()
	if len(posts) > 0 {
		zs := make([]redis.Z, len(posts))
		for i, e := range posts {
			zs[i] = redis.Z{Score: float64(e.Ms), Member: itoa(e.ID)}
		}
		pipe.ZAdd(ctx, k, zs...)
	}
	if len(posts) >= m.pol.InboxMax {
		pipe.ZAddGT(ctx, k, redis.Z{Score: float64(posts[len(posts)-1].Ms), Member: SentinelFloor})
	}
	pipe.ZAdd(ctx, k, redis.Z{Score: math.Inf(1), Member: SentinelBuilt})
	pipe.Expire(ctx, k, m.pol.InboxTTL())
	_, err := pipe.Exec(ctx)
	return err
}

// QueueRead queues the read of user's inbox from fromMs (MaxScoreMs: the
// first page) with n entries, with ~floor and ~built.
func (m Inboxes) QueueRead(ctx context.Context, pipe redis.Pipeliner, user, fromMs int64, n int) SetRead {
	return queueSetRead(ctx, pipe, m.keys.Inbox(user), fromMs, n, true)
}

// Sampled reports whether the push of post to user checks the inbox's size
// and TTL (the sorted-set layout's sampled trims): true for one pair in
// every (on average), by a hash of the pair
// alone, so redeliveries and replays sample the same pairs.
func Sampled(post, user int64, every int) bool {
	if every <= 1 {
		return true
	}
	// splitmix64 finaliser over both ids: consecutive post and user ids
	// (Snowflake, sequences) spread evenly over the residues.
	h := uint64(post)*0x9e3779b97f4a7c15 ^ uint64(user)
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h%uint64(every) == 0
}
