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
//
// The set is complete only with its ~built member, which only a build
// writes (the bulk build of `feed rebuild followers`, or WriteRebuilt from
// PostgreSQL's follower counts when a reader found it missing). The
// projector's moves never create it: a set lost with Redis and recreated
// by the next follow names one author, and must not read as "no other
// celebrity". A rebuild only adds: an author it adds from a snapshot
// older than the projector's last removal stays a member until that
// author's next follow event, which costs a pulled timeline the inbox
// also holds (the merge drops the duplicates), never a missing post.
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

// QueueBuilt queues the bulk build's last step: the set is complete.
func (m Celebrities) QueueBuilt(ctx context.Context, pipe redis.Pipeliner) {
	pipe.SAdd(ctx, m.keys.Celebrities(), SentinelBuilt)
}

// WriteRebuilt adds authors, the celebrities of a PostgreSQL snapshot,
// and then ~built.
func (m Celebrities) WriteRebuilt(ctx context.Context, rdb redis.Cmdable, authors []int64) error {
	for len(authors) > 0 {
		chunk := authors[:min(len(authors), rebuildChunk)]
		authors = authors[len(chunk):]
		ids := make([]any, len(chunk))
		for i, a := range chunk {
			ids[i] = itoa(a)
		}
		if err := rdb.SAdd(ctx, m.keys.Celebrities(), ids...).Err(); err != nil {
			return fmt.Errorf("write rebuilt celebrities: %w", err)
		}
	}
	if err := rdb.SAdd(ctx, m.keys.Celebrities(), SentinelBuilt).Err(); err != nil {
		return fmt.Errorf("write rebuilt celebrities: %w", err)
	}
	return nil
}

// Celebrity is a member of the set: its id and its decimal.
type Celebrity struct {
	ID      int64
	Decimal string
}

// Members reads the set (members that are not positive ids left out), and
// whether it is complete (~built).
func (m Celebrities) Members(ctx context.Context, rdb redis.Cmdable) ([]Celebrity, bool, error) {
	ss, err := rdb.SMembers(ctx, m.keys.Celebrities()).Result()
	if err != nil {
		return nil, false, fmt.Errorf("read celebrities: %w", err)
	}
	out := make([]Celebrity, 0, len(ss))
	built := false
	for _, s := range ss {
		if s == SentinelBuilt {
			built = true
			continue
		}
		if id, err := strconv.ParseInt(s, 10, 64); err == nil && id > 0 {
			out = append(out, Celebrity{ID: id, Decimal: s})
		}
	}
	return out, built, nil
}
