package readmodel

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// Follows is the follow graph read model: `followers:{a}` (a hash: the
// follower count in field "count", and per follower the last applied
// stream version of the pair), `following:{u}` (a set: the accounts u
// follows) and `following_v:{u}` (a hash: per followee, u's last applied
// stream version of the pair). Follow-pair stream versions alternate
// Followed (odd), Unfollowed (even), so each script applies an event at
// most once.
//
// Each hash is complete only with its ~built field, which only a build
// from the log writes (the bulk build of `feed rebuild followers`, or
// WriteRebuiltFollowing, the query side's rebuild of one user's following
// state from PostgreSQL). The projector's scripts apply events to a hash
// with or without it: a key lost with Redis and recreated by the next
// follow holds that pair alone, reads as not built, and is rebuilt, never
// read as the user's whole graph.
type Follows struct{ keys Keys }

// NewFollows returns the follow graph operations under keys.
func NewFollows(keys Keys) Follows { return Follows{keys: keys} }

// followerCountScript applies one follow-pair event to the followee's
// followers hash, at most once: the hash keeps, per follower, the last
// applied stream version of the pair, checked and moved in the same atomic
// step as the count. Versions alternate Followed (odd), Unfollowed (even).
//
// KEYS[1] followers:{followee}; ARGV[1] follower id; ARGV[2] stream
// version; ARGV[3] '1' for Followed, '0' for Unfollowed.
// Returns the count after the event, or -1 when it was already applied.
var followerCountScript = redis.NewScript(lua(`
local k = KEYS[1]
local v = tonumber(ARGV[2])
local cur = tonumber(redis.call('HGET', k, ARGV[1]) or '0')
if v <= cur then return -1 end
local was = 0
if cur % 2 == 1 then was = 1 end
local now = tonumber(ARGV[3])
redis.call('HSET', k, ARGV[1], ARGV[2])
return redis.call('HINCRBY', k, 'count', now - was)
`))

// A mute lives in the muter's following state: following_v:{u} keeps,
// beside each followee's pair version, the muted account's mute-pair
// version under the field "m:" + id (odd: muted, even: unmuted), and
// following:{u} holds exactly the accounts u follows and does not mute.
// So the query side's one follow check (SMISMEMBER following:{u}) hides a
// muted author at no cost to readers who mute no one, and a mute of a
// celebrity stops its pull. The membership is a function of the two
// versions, so follow and mute events of a pair apply in any order, each
// at most once (membershipLua).

// MuteField is the field of following_v:{u} that holds the mute-pair
// version of muted.
func MuteField(muted int64) string { return "m:" + itoa(muted) }

// membershipLua sets followee a's membership of KEYS[1] from the versions
// in KEYS[2]: a member iff its follow version is odd and its mute version
// is not.
const membershipLua = `
local function membership(a)
  local f = tonumber(redis.call('HGET', KEYS[2], a) or '0')
  local m = tonumber(redis.call('HGET', KEYS[2], 'm:' .. a) or '0')
  if f % 2 == 1 and m % 2 == 0 then
    redis.call('SADD', KEYS[1], a)
  else
    redis.call('SREM', KEYS[1], a)
  end
end
`

// followingScript applies one follow-pair or mute-pair event to the
// follower's following set, guarded by its own per-pair version hash under
// the same hash tag.
//
// KEYS[1] following:{follower}; KEYS[2] following_v:{follower};
// ARGV[1] followee id; ARGV[2] stream version; ARGV[3] the version field
// (the followee id for a follow pair, MuteField for a mute pair).
// Returns 1 when applied, 0 when already applied.
var followingScript = redis.NewScript(lua(membershipLua + `
local v = tonumber(ARGV[2])
local cur = tonumber(redis.call('HGET', KEYS[2], ARGV[3]) or '0')
if v <= cur then return 0 end
redis.call('HSET', KEYS[2], ARGV[3], ARGV[2])
membership(ARGV[1])
return 1
`))

// QueueApply queues one follow-pair event (Followed when follow, else
// Unfollowed, at stream version) on the followee's count and the
// follower's following set: two scripts, each guarded by its pair's
// version. Run the pipeline with Exec (it loads the scripts on NOSCRIPT).
// The versions alternate Followed (odd) and Unfollowed (even), so follow
// says nothing the version does not; it is checked against it.
func (m Follows) QueueApply(ctx context.Context, pipe redis.Pipeliner, follower, followee, version int64, follow bool) {
	f := "0"
	if follow {
		f = "1"
	}
	followerCountScript.EvalSha(ctx, pipe, []string{m.keys.Followers(followee)}, itoa(follower), version, f)
	followingScript.EvalSha(ctx, pipe, []string{m.keys.Following(follower), m.keys.FollowingVersions(follower)},
		itoa(followee), version, itoa(followee))
}

// QueueApplyMute queues one mute-pair event (Muted or Unmuted, at stream
// version: odd muted, even unmuted) on the muter's following state. The
// followee counts do not change: a mute keeps the follow.
func (m Follows) QueueApplyMute(ctx context.Context, pipe redis.Pipeliner, muter, muted, version int64) {
	followingScript.EvalSha(ctx, pipe, []string{m.keys.Following(muter), m.keys.FollowingVersions(muter)},
		itoa(muted), version, MuteField(muted))
}

// FollowingKeys are the key names of user's following set and its version
// hash, for the query side's read cache.
func (m Follows) FollowingKeys(user int64) (set, versions string) {
	return m.keys.Following(user), m.keys.FollowingVersions(user)
}

// AppendFollowingKeys appends FollowingKeys(user), the set's then the
// versions', to b, and returns where the set's ends.
func (m Follows) AppendFollowingKeys(b []byte, user int64) ([]byte, int) {
	b = m.keys.appendTagged(b, ProjectionFollowers, "following:", user, "")
	n := len(b)
	return m.keys.appendTagged(b, ProjectionFollowers, "following_v:", user, ""), n
}

// QueueFollowingBuilt queues whether user's following state is complete:
// following_v:{u} has ~built. following_v:{u} outlives the set (a user
// who unfollowed their last account has no following:{u}), and a user
// who never followed anyone has a built hash with ~built alone.
func (m Follows) QueueFollowingBuilt(ctx context.Context, pipe redis.Pipeliner, user int64) *redis.BoolCmd {
	return pipe.HExists(ctx, m.keys.FollowingVersions(user), SentinelBuilt)
}

// FollowPair is one pair of a user's following state as PostgreSQL has it
// now: the followee and the pair stream's version (odd: followed). With
// Mute set it is a mute pair instead: the muted account and the mute
// pair's version (odd: muted).
type FollowPair struct {
	Followee, Version int64
	Mute              bool
}

// rebuiltFollowingScript merges a snapshot of user's followees and mutes
// into their following state and marks it built. Each pair is applied like
// an event (only when its version is newer than the hash's): a pair the
// projector moved after the snapshot keeps the projector's answer, and a
// pair unfollowed (or unmuted) before the snapshot but not yet applied
// leaves with its Unfollowed (Unmuted), which the projector applies later
// (it is newer than anything here). So the result is what applying every
// event would leave.
//
// KEYS[1] following:{u}; KEYS[2] following_v:{u}; ARGV[1] '1' to set
// ~built after this chunk; ARGV[2..] account, field, version triples
// (field: the account for a follow pair, MuteField for a mute pair;
// versions odd: the snapshot holds followed and muted pairs only).
var rebuiltFollowingScript = redis.NewScript(lua(membershipLua + `
for i = 2, #ARGV, 3 do
  local cur = tonumber(redis.call('HGET', KEYS[2], ARGV[i+1]) or '0')
  if tonumber(ARGV[i+2]) > cur then
    redis.call('HSET', KEYS[2], ARGV[i+1], ARGV[i+2])
    membership(ARGV[i])
  end
end
if ARGV[1] == '1' then redis.call('HSET', KEYS[2], $BUILT, '1') end
return 1
`))

// rebuildChunk bounds the pairs of one script call (a script blocks the
// Redis node while it runs).
const rebuildChunk = 512

// WriteRebuiltFollowing merges pairs, user's followees in a PostgreSQL
// snapshot, into their following state and then marks it built
// (rebuiltFollowingScript, in chunks: ~built comes with the last).
func (m Follows) WriteRebuiltFollowing(ctx context.Context, rdb redis.UniversalClient, user int64, pairs []FollowPair) error {
	keys := []string{m.keys.Following(user), m.keys.FollowingVersions(user)}
	for {
		chunk := pairs[:min(len(pairs), rebuildChunk)]
		pairs = pairs[len(chunk):]
		last := "0"
		if len(pairs) == 0 {
			last = "1"
		}
		args := make([]any, 0, 1+3*len(chunk))
		args = append(args, last)
		for _, p := range chunk {
			field := itoa(p.Followee)
			if p.Mute {
				field = MuteField(p.Followee)
			}
			args = append(args, itoa(p.Followee), field, p.Version)
		}
		if err := rebuiltFollowingScript.Run(ctx, rdb, keys, args...).Err(); err != nil {
			return err
		}
		if last == "1" {
			return nil
		}
	}
}

// QueueFollows queues whether user follows each of authors (decimal ids).
func (m Follows) QueueFollows(ctx context.Context, pipe redis.Pipeliner, user int64, authors ...any) *redis.BoolSliceCmd {
	return pipe.SMIsMember(ctx, m.keys.Following(user), authors...)
}

// FollowingScanCount is the COUNT of QueueFollowingScan: Redis's default
// set-max-intset-entries, the largest set of ids kept compact.
const FollowingScanCount = 512

// QueueFollowingScan queues the first SSCAN step of user's following set.
// A compact set (an intset: up to set-max-intset-entries ids) comes whole
// in it, with cursor 0; a larger one (a hash table) comes in part, with a
// cursor that is not 0 unless the step happened to cover every bucket.
// SSCAN is a read command: a tracking connection is told when the set
// changes after it.
func (m Follows) QueueFollowingScan(ctx context.Context, pipe redis.Pipeliner, user int64) *redis.ScanCmd {
	return pipe.SScan(ctx, m.keys.Following(user), 0, "", FollowingScanCount)
}

// FollowsEach reports whether user follows each of authors (decimal ids).
func (m Follows) FollowsEach(ctx context.Context, rdb redis.Cmdable, user int64, authors ...any) ([]bool, error) {
	return rdb.SMIsMember(ctx, m.keys.Following(user), authors...).Result()
}

// QueueBuildFollowers queues part of the bulk build of followee's
// followers hash: follower, version pairs (and, in the last call, "count"
// and ~built: BuildFollowersDone).
func (m Follows) QueueBuildFollowers(ctx context.Context, pipe redis.Pipeliner, followee int64, fields []any) {
	pipe.HSet(ctx, m.keys.Followers(followee), fields...)
}

// BuildFollowersDone is the last fields of a followers hash's bulk build:
// its count of current followers, and ~built.
func BuildFollowersDone(fields []any, count int64) []any {
	return append(fields, "count", count, SentinelBuilt, 1)
}

// QueueBuildFollowing queues part of the bulk build of follower's
// following state: followee, version pairs for the version hash, and the
// followees followed now for the set (none: no set written); last marks
// the state built.
func (m Follows) QueueBuildFollowing(ctx context.Context, pipe redis.Pipeliner, follower int64, versions, following []any, last bool) {
	if last {
		versions = append(versions, SentinelBuilt, 1)
	}
	pipe.HSet(ctx, m.keys.FollowingVersions(follower), versions...)
	if len(following) > 0 {
		pipe.SAdd(ctx, m.keys.Following(follower), following...)
	}
}

// CountOf reads followee's follower count from their followers hash, and
// whether the hash is complete (~built); a count without it covers only
// the events since the hash was lost.
func (m Follows) CountOf(ctx context.Context, rdb redis.Cmdable, followee int64) (n int64, built bool, err error) {
	vs, err := rdb.HMGet(ctx, m.keys.Followers(followee), "count", SentinelBuilt).Result()
	if err != nil {
		return 0, false, err
	}
	if s, ok := vs[0].(string); ok {
		if n, err = strconv.ParseInt(s, 10, 64); err != nil {
			return 0, false, fmt.Errorf("followers:{%d} count %q: %w", followee, s, err)
		}
	}
	return n, vs[1] != nil, nil
}

// followingSnapshotSQL is user's followees and muted accounts now, each
// with its pair stream's version and whether it is a mute pair (one
// statement: one snapshot; the version is read by the events table's
// (stream_id, stream_version) key). A follows or mutes row without its
// event (a database filled by other means than the commands) counts as the
// pair's first Followed or Muted.
const followingSnapshotSQL = `
SELECT f.followee_id,
       coalesce((SELECT max(e.stream_version) FROM events e
                 WHERE e.stream_id = 'follow-' || $1::bigint || '-' || f.followee_id), 1), false
FROM follows f WHERE f.follower_id = $1
UNION ALL
SELECT m.muted_id,
       coalesce((SELECT max(e.stream_version) FROM events e
                 WHERE e.stream_id = 'mute-' || $1::bigint || '-' || m.muted_id), 1), true
FROM mutes m WHERE m.muter_id = $1`

// RebuildFollowing rebuilds user's following state from PostgreSQL, for a
// read that found it not built: user's followees and mutes as PostgreSQL
// has them, merged into following:{u} and following_v:{u}, then ~built
// (WriteRebuiltFollowing says why this is right whatever the projector
// applies meanwhile).
func (m Follows) RebuildFollowing(ctx context.Context, db VersionQuerier, rdb redis.UniversalClient, user int64) error {
	rows, err := db.Query(ctx, followingSnapshotSQL, user)
	if err != nil {
		return fmt.Errorf("read following of %d: %w", user, err)
	}
	pairs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FollowPair, error) {
		var p FollowPair
		return p, r.Scan(&p.Followee, &p.Version, &p.Mute)
	})
	if err != nil {
		return fmt.Errorf("read following of %d: %w", user, err)
	}
	if err := m.WriteRebuiltFollowing(ctx, rdb, user, pairs); err != nil {
		return fmt.Errorf("write rebuilt following of %d: %w", user, err)
	}
	return nil
}
