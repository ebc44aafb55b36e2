package queries

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
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
