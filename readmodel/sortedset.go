package readmodel

import (
	"context"
	"errors"
	"math"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Inboxes and timelines are sorted sets: member the post id (decimal),
// score its created_at in epoch milliseconds, plus the sentinels.

// Sentinel members of inbox and timeline sorted sets. Real members are
// decimal post ids; anything starting with '~' is a sentinel that readers
// skip (doc.go).
const (
	// SentinelBuilt (score +inf) marks an inbox built complete from the
	// source of truth and maintained since; without it the inbox is cold.
	SentinelBuilt = "~built"
	// SentinelFloor's score F says the set is complete only above F.
	SentinelFloor = "~floor"
)

// IsSentinel reports whether a sorted-set member is a sentinel.
func IsSentinel(member string) bool { return len(member) > 0 && member[0] == '~' }

// MaxScoreMs is the highest score a read starts from: scores stay exact
// as Redis doubles (2^53) and far beyond any real timestamp. A read from
// MaxScoreMs or more is a first page (from +inf).
const MaxScoreMs = 1<<53 - 1

// Entry is one post in an inbox or timeline: its id and its score, the
// created_at millisecond.
type Entry struct{ ID, Ms int64 }

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

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
var boundedAddScript = redis.NewScript(lua(`
local k = KEYS[1]
local max = tonumber(ARGV[1])
local slack = tonumber(ARGV[2])
local ttl = tonumber(ARGV[6])
local f = redis.call('ZSCORE', k, $FLOOR)
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
if ARGV[5] == '1' then redis.call('ZADD', k, 'inf', $BUILT) end
if fl and (fl ~= old or redis.call('ZCOUNT', k, '-inf', fl) > 1) then
  redis.call('ZREMRANGEBYSCORE', k, '-inf', fl)
  redis.call('ZADD', k, fl, $FLOOR)
end
if ttl > 0 and redis.call('TTL', k) == -1 then redis.call('EXPIRE', k, ttl) end
local n = redis.call('ZCARD', k)
if n == 0 then return added end
local fixed = 0
if fl then fixed = 1 end
local top = redis.call('ZRANGE', k, -1, -1)
if top[1] == $BUILT then n = n - 1 end
local real = n - fixed
if real > max + slack then
  local rank = fixed + real - max - 1
  local cut = redis.call('ZRANGE', k, rank, rank, 'WITHSCORES')
  redis.call('ZREMRANGEBYSCORE', k, '-inf', cut[2])
  redis.call('ZADD', k, cut[2], $FLOOR)
end
return added
`))

// queueBounded queues boundedAddScript on key with args.
func queueBounded(ctx context.Context, pipe redis.Pipeliner, key string, args []any) *redis.Cmd {
	return boundedAddScript.EvalSha(ctx, pipe, []string{key}, args...)
}

// scoreMax is the inclusive upper score of a range read from fromMs (the
// cursor's own millisecond is included: other posts of that millisecond
// may be older than the cursor's id; the reader filters exactly). "(+inf"
// leaves out ~built, whose score is +inf.
func scoreMax(fromMs int64) string {
	if fromMs >= MaxScoreMs {
		return "(+inf"
	}
	return strconv.FormatInt(fromMs, 10)
}

// queueRange queues ZREVRANGEBYSCORE key <fromMs inclusive> -inf
// WITHSCORES LIMIT 0 n: the newest n members at or below fromMs.
func queueRange(ctx context.Context, pipe redis.Pipeliner, key string, fromMs int64, n int) *redis.ZSliceCmd {
	return pipe.ZRevRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Max: scoreMax(fromMs), Min: "-inf", Count: int64(n)})
}

// Page is a read page of a sorted set: the reply (newest first, sentinels
// included: readers skip them with IsSentinel), the LIMIT it was read
// with (a reply that long is cut), the ~floor score when the set has one
// (complete only above it) and, for an inbox, whether it has ~built.
type Page struct {
	Reply []redis.Z
	Limit int
	Floor *int64
	Built bool
}

// optionalScore returns a ZSCORE reply, nil when the member is absent.
func optionalScore(c *redis.FloatCmd) (*int64, error) {
	v, err := c.Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ms := int64(v)
	return &ms, nil
}

// RangeRead is a queued range read of a sorted set with its ~floor and
// ~built (a timeline page below a cursor).
type RangeRead struct {
	z            *redis.ZSliceCmd
	floor, built *redis.FloatCmd
	limit        int
}

func queueRangeRead(ctx context.Context, pipe redis.Pipeliner, key string, fromMs int64, n int) RangeRead {
	return RangeRead{z: queueRange(ctx, pipe, key, fromMs, n), floor: pipe.ZScore(ctx, key, SentinelFloor),
		built: pipe.ZScore(ctx, key, SentinelBuilt), limit: n}
}

// Result is the read page once the pipeline ran (ExecReads).
func (r RangeRead) Result() (Page, error) {
	reply, err := r.z.Result()
	if err != nil {
		return Page{}, err
	}
	f, err := optionalScore(r.floor)
	if err != nil {
		return Page{}, err
	}
	b, err := optionalScore(r.built)
	if err != nil {
		return Page{}, err
	}
	return Page{Reply: reply, Limit: r.limit, Floor: f, Built: b != nil}, nil
}

// SetRead is a queued page read of an inbox or a timeline with its
// sentinels.
type SetRead struct {
	z            *redis.ZSliceCmd
	built, floor *redis.FloatCmd // nil on the first page: the reply has them
	limit        int
	first        bool
}

// queueSetRead queues the read of key from fromMs with n entries. The first
// page reads from +inf inclusive with one more entry: the reply starts
// with ~built (score +inf) and, when it is not cut, ends with ~floor
// (every real member scores at or above it, and '~' sorts after digits, so
// in a reverse range it comes before the members of its own score). So one
// command answers what otherwise takes three. Deeper pages cannot see a
// floor above the cursor in their reply and ask ZSCORE (~built only if
// wantBuilt).
func queueSetRead(ctx context.Context, pipe redis.Pipeliner, key string, fromMs int64, n int, wantBuilt bool) SetRead {
	if fromMs >= MaxScoreMs {
		z := pipe.ZRevRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Max: "+inf", Min: "-inf", Count: int64(n + 1)})
		return SetRead{z: z, limit: n + 1, first: true}
	}
	r := SetRead{z: queueRange(ctx, pipe, key, fromMs, n), limit: n}
	if wantBuilt {
		r.built = pipe.ZScore(ctx, key, SentinelBuilt)
	}
	r.floor = pipe.ZScore(ctx, key, SentinelFloor)
	return r
}

// Result is the read page once the pipeline ran (ExecReads), with whether
// the set has ~built.
func (r SetRead) Result() (Page, error) {
	reply, err := r.z.Result()
	if err != nil {
		return Page{}, err
	}
	if r.first {
		p := Page{Reply: reply, Limit: r.limit}
		for _, z := range reply {
			switch z.Member {
			case SentinelBuilt:
				p.Built = true
			case SentinelFloor:
				if !math.IsInf(z.Score, 0) && !math.IsNaN(z.Score) {
					ms := int64(z.Score)
					p.Floor = &ms
				}
			}
		}
		return p, nil
	}
	p := Page{Reply: reply, Limit: r.limit}
	if r.built != nil {
		b, err := optionalScore(r.built)
		if err != nil {
			return Page{}, err
		}
		p.Built = b != nil
	}
	if p.Floor, err = optionalScore(r.floor); err != nil {
		return Page{}, err
	}
	return p, nil
}

// ExecReads runs a pipeline of reads; a missing ZSCORE member (redis.Nil)
// is an answer, not a failure, and is read from its command.
func ExecReads(ctx context.Context, pipe redis.Pipeliner) error {
	_, err := pipe.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	return nil
}

// ExecReadsVia runs the reads queued on pipe as ExecReads does, through
// ap, an asynchronous autopipeliner (go-redis's AsyncAutoPipeline): they
// go out, in their order, in one pipeline with the commands other
// goroutines submitted meanwhile, instead of a round trip of their own.
// pipe only queues them: it is not executed.
func ExecReadsVia(ctx context.Context, ap *redis.AutoPipeliner, pipe redis.Pipeliner) error {
	var fb [8]redis.AutoFuture
	futs := fb[:0]
	for _, c := range pipe.Cmds() {
		futs = append(futs, ap.Submit(ctx, c))
	}
	var first error
	for _, f := range futs {
		if err := f.Wait(); err != nil && !errors.Is(err, redis.Nil) && first == nil {
			first = err
		}
	}
	return first
}
