package projections

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// boundedAddScript is the one place that adds to, trims and raises the floor
// of a sentinel-carrying sorted set (an inbox or a timeline). It touches one
// key only, so it is valid on Redis Cluster.
//
// KEYS[1] the sorted set.
// ARGV[1] max real entries; ARGV[2] slack (trim only when over max+slack);
// ARGV[3] raise the floor to this score (” for none), ARGV[4] but only if
// this score is above the current floor (” for unconditionally: the inbox
// passes ” so the result does not depend on the order of partitions, see
// docs/projections.md);
// ARGV[5] '1' to make sure ~built (+inf) is present;
// ARGV[6] a TTL in seconds to set when the key has none ('0' for none);
// ARGV[7..] score, member pairs to add.
//
// After it ran, every real member scores strictly above ~floor: entries at
// or below the floor are not added, and those that plain ZADDs of the inbox
// hot path left there (late pushes) are removed. The floor only grows.
// Returns the number of members added.
var boundedAddScript = redis.NewScript(`
local k = KEYS[1]
local max = tonumber(ARGV[1])
local slack = tonumber(ARGV[2])
local ttl = tonumber(ARGV[6])
local f = redis.call('ZSCORE', k, '~floor')
local old = nil
if f then old = tonumber(f) end
local fl = old
if ARGV[3] ~= '' then
  local r = tonumber(ARGV[3])
  local cond = true
  if ARGV[4] ~= '' and fl and tonumber(ARGV[4]) <= fl then cond = false end
  if cond and (not fl or r > fl) then fl = r end
end
local added = 0
for i = 7, #ARGV, 2 do
  if not fl or tonumber(ARGV[i]) > fl then
    added = added + redis.call('ZADD', k, ARGV[i], ARGV[i+1])
  end
end
if ARGV[5] == '1' then redis.call('ZADD', k, 'inf', '~built') end
if fl and (fl ~= old or redis.call('ZCOUNT', k, '-inf', fl) > 1) then
  redis.call('ZREMRANGEBYSCORE', k, '-inf', fl)
  redis.call('ZADD', k, fl, '~floor')
end
if ttl > 0 and redis.call('TTL', k) == -1 then redis.call('EXPIRE', k, ttl) end
local n = redis.call('ZCARD', k)
if n == 0 then return added end
local fixed = 0
if fl then fixed = 1 end
local top = redis.call('ZRANGE', k, -1, -1)
if top[1] == '~built' then n = n - 1 end
local real = n - fixed
if real > max + slack then
  local rank = fixed + real - max - 1
  local cut = redis.call('ZRANGE', k, rank, rank, 'WITHSCORES')
  redis.call('ZREMRANGEBYSCORE', k, '-inf', cut[2])
  redis.call('ZADD', k, cut[2], '~floor')
end
return added
`)

// followerCountScript applies one follow-pair event to the followee's
// followers hash, at most once: the hash keeps, per follower, the last
// applied stream version of the pair, checked and moved in the same atomic
// step as the count. Versions alternate Followed (odd), Unfollowed (even).
//
// KEYS[1] followers:{followee}; ARGV[1] follower id; ARGV[2] stream
// version; ARGV[3] '1' for Followed, '0' for Unfollowed.
// Returns the count after the event, or -1 when it was already applied.
var followerCountScript = redis.NewScript(`
local k = KEYS[1]
local v = tonumber(ARGV[2])
local cur = tonumber(redis.call('HGET', k, ARGV[1]) or '0')
if v <= cur then return -1 end
local was = 0
if cur % 2 == 1 then was = 1 end
local now = tonumber(ARGV[3])
redis.call('HSET', k, ARGV[1], ARGV[2])
return redis.call('HINCRBY', k, 'count', now - was)
`)

// followingScript applies one follow-pair event to the follower's following
// set, guarded by its own per-pair version hash under the same hash tag.
//
// KEYS[1] following:{follower}; KEYS[2] following_v:{follower};
// ARGV[1] followee id; ARGV[2] stream version; ARGV[3] '1' follow, '0' not.
// Returns 1 when applied, 0 when already applied.
var followingScript = redis.NewScript(`
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
`)

// isNoScript reports whether Redis did not know a script's SHA.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// runScript runs a single script with EVALSHA, loading it on NOSCRIPT.
func runScript(ctx context.Context, rdb redis.UniversalClient, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	return s.Run(ctx, rdb, keys, args...)
}
