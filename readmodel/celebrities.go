package readmodel

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Celebrities is the `celebrities` set: the authors whose follower count
// is at or over Policy.CelebrityThreshold, kept by the followers projector
// from the counts the follow events carry. The query side pulls the
// timelines of the celebrities a reader follows.
type Celebrities struct{ keys Keys }

// NewCelebrities returns the celebrity set operations under keys.
func NewCelebrities(keys Keys) Celebrities { return Celebrities{keys: keys} }

// QueueSet queues author's membership: in when celebrity, else out.
func (m Celebrities) QueueSet(ctx context.Context, pipe redis.Pipeliner, author int64, celebrity bool) {
	if celebrity {
		pipe.SAdd(ctx, m.keys.Celebrities(), itoa(author))
	} else {
		pipe.SRem(ctx, m.keys.Celebrities(), itoa(author))
	}
}

// QueueAdd queues the bulk build's addition of authors (ids).
func (m Celebrities) QueueAdd(ctx context.Context, pipe redis.Pipeliner, authors []any) {
	pipe.SAdd(ctx, m.keys.Celebrities(), authors...)
}

// Celebrity is a member of the set: its id and its decimal.
type Celebrity struct {
	ID      int64
	Decimal string
}

// Members reads the set (members that are not positive ids left out).
func (m Celebrities) Members(ctx context.Context, rdb redis.Cmdable) ([]Celebrity, error) {
	ss, err := rdb.SMembers(ctx, m.keys.Celebrities()).Result()
	if err != nil {
		return nil, fmt.Errorf("read celebrities: %w", err)
	}
	out := make([]Celebrity, 0, len(ss))
	for _, s := range ss {
		if id, err := strconv.ParseInt(s, 10, 64); err == nil && id > 0 {
			out = append(out, Celebrity{ID: id, Decimal: s})
		}
	}
	return out, nil
}
