package projections

import (
	"context"

	"github.com/redis/go-redis/v9"
)

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
var trimScript = redis.NewScript(`
local k = KEYS[1]
local n = tonumber(ARGV[1]) + 1
local top = redis.call('ZRANGE', k, -1, -1)
if top[1] == '~built' then n = n + 1 end
local c = redis.call('ZRANGE', k, -n, -n, 'WITHSCORES')
if c[1] and c[1] ~= '~built' then redis.call('ZADD', k, 'GT', c[2], '~floor') end
local r = redis.call('ZRANK', k, '~floor')
if not r then return 0 end
if r > 0 then redis.call('ZREMRANGEBYRANK', k, 0, r - 1) end
return r
`)

// trim runs trimScript on every key, in one pipeline: each keeps its newest
// InboxMax - slack entries (Config.InboxTrimSlack).
func (p *Inbox) trim(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	return p.execScript(ctx, trimScript, func(pipe redis.Pipeliner) {
		for _, k := range keys {
			trimScript.EvalSha(ctx, pipe, []string{k}, p.cfg.inboxKeep())
		}
	})
}
