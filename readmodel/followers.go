package readmodel

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// Follows is the follow graph read model, in the compact layout:
//
//   - `followers:{a}`, a hash of three fields per followee: "count", the
//     follower count after the newest applied follow event of a (the
//     event's followeeFollowers), "pos", that event's log position, and
//     ~built from a build;
//   - `following:{u}`, a set: the accounts u follows and does not mute
//     (an intset of ids while it holds at most set-max-intset-entries);
//   - `following_v:{u}`, a hash: the pair versions the set does not imply,
//     and ~built from a build.
//
// followers:{a} keeps no version per follower. Follow events are keyed
// by the followee and every follow or unfollow of a holds a's user row
// locked from before its append to its commit (commands.changeFollow), so
// a's events are appended, committed and delivered in one order in which
// their positions increase; each carries a's count after it. Applying an
// event only when its position is above "pos", and setting the count to
// the event's, is then idempotent in any order of delivery: the count is
// always the newest applied event's.
//
// following:{u} gets events from many partitions (each followee's), so
// it keeps per pair the pair stream's version (Followed odd, Unfollowed
// even): a script applies an event only when it is newer than the pair's.
// A version is implied and not stored for the commonest pair: followed
// once and not muted (version 1, a member of the set). Every other pair
// has its version in following_v:{u} (followVersionLua), so the hash holds
// only the pairs with a history: unfollowed, followed again, muted.
//
// Each state is complete only with its ~built field, which only a build
// from the log writes (the bulk build of `feed rebuild followers`, or
// WriteRebuiltFollowing, the query side's rebuild of one user's following
// state from PostgreSQL). The projector's scripts apply events to a hash
// with or without it: a key lost with Redis and recreated by the next
// follow holds that pair alone, reads as not built, and is rebuilt, never
// read as the user's whole graph.
//
// The keys of the layout before this one (a version per follower in
// followers:{a}, every pair's version in following_v:{u}) are read and
// written correctly by these scripts: their extra fields are versions
// these scripts also honour, or fields they never read. `feed rebuild
// followers` builds a version without them (docs/rebuild.md).
type Follows struct{ keys Keys }

// NewFollows returns the follow graph operations under keys.
func NewFollows(keys Keys) Follows { return Follows{keys: keys} }

// FollowersPositionField is the field of followers:{a} that holds the log
// position of the newest follow event of a applied to it.
const FollowersPositionField = "pos"

// followerCountScript applies one follow-pair event to the followee's
// followers hash, at most once and in any order: only an event newer
// (by log position) than the newest applied sets the count, to the
// count the event carries.
//
// KEYS[1] followers:{followee}; ARGV[1] the event's position; ARGV[2]
// the followee's follower count after it.
// Returns 1 when applied, 0 when an event as new or newer was.
var followerCountScript = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], 'pos') or '0')
if tonumber(ARGV[1]) <= cur then return 0 end
redis.call('HSET', KEYS[1], 'count', ARGV[2], 'pos', ARGV[1])
return 1
`)

// A mute lives in the muter's following state: following_v:{u} keeps,
// beside the follow pairs' versions, the muted account's mute-pair
// version under the field "m:" + id (odd: muted, even: unmuted), and
// following:{u} holds exactly the accounts u follows and does not mute.
// So the query side's one follow check (SMISMEMBER following:{u}) hides a
// muted author at no cost to readers who mute no one, and a mute of a
// celebrity stops its pull. The membership is a function of the two
// versions, so follow and mute events of a pair apply in any order, each
// at most once (followVersionLua).

// MuteField is the field of following_v:{u} that holds the mute-pair
// version of muted.
func MuteField(muted int64) string { return "m:" + itoa(muted) }

// ImpliedFollowVersion reports whether a follow pair at version, a member
// of the following set or not, has its version implied by the set: then
// following_v:{u} does not store it.
func ImpliedFollowVersion(version int64, member bool) bool { return version == 1 && member }

// followVersionLua reads and writes the pair versions of KEYS[1]
// (following:{u}) and KEYS[2] (following_v:{u}). A follow pair's version
// is its field in KEYS[2] when there is one, else 1 for a member of
// KEYS[1] (ImpliedFollowVersion), else 0 (never applied). apply(a, field,
// v) applies one pair event, follow (field a) or mute (field 'm:' .. a),
// at version v when it is newer than the pair's, then sets a's membership
// (followed: odd follow version; not muted: even mute version) and stores
// the follow version unless the membership implies it.
const followVersionLua = `
local function apply(a, field, v)
  local stored = redis.call('HGET', KEYS[2], a)
  local f = tonumber(stored or '0')
  if not stored and redis.call('SISMEMBER', KEYS[1], a) == 1 then f = 1 end
  local mf = 'm:' .. a
  local m = tonumber(redis.call('HGET', KEYS[2], mf) or '0')
  if field == a then
    if v <= f then return 0 end
    f = v
  else
    if v <= m then return 0 end
    m = v
    redis.call('HSET', KEYS[2], mf, v)
  end
  local member = f % 2 == 1 and m % 2 == 0
  if member then
    redis.call('SADD', KEYS[1], a)
  else
    redis.call('SREM', KEYS[1], a)
  end
  if (f == 1 and member) or f == 0 then
    if stored then redis.call('HDEL', KEYS[2], a) end
  elseif tostring(f) ~= stored then
    redis.call('HSET', KEYS[2], a, f)
  end
  return 1
end
`

// followingScript applies one follow-pair or mute-pair event to the
// follower's following state, guarded by the pair's version
// (followVersionLua).
//
// KEYS[1] following:{follower}; KEYS[2] following_v:{follower};
// ARGV[1] followee id; ARGV[2] stream version; ARGV[3] the version field
// (the followee id for a follow pair, MuteField for a mute pair).
// Returns 1 when applied, 0 when already applied.
var followingScript = redis.NewScript(followVersionLua + `
return apply(ARGV[1], ARGV[3], tonumber(ARGV[2]))
`)

// FollowEvent is one follow-pair event (Followed or Unfollowed) as the
// followers projector applies it.
type FollowEvent struct {
	Follower, Followee int64
	// Version is the pair stream's version: odd for Followed, even for
	// Unfollowed.
	Version int64
	// Position is the event's log position, Followers the followee's
	// follower count after it (followeeFollowers).
	Position, Followers int64
}

// QueueApply queues one follow-pair event on the followee's count and the
// follower's following set: two scripts, one per account (each in its own
// slot), each applying the event at most once. Run the pipeline with Exec
// (it loads the scripts on NOSCRIPT).
func (m Follows) QueueApply(ctx context.Context, pipe redis.Pipeliner, e FollowEvent) {
	followerCountScript.EvalSha(ctx, pipe, []string{m.keys.Followers(e.Followee)}, e.Position, e.Followers)
	followingScript.EvalSha(ctx, pipe, []string{m.keys.Following(e.Follower), m.keys.FollowingVersions(e.Follower)},
		itoa(e.Followee), e.Version, itoa(e.Followee))
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
	// Block, instead, names a block pair with Followee: BlockField (the
	// user blocks Followee) or BlockedByField (Followee blocks the user).
	Block BlockKind
}

// BlockKind says which of a block pair's fields a FollowPair is.
type BlockKind uint8

const (
	// NoBlock: a follow or mute pair.
	NoBlock BlockKind = iota
	// Blocks: the user blocks the account (BlockField).
	Blocks
	// BlockedBy: the account blocks the user (BlockedByField).
	BlockedBy
)

// rebuiltFollowingScript merges a snapshot of user's followees and mutes
// into their following state and marks it built. Each pair is applied like
// an event (only when its version is newer than the pair's,
// followVersionLua): a pair the
// projector moved after the snapshot keeps the projector's answer, and a
// pair unfollowed (or unmuted) before the snapshot but not yet applied
// leaves with its Unfollowed (Unmuted), which the projector applies later
// (it is newer than anything here). So the result is what applying every
// event would leave.
//
// KEYS[1] following:{u}; KEYS[2] following_v:{u}; ARGV[1] '1' to set
// ~built after this chunk; ARGV[2..] account, field, version triples
// (field: the account for a follow pair, MuteField for a mute pair,
// BlockField or BlockedByField for a block pair, set only above the
// stored version as blockFieldScript does; versions odd: the snapshot
// holds followed, muted and blocked pairs only).
var rebuiltFollowingScript = redis.NewScript(lua(followVersionLua + `
for i = 2, #ARGV, 3 do
  local kind = string.sub(ARGV[i+1], 1, 2)
  if kind == 'b:' or kind == 'x:' then
    local cur = tonumber(redis.call('HGET', KEYS[2], ARGV[i+1]) or '0')
    if tonumber(ARGV[i+2]) > cur then redis.call('HSET', KEYS[2], ARGV[i+1], ARGV[i+2]) end
  else
    apply(ARGV[i], ARGV[i+1], tonumber(ARGV[i+2]))
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
			switch {
			case p.Block == Blocks:
				field = BlockField(p.Followee)
			case p.Block == BlockedBy:
				field = BlockedByField(p.Followee)
			case p.Mute:
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

// QueueBuildFollowers queues the bulk build of followee's followers hash:
// its count of current followers, the log position of the newest follow
// event of followee the count includes, and ~built.
func (m Follows) QueueBuildFollowers(ctx context.Context, pipe redis.Pipeliner, followee, count, position int64) {
	pipe.HSet(ctx, m.keys.Followers(followee), "count", count, FollowersPositionField, position, SentinelBuilt, 1)
}

// QueueBuildFollowing queues part of the bulk build of follower's
// following state: field, version pairs for the version hash (the follow
// pairs whose version the set does not imply, ImpliedFollowVersion, and
// the mute pairs under MuteField), and the followees followed and not
// muted now for the set (none: no set written); last marks the state
// built.
func (m Follows) QueueBuildFollowing(ctx context.Context, pipe redis.Pipeliner, follower int64, versions, following []any, last bool) {
	if last {
		versions = append(versions, SentinelBuilt, 1)
	}
	if len(versions) > 0 {
		pipe.HSet(ctx, m.keys.FollowingVersions(follower), versions...)
	}
	if len(following) > 0 {
		pipe.SAdd(ctx, m.keys.Following(follower), following...)
	}
}

// CountOf reads followee's follower count from their followers hash, and
// whether the hash was built (~built). A hash without it was recreated by
// the projector after a loss: its count is the newest applied event's, and
// absent (0) until a follow event of followee comes.
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

// followingSnapshotSQL is user's followees, muted accounts and block
// pairs both ways now, each with its pair stream's version and its kind
// (0 a follow pair, -1 a mute pair, 1 a block by user, 2 a block of user:
// FollowPair.Block; one
// statement: one snapshot; the version is read by the events table's
// (stream_id, stream_version) key). A follows or mutes row without its
// event (a database filled by other means than the commands) counts as the
// pair's first Followed or Muted.
const followingSnapshotSQL = `
SELECT f.followee_id,
       coalesce((SELECT max(e.stream_version) FROM events e
                 WHERE e.stream_id = 'follow-' || $1::bigint || '-' || f.followee_id), 1), 0
FROM follows f WHERE f.follower_id = $1
UNION ALL
SELECT m.muted_id,
       coalesce((SELECT max(e.stream_version) FROM events e
                 WHERE e.stream_id = 'mute-' || $1::bigint || '-' || m.muted_id), 1), -1
FROM mutes m WHERE m.muter_id = $1
UNION ALL
SELECT b.blocked_id,
       coalesce((SELECT max(e.stream_version) FROM events e
                 WHERE e.stream_id = 'block-' || $1::bigint || '-' || b.blocked_id), 1), 1
FROM blocks b WHERE b.blocker_id = $1
UNION ALL
SELECT b.blocker_id,
       coalesce((SELECT max(e.stream_version) FROM events e
                 WHERE e.stream_id = 'block-' || b.blocker_id || '-' || $1::bigint), 1), 2
FROM blocks b WHERE b.blocked_id = $1`

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
		var kind int
		err := r.Scan(&p.Followee, &p.Version, &kind)
		p.Mute, p.Block = kind == -1, BlockKind(max(kind, 0))
		return p, err
	})
	if err != nil {
		return fmt.Errorf("read following of %d: %w", user, err)
	}
	if err := m.WriteRebuiltFollowing(ctx, rdb, user, pairs); err != nil {
		return fmt.Errorf("write rebuilt following of %d: %w", user, err)
	}
	return nil
}
