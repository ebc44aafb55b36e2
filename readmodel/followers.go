package readmodel

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Follows is the follow graph read model: `followers:{a}` (a hash: the
// follower count in field "count", and per follower the last applied
// stream version of the pair), `following:{u}` (a set: the accounts u
// follows) and `following_v:{u}` (a hash: per followee, u's last applied
// stream version of the pair). Follow-pair stream versions alternate
// Followed (odd), Unfollowed (even), so each script applies an event at
// most once.
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

// followingScript applies one follow-pair event to the follower's following
// set, guarded by its own per-pair version hash under the same hash tag.
//
// KEYS[1] following:{follower}; KEYS[2] following_v:{follower};
// ARGV[1] followee id; ARGV[2] stream version; ARGV[3] '1' follow, '0' not.
// Returns 1 when applied, 0 when already applied.
var followingScript = redis.NewScript(lua(`
local v = tonumber(ARGV[2])
local cur = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if v <= cur then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if ARGV[3] == '1' then
  redis.call('SADD', KEYS[1], ARGV[1])
else
  redis.call('SREM', KEYS[1], ARGV[1])
end
return 1
`))

// QueueApply queues one follow-pair event (Followed when follow, else
// Unfollowed, at stream version) on the followee's count and the
// follower's following set: two scripts, each guarded by its pair's
// version. Run the pipeline with Exec (it loads the scripts on NOSCRIPT).
func (m Follows) QueueApply(ctx context.Context, pipe redis.Pipeliner, follower, followee, version int64, follow bool) {
	f := "0"
	if follow {
		f = "1"
	}
	followerCountScript.EvalSha(ctx, pipe, []string{m.keys.Followers(followee)}, itoa(follower), version, f)
	followingScript.EvalSha(ctx, pipe, []string{m.keys.Following(follower), m.keys.FollowingVersions(follower)},
		itoa(followee), version, f)
}

// FollowingKeys are the key names of user's following set and its version
// hash, for the query side's read cache.
func (m Follows) FollowingKeys(user int64) (set, versions string) {
	return m.keys.Following(user), m.keys.FollowingVersions(user)
}

// QueueHasFollowing queues whether user has a following set or its
// version hash: following_v:{u} outlives the set (a user who unfollowed
// their last account has no following:{u}, but must still have authors
// hidden). Both keys share the {u} hash tag: one slot on Cluster. The
// reply is the number of the two that exist.
func (m Follows) QueueHasFollowing(ctx context.Context, pipe redis.Pipeliner, user int64) *redis.IntCmd {
	return pipe.Exists(ctx, m.keys.Following(user), m.keys.FollowingVersions(user))
}

// QueueFollows queues whether user follows each of authors (decimal ids).
func (m Follows) QueueFollows(ctx context.Context, pipe redis.Pipeliner, user int64, authors ...any) *redis.BoolSliceCmd {
	return pipe.SMIsMember(ctx, m.keys.Following(user), authors...)
}

// FollowsEach reports whether user follows each of authors (decimal ids).
func (m Follows) FollowsEach(ctx context.Context, rdb redis.Cmdable, user int64, authors ...any) ([]bool, error) {
	return rdb.SMIsMember(ctx, m.keys.Following(user), authors...).Result()
}

// QueueBuildFollowers queues part of the bulk build of followee's
// followers hash: follower, version pairs (and "count", n in the last
// call).
func (m Follows) QueueBuildFollowers(ctx context.Context, pipe redis.Pipeliner, followee int64, fields []any) {
	pipe.HSet(ctx, m.keys.Followers(followee), fields...)
}

// QueueBuildFollowing queues part of the bulk build of follower's
// following state: followee, version pairs for the version hash, and the
// followees followed now for the set (none: no set written).
func (m Follows) QueueBuildFollowing(ctx context.Context, pipe redis.Pipeliner, follower int64, versions, following []any) {
	pipe.HSet(ctx, m.keys.FollowingVersions(follower), versions...)
	if len(following) > 0 {
		pipe.SAdd(ctx, m.keys.Following(follower), following...)
	}
}

// QueueSetExists queues EXISTS of user's following set alone (the query
// side's read cache tracks the set and its version hash separately).
func (m Follows) QueueSetExists(ctx context.Context, pipe redis.Pipeliner, user int64) *redis.IntCmd {
	return pipe.Exists(ctx, m.keys.Following(user))
}

// QueueVersionsExists queues EXISTS of user's following version hash alone.
func (m Follows) QueueVersionsExists(ctx context.Context, pipe redis.Pipeliner, user int64) *redis.IntCmd {
	return pipe.Exists(ctx, m.keys.FollowingVersions(user))
}
