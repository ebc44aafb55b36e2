package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
)

// PullSQL is the plain fan-out-on-read query, the baseline the read side
// must beat: the 20 newest
// non-deleted posts of the authors the user follows, older than :before.
const PullSQL = `SELECT p.id, p.created_at
FROM posts p
WHERE p.author_id IN (SELECT followee_id FROM follows WHERE follower_id = $1)
  AND p.created_at < $2
  AND p.deleted = false
ORDER BY p.created_at DESC
LIMIT 20`

// Baselines are the two baseline phases' results.
type Baselines struct {
	PullSQL  Summary `json:"pullSql"`
	RawRedis Summary `json:"rawRedis"`
	// Errors counts failed baseline operations by kind.
	Errors map[string]int64 `json:"errors,omitempty"`

	pullMs, redisMs []float64
}

// runBaselines runs the pull SQL, then the raw Redis read, each for
// BaselineDuration with Clients workers over the readers.
func (r *Runner) runBaselines(ctx context.Context) *Baselines {
	b := &Baselines{Errors: map[string]int64{}}
	var mu sync.Mutex
	fail := func(k string) {
		mu.Lock()
		b.Errors[k]++
		mu.Unlock()
	}
	fmt.Fprintf(r.deps.Log, "bench: baseline pull SQL, %s, %d clients\n", r.cfg.BaselineDuration, r.cfg.Clients)
	b.pullMs, b.PullSQL = r.closedLoop(ctx, func(ctx context.Context, u int64) bool {
		rows, err := r.deps.DB.Query(ctx, PullSQL, u, time.Now())
		if err != nil {
			fail("pull sql: " + err.Error())
			return false
		}
		for rows.Next() {
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			fail("pull sql: " + err.Error())
			return false
		}
		return true
	})
	fmt.Fprintf(r.deps.Log, "bench: baseline raw Redis (%s + MGET 20), %s, %d clients\n", rawInboxRead(r.deps.inboxes()), r.cfg.BaselineDuration, r.cfg.Clients)
	b.redisMs, b.RawRedis = r.closedLoop(ctx, func(ctx context.Context, u int64) bool {
		if err := RawRead(ctx, r.deps.Redis, r.deps.Keys, r.deps.inboxes(), u); err != nil {
			fail("raw redis: " + err.Error())
			return false
		}
		return true
	})
	return b
}

// RawRead is the least a Redis read of a first page costs: the newest 21
// inbox entries (one more, to know if a next page exists), then one MGET
// of the 20 posts' cached bodies (on a cluster, a pipeline of GETs, split
// per node: the post keys are of many slots). The entries are the
// first-page pipeline as the query side sends it (GET of the buffer,
// GETRANGE of the sealed string's newest ids and header).
func RawRead(ctx context.Context, rdb redis.UniversalClient, keys readmodel.Keys, packed homefeed.Inboxes, user int64) error {
	ids := make([]int64, 0, 21)
	{
		pipe := rdb.Pipeline()
		rd := packed.QueueRead(ctx, pipe, user, readmodel.MaxScoreMs, 21)
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		p, err := rd.Result()
		if err != nil {
			return err
		}
		for _, e := range p.Entries[:min(len(p.Entries), 20)] {
			ids = append(ids, e.ID)
		}
	}

	if len(ids) == 0 {
		return nil
	}
	pipe := rdb.Pipeline()
	readmodel.NewPostCache(keys).QueueGet(ctx, pipe, ids, !readmodel.IsCluster(rdb))
	_, err := pipe.Exec(ctx)
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}

// closedLoop runs fn for BaselineDuration from Clients goroutines, each on
// random readers, and summarises the successful calls.
func (r *Runner) closedLoop(ctx context.Context, fn func(ctx context.Context, user int64) bool) ([]float64, Summary) {
	start := time.Now()
	end := start.Add(r.cfg.BaselineDuration)
	var mu sync.Mutex
	var all []float64
	var wg sync.WaitGroup
	for i := range r.cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(i)+10_000))
			var ms []float64
			for time.Now().Before(end) && ctx.Err() == nil {
				u := r.pop.Readers[rng.IntN(len(r.pop.Readers))]
				t := time.Now()
				if fn(ctx, u) {
					ms = append(ms, msOf(time.Since(t)))
				}
			}
			mu.Lock()
			all = append(all, ms...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return all, Summarize(all, time.Since(start))
}
