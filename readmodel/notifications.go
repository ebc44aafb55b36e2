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
// hash tag). See docs/projections.md, "Notifications".
type Notifications struct {
	keys Keys
	max  int
	ttl  time.Duration
}

// NewNotifications returns the notifications' operations under keys,
// bounded to max per user (DefaultNotificationsMax when 0), guards kept
// for guardTTL after their last write (DefaultNotificationGuardTTL when 0).
func NewNotifications(keys Keys, max int, guardTTL time.Duration) Notifications {
	if max <= 0 {
		max = DefaultNotificationsMax
	}
	if guardTTL <= 0 {
		guardTTL = DefaultNotificationGuardTTL
	}
	return Notifications{keys: keys, max: max, ttl: guardTTL}
}

// Max is the bound per user.
func (m Notifications) Max() int { return m.max }

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
// set. KEYS: the set, the guard hash. ARGV: op, member, score, the pair's
// stream version, the bound, the guard's TTL in ms. An event at or below
// the pair's guarded version changes nothing (a late event of a moved
// partition); an add at or below the floor neither (it was trimmed away
// or older than what the set keeps). Past the bound the oldest entries
// go; in a built set (one with the floor sentinel) the floor rises to the
// highest score removed (every entry at it goes too); a set not built
// stays so. An undo that removes an entry appends it to the removals
// stream (KEYS[3], notification_removals.go; ARGV[7] its lifetime in ms,
// ARGV[8] the MINID it is trimmed to) in the same step. Returns 1 when
// the set changed.
var notifScript = redis.NewScript(`
local v = tonumber(ARGV[4])
local g = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')
if v <= g then return 0 end
if ARGV[1] == 'r' or v > 1 then
  redis.call('HSET', KEYS[2], ARGV[2], v)
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
end
if ARGV[1] == 'r' then
  local at = redis.call('ZSCORE', KEYS[1], ARGV[2])
  if not at then return 0 end
  redis.call('ZREM', KEYS[1], ARGV[2])
  redis.call('XADD', KEYS[3], 'MINID', '~', ARGV[8], '*', 'm', ARGV[2], 's', at)
  redis.call('PEXPIRE', KEYS[3], ARGV[7])
  return 1
end
local s = tonumber(ARGV[3])
local f = redis.call('ZSCORE', KEYS[1], '\0')
if f and s <= tonumber(f) then return 0 end
redis.call('ZADD', KEYS[1], s, ARGV[2])
local hasF = 0
if f then hasF = 1 end
local excess = redis.call('ZCARD', KEYS[1]) - hasF - tonumber(ARGV[5])
if excess > 0 then
  if hasF == 0 then
    redis.call('ZREMRANGEBYRANK', KEYS[1], 0, excess - 1)
  else
    local cut = redis.call('ZRANGE', KEYS[1], excess, excess, 'WITHSCORES')
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cut[2])
    redis.call('ZADD', KEYS[1], cut[2], '\0')
  end
end
return 1
`)

// notifBuildScript completes a set that is not built from the truth, and
// marks it built. KEYS: the set, the guard hash. ARGV: the floor (the
// truth's cut: entries at or below it are not kept), the bound, then
// member and score pairs. It only adds (ZADD NX), so what the projector
// applied meanwhile stays; a pair with a guard (an undo, or a do above
// version 1, applied since the truth was read or before) is left to the
// projector: the truth's entry may be older than the pair's last event.
// A set already built is left alone. Returns 1 when it built the set.
var notifBuildScript = redis.NewScript(`
if redis.call('ZSCORE', KEYS[1], '\0') then return 0 end
local floor = tonumber(ARGV[1])
for i = 3, #ARGV, 2 do
  local s = tonumber(ARGV[i + 1])
  if s > floor and not redis.call('HGET', KEYS[2], ARGV[i]) then
    redis.call('ZADD', KEYS[1], 'NX', s, ARGV[i])
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', floor)
local excess = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[2])
if excess > 0 then
  local cut = redis.call('ZRANGE', KEYS[1], excess - 1, excess - 1, 'WITHSCORES')
  floor = tonumber(cut[2])
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', floor)
end
redis.call('ZADD', KEYS[1], floor, '\0')
return 1
`)

func init() { scripts = append(scripts, notifScript, notifBuildScript) }

// Add applies the do of n to user's set at the pair's stream version;
// it reports whether the set changed (false: already there, guarded,
// below the floor).
func (m Notifications) Add(ctx context.Context, rdb redis.Scripter, user int64, n Notification, version int64) (bool, error) {
	return m.run(ctx, rdb, "a", user, n, version)
}

// Remove applies the undo of n (only its type, actor and post matter) at
// the pair's stream version.
func (m Notifications) Remove(ctx context.Context, rdb redis.Scripter, user int64, n Notification, version int64) (bool, error) {
	return m.run(ctx, rdb, "r", user, n, version)
}

func (m Notifications) run(ctx context.Context, rdb redis.Scripter, op string, user int64, n Notification, version int64) (bool, error) {
	r, err := notifScript.Run(ctx, rdb, []string{m.Key(user), m.guardKey(user), m.removalsKey(user)},
		op, n.Member(), n.MS, version, m.max, m.ttl.Milliseconds(),
		RemovalsKept.Milliseconds(), time.Now().Add(-RemovalsKept).UnixMilli()).Int()
	if err != nil {
		return false, fmt.Errorf("notification %s of %d: %w", op, user, err)
	}
	return r == 1, nil
}

// WriteRebuilt replaces user's set with ns (a bulk build's: the user's
// live notifications, any order) and marks it built: the newest Max are
// kept, and when more exist the floor is the score of the newest one left
// out (entries at it are left out too), as the projector's trim leaves
// it; else the floor is 0 (complete).
func (m Notifications) WriteRebuilt(ctx context.Context, pipe redis.Pipeliner, user int64, ns []Notification) {
	key := m.Key(user)
	pipe.Del(ctx, key)
	sorted := append([]Notification(nil), ns...)
	sortNewestFirst(sorted)
	floor, keep := cut(sorted, m.max)
	zs := make([]redis.Z, 0, len(keep)+1)
	for _, n := range keep {
		zs = append(zs, redis.Z{Score: float64(n.MS), Member: n.Member()})
	}
	zs = append(zs, redis.Z{Score: float64(floor), Member: notifFloor})
	pipe.ZAdd(ctx, key, zs...)
}

// cut returns the floor and the entries kept of newest-first ns under
// bound max: all with floor 0 when they fit, else those above the
// (max+1)-th's score, which is the floor.
func cut(ns []Notification, max int) (int64, []Notification) {
	if len(ns) <= max {
		return 0, ns
	}
	floor := ns[max].MS
	keep := ns[:max]
	for len(keep) > 0 && keep[len(keep)-1].MS <= floor {
		keep = keep[:len(keep)-1]
	}
	return floor, keep
}

// Complete builds user's set from truth (the user's newest live
// notifications, more than Max of them when there are more, any order)
// unless it is built already: the query side's cold path, when it finds a
// set without the floor sentinel (lost, or made by the projector alone).
// It only adds, so it is right whatever the projector applies meanwhile
// (notifBuildScript). It reports whether it built the set.
func (m Notifications) Complete(ctx context.Context, rdb redis.Scripter, user int64, truth []Notification) (bool, error) {
	sorted := append([]Notification(nil), truth...)
	sortNewestFirst(sorted)
	floor, keep := cut(sorted, m.max)
	args := make([]any, 0, 2+2*len(keep))
	args = append(args, floor, m.max)
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
// sentinel: lost, or made by the projector alone, so not known to be
// complete (Floor is then math.MinInt64).
type NotificationRange struct {
	Items []Notification
	Floor int64
	Built bool
	// More is true when the read stopped at its count (more may follow).
	More bool
}

// NotificationRead is a queued read (QueueRange); Result decodes it.
type NotificationRead struct {
	rng   *redis.ZSliceCmd
	floor *redis.FloatCmd
	count int
}

// QueueRange queues on pipe a read of user's set: at most count entries
// at or below the millisecond atMost (math.MaxInt64: from the newest),
// newest first, skipping offset of them, and the floor.
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
	case !errors.Is(err, redis.Nil):
		return out, err
	}
	out.More = len(zs) == r.count
	for _, z := range zs {
		m, _ := z.Member.(string)
		n, ok := parseMember(m)
		if !ok || int64(z.Score) <= out.Floor {
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
	r := m.QueueRange(ctx, pipe, user, math.MaxInt64, 0, m.max+1)
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
