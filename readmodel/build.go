package readmodel

import (
	"context"
	"math"

	"github.com/redis/go-redis/v9"
)

// The bulk builds of `feed rebuild` (docs/rebuild.md) write whole read
// models into fresh, versioned keys; this file holds how a finished
// timeline is written (an inbox's: homefeed). What is written is what the projectors' scripts
// could have produced: the newest posts kept, ~floor at the score of the
// first one cut (nothing at or below it kept), then ~built.

// QueueBuilt queues the bulk build of author's timeline from newest, the
// author's newest posts (newest first, at most the bound + 1 read): the
// first max kept, the floor at the next one's score when there is one
// (entries at or below it left out, the bounded-add rule), and ~built, in
// one ZADD. It returns the members queued (0: nothing, no posts).
func (m Timelines) QueueBuilt(ctx context.Context, pipe redis.Pipeliner, author int64, newest []Entry) int {
	if len(newest) == 0 {
		return 0
	}
	floor := math.Inf(-1)
	if len(newest) > m.max {
		floor = float64(newest[m.max].Ms)
		newest = newest[:m.max]
	}
	zs := make([]redis.Z, 0, len(newest)+2)
	for _, e := range newest {
		if s := float64(e.Ms); s > floor {
			zs = append(zs, redis.Z{Score: s, Member: itoa(e.ID)})
		}
	}
	if !math.IsInf(floor, -1) {
		zs = append(zs, redis.Z{Score: floor, Member: SentinelFloor})
	}
	zs = append(zs, redis.Z{Score: math.Inf(1), Member: SentinelBuilt})
	pipe.ZAdd(ctx, m.keys.Timeline(author), zs...)
	return len(zs)
}
