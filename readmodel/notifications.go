package readmodel

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ProjectionNotifications is the notifications projection's name.
const ProjectionNotifications = "notifications"

// Notification types, the first byte of a notification's member.
const (
	NotifyLike   byte = 1 // someone liked your post (post = the liked post)
	NotifyRepost byte = 2 // someone reposted your post (post = the original)
	NotifyQuote  byte = 3 // someone quoted your post (post = the quote)
	NotifyReply  byte = 4 // someone replied to your post (post = the reply)
	NotifyFollow byte = 5 // someone followed you (no post)
)

// DefaultNotificationsMax is the default bound of one user's notifications:
// the newest are kept, the older ones are gone. With the floor sentinel a
// full set holds 121 members, under Redis's default
// zset-max-listpack-entries (128), so it stays a listpack (about a quarter
// of a skiplist's bytes; docs/projections.md, "Notifications").
const DefaultNotificationsMax = 120

// MaxNotificationsMax is the largest bound Policy.Validate takes: a set
// past zset-max-listpack-entries (1024 where scripts/prepare.sh sets it,
// 128 by Redis's default) is a skiplist, about four times the bytes.
const MaxNotificationsMax = 1000

// DefaultNotificationGuardTTL is how long a user's guard hash (the pair
// versions of undone notifications) lives after its last write.
const DefaultNotificationGuardTTL = 24 * time.Hour

// notifFloor is the floor sentinel of a notifications set: the one member
// of one byte (0), whose score F says the set is complete only above F.
const notifFloor = "\x00"

// TypeName is the API's name of a notification type.
func TypeName(t byte) string {
	switch t {
	case NotifyLike:
		return "like"
	case NotifyRepost:
		return "repost"
	case NotifyQuote:
		return "quote"
	case NotifyReply:
		return "reply"
	case NotifyFollow:
		return "follow"
	}
	return ""
}

// Notification is one notification of a user: who did what, to which post
// (0 for a follow), at which millisecond.
type Notification struct {
	Type  byte
	Actor int64
	Post  int64
	MS    int64
}

// Member is n's sorted-set member: the type byte, the actor's id, then
// (not for a follow) the post's id, both big-endian: 17 bytes, 9 for a
// follow. The same do and its undo build the same member, so an undo
// removes exactly what the do added.
func (n Notification) Member() string {
	b := make([]byte, 0, 17)
	b = append(b, n.Type)
	b = binary.BigEndian.AppendUint64(b, uint64(n.Actor))
	if n.Type != NotifyFollow {
		b = binary.BigEndian.AppendUint64(b, uint64(n.Post))
	}
	return string(b)
}

// parseMember is Member's inverse (MS is left 0).
func parseMember(m string) (Notification, bool) {
	switch {
	case len(m) == 9 && m[0] == NotifyFollow:
		return Notification{Type: NotifyFollow, Actor: int64(binary.BigEndian.Uint64([]byte(m[1:])))}, true
	case len(m) == 17 && m[0] >= NotifyLike && m[0] <= NotifyReply:
		return Notification{Type: m[0], Actor: int64(binary.BigEndian.Uint64([]byte(m[1:9]))),
			Post: int64(binary.BigEndian.Uint64([]byte(m[9:])))}, true
	}
	return Notification{}, false
}

// ID is n's opaque id, also the cursor after it and the notifications
// marker: base64url of its millisecond (8 bytes, big-endian) and its
// member. Ids order as the list does (OrderKey).
func (n Notification) ID() string {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 25), uint64(n.MS))
	return base64.RawURLEncoding.EncodeToString(append(b, n.Member()...))
}

// ErrBadNotificationID is returned for an id or cursor that is not one.
var ErrBadNotificationID = errors.New("bad notification id")

// ParseNotificationID decodes an id made by ID.
func ParseNotificationID(s string) (Notification, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 9 {
		return Notification{}, ErrBadNotificationID
	}
	n, ok := parseMember(string(b[8:]))
	if !ok {
		return Notification{}, ErrBadNotificationID
	}
	n.MS = int64(binary.BigEndian.Uint64(b[:8]))
	if n.MS < 0 || n.Actor <= 0 || (n.Type != NotifyFollow && n.Post <= 0) {
		return Notification{}, ErrBadNotificationID
	}
	return n, nil
}

// OrderKey is n's place in the list as PostgreSQL compares it (a marker
// moves forward with GREATEST): the millisecond, then the member's bytes.
func (n Notification) OrderKey() (int64, []byte) { return n.MS, []byte(n.Member()) }

// Newer reports whether n comes before (is newer than) o in the list.
func (n Notification) Newer(o Notification) bool {
	if n.MS != o.MS {
		return n.MS > o.MS
	}
	return n.Member() > o.Member()
}

// Notifications is the notifications read model, `notif:{u}`: a sorted set
// per user, score = the notification's millisecond, member = Member, with
// a floor sentinel; and `notifv:{u}`, the guard of undone pairs (same
// hash tag). With a horizon (WithHorizon) a set holds only the recent
// ones. See docs/projections.md, "Notifications".
type Notifications struct {
	keys Keys
	max  int
	ttl  time.Duration
	hz   Horizon
}

// NewNotifications returns the notifications' operations under keys,
// bounded to max per user (DefaultNotificationsMax when 0), guards kept
// for guardTTL after their last write (DefaultNotificationGuardTTL when 0),
// without a horizon (WithHorizon).
func NewNotifications(keys Keys, max int, guardTTL time.Duration) Notifications {
	if max <= 0 {
		max = DefaultNotificationsMax
	}
	if guardTTL <= 0 {
		guardTTL = DefaultNotificationGuardTTL
	}
	return Notifications{keys: keys, max: max, ttl: guardTTL}
}

// WithHorizon returns m keeping a notification for h.H after its
// millisecond (the policy's PostHorizon: a notification's post older than
// that is read from PostgreSQL anyway). A write trims what is older (the
// floor rises over it, as the bound's trim raises it); a set expires
// when its newest notification leaves the horizon (PEXPIREAT, moved
// only later); a do older than the horizon, and an undo recorded before
// it, write nothing; the builds write only the horizon; a read leaves
// out what is older, and the reader continues from PostgreSQL. The zero
// Horizon keeps the newest Max of any age, without expiry.
func (m Notifications) WithHorizon(h Horizon) Notifications { m.hz = h; return m }

// Horizon is the horizon m writes and reads with.
func (m Notifications) Horizon() Horizon { return m.hz }

// Max is the bound per user.
func (m Notifications) Max() int { return m.max }

// Edge is the horizon's edge by m's clock (Unix ms): a notification at or
// below it is past the horizon; math.MinInt64 without a horizon.
func (m Notifications) Edge() int64 {
	if !m.hz.On() {
		return math.MinInt64
	}
	return m.hz.nowMs() - m.hz.H.Milliseconds()
}

// Key is user's notifications set.
func (m Notifications) Key(user int64) string {
	return m.keys.tagged(ProjectionNotifications, "notif:", user, "")
}

// guardKey is user's guard hash: field = a member, value = the pair's
// stream version last applied, written by undos and by dos above version
// 1 (a first do needs none: no older event of its pair exists).
func (m Notifications) guardKey(user int64) string {
	return m.keys.tagged(ProjectionNotifications, "notifv:", user, "")
}

// notifScript applies a do ("a") or an undo ("r") of one pair to a user's
// set. KEYS: the set, the guard hash, the removals stream. ARGV: op,
// member, score, the pair's
// stream version, the bound, the guard's TTL in ms, the horizon's edge
// (ms) and the horizon (ms; 0: none). An event at or below the pair's
// guarded version changes nothing (a late event of a moved partition);
// an add at or below the floor neither (it was trimmed away or older
// than what the set keeps), nor an undo of what the set does not hold.
// A change then trims: with a horizon, every entry at or below the edge;
// past the bound, the oldest entries. In a built set (one with the floor
// sentinel) the floor rises to the highest score removed (every entry at
// it goes too); a set not built stays so. With a horizon the set then
// expires at its newest entry's ms + horizon (at the edge + 2 horizons,
// now + horizon, when it holds none), or later if it already did.
// An undo that removes an entry appends it to the removals stream
// (KEYS[3], notification_removals.go; ARGV[9] its lifetime in ms,
// ARGV[10] the MINID it is trimmed to) in the same step. Returns 1 when
// the set changed.
var notifScript = redis.NewScript(`
local v = tonumber(ARGV[4])
local g = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')
if v <= g then return 0 end
if ARGV[1] == 'r' or v > 1 then
  redis.call('HSET', KEYS[2], ARGV[2], v)
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
end
local f = redis.call('ZSCORE', KEYS[1], '\0')
if f then f = tonumber(f) end
if ARGV[1] == 'r' then
  local at = redis.call('ZSCORE', KEYS[1], ARGV[2])
  if not at then return 0 end
  redis.call('ZREM', KEYS[1], ARGV[2])
  redis.call('XADD', KEYS[3], 'MINID', '~', ARGV[10], '*', 'm', ARGV[2], 's', at)
  redis.call('PEXPIRE', KEYS[3], ARGV[9])
else
  local s = tonumber(ARGV[3])
  if f and s <= f then return 0 end
  redis.call('ZADD', KEYS[1], s, ARGV[2])
end
local h = tonumber(ARGV[8])
local exp = redis.call('PEXPIRETIME', KEYS[1])
if f then redis.call('ZREM', KEYS[1], '\0') end
local cut = nil
if h > 0 then
  local old = redis.call('ZRANGE', KEYS[1], ARGV[7], '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, 1, 'WITHSCORES')
  if #old > 0 then
    cut = tonumber(old[2])
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', old[2])
  end
end
local excess = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[5])
if excess > 0 then
  if f then
    local c = redis.call('ZRANGE', KEYS[1], excess - 1, excess - 1, 'WITHSCORES')
    cut = tonumber(c[2])
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', c[2])
  else
    redis.call('ZREMRANGEBYRANK', KEYS[1], 0, excess - 1)
  end
end
if f then
  if cut and cut > f then f = cut end
  redis.call('ZADD', KEYS[1], f, '\0')
end
if h > 0 and redis.call('EXISTS', KEYS[1]) == 1 then
  local at = tonumber(ARGV[7]) + 2 * h
  local top = redis.call('ZRANGE', KEYS[1], 0, 0, 'REV', 'WITHSCORES')
  if top[1] ~= '\0' then at = tonumber(top[2]) + h end
  if exp > at then at = exp end
  redis.call('PEXPIREAT', KEYS[1], at)
end
return 1
`)

// notifBuildScript completes a set that is not built from the truth, and
// marks it built. KEYS: the set, the guard hash. ARGV: the floor (the
// truth's cut: entries at or below it are not kept), the bound, the
// horizon's edge (ms) and the horizon (ms; 0: none), then member and
// score pairs. It only adds (ZADD NX), so what the projector applied
// meanwhile stays; a pair with a guard (an undo, or a do above version 1,
// applied since the truth was read or before) is left to the projector:
// the truth's entry may be older than the pair's last event. What the
// projector added at or below the edge goes (the floor is above every
// older notification of the truth already). With a horizon the set
// expires as notifScript leaves it. A set already built is left alone.
// Returns 1 when it built the set.
var notifBuildScript = redis.NewScript(`
if redis.call('ZSCORE', KEYS[1], '\0') then return 0 end
local floor = tonumber(ARGV[1])
for i = 5, #ARGV, 2 do
  local s = tonumber(ARGV[i + 1])
  if s > floor and not redis.call('HGET', KEYS[2], ARGV[i]) then
    redis.call('ZADD', KEYS[1], 'NX', s, ARGV[i])
  end
end
local h = tonumber(ARGV[4])
local exp = redis.call('PEXPIRETIME', KEYS[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', floor)
if h > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
end
local excess = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[2])
if excess > 0 then
  local cut = redis.call('ZRANGE', KEYS[1], excess - 1, excess - 1, 'WITHSCORES')
  floor = tonumber(cut[2])
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', floor)
end
redis.call('ZADD', KEYS[1], floor, '\0')
if h > 0 then
  local at = tonumber(ARGV[3]) + 2 * h
  local top = redis.call('ZRANGE', KEYS[1], 0, 0, 'REV', 'WITHSCORES')
  if top[1] ~= '\0' then at = tonumber(top[2]) + h end
  if exp > at then at = exp end
  redis.call('PEXPIREAT', KEYS[1], at)
end
return 1
`)

func init() { scripts = append(scripts, notifScript, notifBuildScript) }

// Add applies the do of n to user's set at the pair's stream version;
// it reports whether the set changed (false: already there, guarded,
// below the floor, past the horizon: then nothing is sent).
func (m Notifications) Add(ctx context.Context, rdb redis.Scripter, user int64, n Notification, version int64) (bool, error) {
	if n.MS <= m.Edge() {
		return false, nil
	}
	return m.run(ctx, rdb, "a", user, n, version)
}

// Remove applies the undo of n (its type, actor and post) at the pair's
// stream version. n.MS is the undo's own millisecond, 0 when unknown: an
// undo recorded at or below the horizon's edge writes nothing (what it
// undoes is older still, past the horizon, and so is any late do of its
// pair).
func (m Notifications) Remove(ctx context.Context, rdb redis.Scripter, user int64, n Notification, version int64) (bool, error) {
	if n.MS != 0 && n.MS <= m.Edge() {
		return false, nil
	}
	return m.run(ctx, rdb, "r", user, n, version)
}

// horizonArgs are the scripts' horizon arguments: the edge and the
// horizon in ms (0, 0 without one).
func (m Notifications) horizonArgs() (edge, h int64) {
	if !m.hz.On() {
		return 0, 0
	}
	return m.Edge(), m.hz.H.Milliseconds()
}

func (m Notifications) run(ctx context.Context, rdb redis.Scripter, op string, user int64, n Notification, version int64) (bool, error) {
	edge, h := m.horizonArgs()
	r, err := notifScript.Run(ctx, rdb, []string{m.Key(user), m.guardKey(user), m.removalsKey(user)},
		op, n.Member(), n.MS, version, m.max, m.ttl.Milliseconds(), edge, h,
		RemovalsKept.Milliseconds(), time.Now().Add(-RemovalsKept).UnixMilli()).Int()
	if err != nil {
		return false, fmt.Errorf("notification %s of %d: %w", op, user, err)
	}
	return r == 1, nil
}

// WriteRebuilt replaces user's set with ns (a bulk build's: the user's
// live notifications, any order) and marks it built: the newest Max
// inside the horizon are kept; the floor is the score of the newest one
// left out (entries at it are left out too), as the projector's trims
// leave it, else 0 (complete). With a horizon the set expires at its
// newest entry's ms + horizon, and a user with none inside the horizon
// gets no set (the query side completes it at its first read).
func (m Notifications) WriteRebuilt(ctx context.Context, pipe redis.Pipeliner, user int64, ns []Notification) {
	key := m.Key(user)
	pipe.Del(ctx, key)
	sorted := append([]Notification(nil), ns...)
	sortNewestFirst(sorted)
	floor, keep := cut(sorted, m.max, m.Edge())
	if m.hz.On() && len(keep) == 0 {
		return
	}
	zs := make([]redis.Z, 0, len(keep)+1)
	for _, n := range keep {
		zs = append(zs, redis.Z{Score: float64(n.MS), Member: n.Member()})
	}
	zs = append(zs, redis.Z{Score: float64(floor), Member: notifFloor})
	pipe.ZAdd(ctx, key, zs...)
	if m.hz.On() {
		pipe.PExpireAt(ctx, key, time.UnixMilli(keep[0].MS+m.hz.H.Milliseconds()))
	}
}

// cut returns the floor and the entries kept of newest-first ns under
// bound max and the horizon's edge: those above the edge, the floor the
// newest at or below it (0 when none); past the bound, those above the
// (max+1)-th's score, which is then the floor.
func cut(ns []Notification, max int, edge int64) (int64, []Notification) {
	in := 0
	for in < len(ns) && ns[in].MS > edge {
		in++
	}
	floor, keep := int64(0), ns[:in]
	if in < len(ns) {
		floor = ns[in].MS
	}
	if len(keep) <= max {
		return floor, keep
	}
	floor = keep[max].MS
	keep = keep[:max]
	for len(keep) > 0 && keep[len(keep)-1].MS <= floor {
		keep = keep[:len(keep)-1]
	}
	return floor, keep
}

// Complete builds user's set from truth (the user's newest live
// notifications, more than Max of them when there are more, and the
// newest older than the horizon when there is one; any order) unless it
// is built already: the query side's cold path, when it finds a set
// without the floor sentinel (lost, expired, or made by the projector
// alone). It only adds, so it is right whatever the projector applies
// meanwhile (notifBuildScript). It reports whether it built the set.
func (m Notifications) Complete(ctx context.Context, rdb redis.Scripter, user int64, truth []Notification) (bool, error) {
	sorted := append([]Notification(nil), truth...)
	sortNewestFirst(sorted)
	floor, keep := cut(sorted, m.max, m.Edge())
	edge, h := m.horizonArgs()
	args := make([]any, 0, 4+2*len(keep))
	args = append(args, floor, m.max, edge, h)
	for _, n := range keep {
		args = append(args, n.Member(), n.MS)
	}
	r, err := notifBuildScript.Run(ctx, rdb, []string{m.Key(user), m.guardKey(user)}, args...).Int()
	if err != nil {
		return false, fmt.Errorf("build notifications of %d: %w", user, err)
	}
	return r == 1, nil
}

func sortNewestFirst(ns []Notification) {
	// Insertion of a few hundred at most per user; slices.SortFunc would do
	// as well, this keeps Newer the one comparison.
	for i := 1; i < len(ns); i++ {
		for j := i; j > 0 && ns[j].Newer(ns[j-1]); j-- {
			ns[j], ns[j-1] = ns[j-1], ns[j]
		}
	}
}

// NotificationRange is what one read of a user's set returned: entries
// newest first, and the floor. Built is false for a set without the floor
// sentinel: lost, expired, or made by the projector alone, so not known
// to be complete.
type NotificationRange struct {
	Items []Notification
	// Floor is what the set is complete above: its floor sentinel's
	// score, or the horizon's edge when that is higher (an entry at or
	// below it is left out of Items); math.MinInt64 for a set not built
	// without a horizon.
	Floor int64
	Built bool
	// Older reports that live notifications at or below Floor may exist
	// (the floor sentinel is above 0, or the read met an entry past the
	// horizon that no write has trimmed yet): a reader that reaches
	// Floor continues from PostgreSQL. A built set with floor 0 and
	// nothing past the horizon is the user's whole list.
	Older bool
	// More is true when the read stopped at its count (more may follow).
	More bool
}

// NotificationRead is a queued read (QueueRange); Result decodes it.
type NotificationRead struct {
	rng   *redis.ZSliceCmd
	floor *redis.FloatCmd
	count int
	edge  int64
}

// QueueRange queues on pipe a read of user's set: at most count entries
// (0: all) at or below the millisecond atMost (math.MaxInt64: from the
// newest), newest first, skipping offset of them, and the floor.
func (m Notifications) QueueRange(ctx context.Context, pipe redis.Pipeliner, user, atMost int64, offset, count int) NotificationRead {
	key := m.Key(user)
	max := "+inf"
	if atMost != math.MaxInt64 {
		max = strconv.FormatInt(atMost, 10)
	}
	return NotificationRead{
		rng: pipe.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: key, Start: max, Stop: "-inf", ByScore: true, Rev: true,
			Offset: int64(offset), Count: int64(count)}),
		floor: pipe.ZScore(ctx, key, notifFloor),
		count: count,
		edge:  m.Edge(),
	}
}

// Result is the queued read's answer, the floor's entry left out.
func (r NotificationRead) Result() (NotificationRange, error) {
	out := NotificationRange{Floor: math.MinInt64}
	zs, err := r.rng.Result()
	if err != nil {
		return out, err
	}
	f, err := r.floor.Result()
	switch {
	case err == nil:
		out.Floor, out.Built = int64(f), true
		out.Older = f > 0
	case !errors.Is(err, redis.Nil):
		return out, err
	}
	if r.edge > out.Floor {
		out.Floor = r.edge
	}
	out.More = r.count > 0 && len(zs) == r.count
	for _, z := range zs {
		m, _ := z.Member.(string)
		n, ok := parseMember(m)
		if !ok {
			continue
		}
		if int64(z.Score) <= out.Floor {
			out.Older = out.Older || int64(z.Score) <= r.edge
			continue
		}
		n.MS = int64(z.Score)
		out.Items = append(out.Items, n)
	}
	return out, nil
}

// All reads user's whole set, newest first, and its floor (the oracle's
// and the tests' read).
func (m Notifications) All(ctx context.Context, rdb redis.UniversalClient, user int64) (NotificationRange, error) {
	pipe := rdb.Pipeline()
	r := m.QueueRange(ctx, pipe, user, math.MaxInt64, 0, 0)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return NotificationRange{}, err
	}
	return r.Result()
}

// MemoryUsage is MEMORY USAGE of user's set in bytes (0 when absent).
func (m Notifications) MemoryUsage(ctx context.Context, rdb redis.UniversalClient, user int64) (int64, error) {
	n, err := rdb.MemoryUsage(ctx, m.Key(user)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}
