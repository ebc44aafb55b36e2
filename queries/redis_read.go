package queries

import (
	"context"
	"errors"
	"math"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/readmodel"
)

// addRange queues ZREVRANGEBYSCORE k <cur.ms inclusive> -inf WITHSCORES
// LIMIT 0 n: the newest n members at or below the cursor's millisecond.
func addRange(ctx context.Context, pipe redis.Pipeliner, k string, cur key, n int) *redis.ZSliceCmd {
	return pipe.ZRevRangeByScoreWithScores(ctx, k, &redis.ZRangeBy{Max: scoreMax(cur), Min: "-inf", Count: int64(n)})
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

// zreply turns a queued range read (LIMIT n) and ~floor score into a source.
func zreply(z *redis.ZSliceCmd, floor *redis.FloatCmd, n int) (source, error) {
	reply, err := z.Result()
	if err != nil {
		return source{}, err
	}
	f, err := optionalScore(floor)
	if err != nil {
		return source{}, err
	}
	return zsource(reply, n, f), nil
}

// execPipe runs a pipeline; a missing ZSCORE member (redis.Nil) is an
// answer, not a failure, and is read from its command.
func execPipe(ctx context.Context, pipe redis.Pipeliner) error {
	_, err := pipe.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	return nil
}

// setRead is a queued read of a sentinel-carrying sorted set (an inbox or a
// timeline) from a cursor.
type setRead struct {
	z            *redis.ZSliceCmd
	built, floor *redis.FloatCmd // nil on the first page: the reply has them
	limit        int
	first        bool
}

// addSetRead queues the read of k from cur with n entries. The first page
// reads from +inf inclusive with one more entry: the reply starts with
// ~built (score +inf) and, when it is not cut, ends with ~floor (every real
// member scores at or above it, and '~' sorts after digits, so in a reverse
// range it comes before the members of its own score). So one command
// answers what otherwise takes three. Deeper pages cannot see a floor above
// the cursor in their reply and ask ZSCORE (~built only if wantBuilt).
func addSetRead(ctx context.Context, pipe redis.Pipeliner, k string, cur key, n int, wantBuilt bool) setRead {
	if cur.ms >= maxCursorMs {
		z := pipe.ZRevRangeByScoreWithScores(ctx, k, &redis.ZRangeBy{Max: "+inf", Min: "-inf", Count: int64(n + 1)})
		return setRead{z: z, limit: n + 1, first: true}
	}
	r := setRead{z: addRange(ctx, pipe, k, cur, n), limit: n}
	if wantBuilt {
		r.built = pipe.ZScore(ctx, k, readmodel.SentinelBuilt)
	}
	r.floor = pipe.ZScore(ctx, k, readmodel.SentinelFloor)
	return r
}

// result returns the read as a source and whether the set has ~built.
func (r setRead) result() (source, bool, error) {
	reply, err := r.z.Result()
	if err != nil {
		return source{}, false, err
	}
	if r.first {
		built := false
		var floor *int64
		for _, z := range reply {
			switch z.Member {
			case readmodel.SentinelBuilt:
				built = true
			case readmodel.SentinelFloor:
				if !math.IsInf(z.Score, 0) && !math.IsNaN(z.Score) {
					ms := int64(z.Score)
					floor = &ms
				}
			}
		}
		return zsource(reply, r.limit, floor), built, nil
	}
	built := false
	if r.built != nil {
		b, err := optionalScore(r.built)
		if err != nil {
			return source{}, false, err
		}
		built = b != nil
	}
	floor, err := optionalScore(r.floor)
	if err != nil {
		return source{}, false, err
	}
	return zsource(reply, r.limit, floor), built, nil
}
