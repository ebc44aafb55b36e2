package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/internal/redisinfo"
)

// RawPush is the raw cost of the pushes the mixed phase's posts make: the
// fan-out benchmark's raw pair (projections' BenchmarkFanout), ZADD +
// ZREMRANGEBYRANK 0 -(InboxMax+1) per follower in pipelines of 1,000, into
// scratch sorted sets filled to the bound first, for the followers of
// randomly chosen authors (the mixed phase's posts' authors are uniform
// too), each follower's push going to one of rawPushInboxes scratch
// inboxes (follower id modulo their number: a full inbox costs the same
// whichever it is, and filling listpacks is quadratic). CPU is Redis's (INFO cpu) and this process's (getrusage) over the
// pushes alone, per pushed entry.
type RawPush struct {
	Entries         int     `json:"entries"`
	Seconds         float64 `json:"seconds"`
	EntriesPerSec   float64 `json:"entriesPerSecond"`
	RedisUsPerPush  float64 `json:"redisCpuUsPerEntry"`
	ClientUsPerPush float64 `json:"clientCpuUsPerEntry"`
	Encoding        string  `json:"encoding"`
}

const (
	rawPushEntries  = 60_000 // about 200 posts at 300 followers
	rawPushPipeline = 1000
	rawPushBound    = 500
	rawPushInboxes  = 2000
	followersOfSQL  = `SELECT follower_id FROM follows WHERE followee_id = $1`
)

// rawPushKey is a scratch inbox; the hash tag keeps it in the user's slot.
func rawPushKey(u int64) string { return "bench:rawpush:{" + strconv.FormatInt(u, 10) + "}" }

// runRawPush measures RawPush, then deletes its scratch keys.
func (r *Runner) runRawPush(ctx context.Context) (*RawPush, error) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 77))
	var targets []int64
	for len(targets) < rawPushEntries {
		a := r.pop.Authors[rng.IntN(len(r.pop.Authors))]
		if r.pop.Followers[a] >= r.cfg.CelebrityThreshold {
			continue
		}
		rows, err := r.deps.DB.Query(ctx, followersOfSQL, a)
		if err != nil {
			return nil, fmt.Errorf("raw push: followers of %d: %w", a, err)
		}
		for rows.Next() {
			var u int64
			if err := rows.Scan(&u); err != nil {
				rows.Close()
				return nil, err
			}
			targets = append(targets, u)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	users := map[int64]bool{}
	for i, u := range targets {
		targets[i] = u % rawPushInboxes
		users[targets[i]] = true
	}
	fmt.Fprintf(r.deps.Log, "bench: raw push baseline: %d pushes into %d scratch inboxes of %d\n", len(targets), len(users), rawPushBound)
	rdb := r.deps.Redis
	defer func() {
		keys := make([]string, 0, rawPushPipeline)
		flush := func() {
			if len(keys) > 0 {
				rdb.Unlink(context.WithoutCancel(ctx), keys...)
				keys = keys[:0]
			}
		}
		for u := range users {
			if keys = append(keys, rawPushKey(u)); len(keys) == cap(keys) {
				flush()
			}
		}
		flush()
	}()
	// Fill every scratch inbox to the bound with older ids, one ZADD each.
	base := time.Now().Add(-24 * time.Hour).UnixMilli()
	fill := make([]redis.Z, rawPushBound)
	for i := range fill {
		fill[i] = redis.Z{Score: float64(base + int64(i)), Member: strconv.FormatInt((base+int64(i))<<22, 10)}
	}
	pipe := rdb.Pipeline()
	for u := range users {
		pipe.ZAdd(ctx, rawPushKey(u), fill...)
		if pipe.Len() >= 100 {
			if _, err := pipe.Exec(ctx); err != nil {
				return nil, fmt.Errorf("raw push: fill: %w", err)
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, fmt.Errorf("raw push: fill: %w", err)
	}
	var enc string
	for u := range users {
		enc, _ = rdb.ObjectEncoding(ctx, rawPushKey(u)).Result()
		break
	}
	redisBefore, err := redisinfo.CPU(ctx, rdb)
	if err != nil {
		return nil, err
	}
	selfBefore := selfCPU()
	start := time.Now()
	now := time.Now().UnixMilli()
	for lo := 0; lo < len(targets); lo += rawPushPipeline {
		hi := min(lo+rawPushPipeline, len(targets))
		ms := now + int64(lo/300)
		member := strconv.FormatInt(ms<<22|int64(lo%4096), 10)
		for _, u := range targets[lo:hi] {
			k := rawPushKey(u)
			pipe.ZAdd(ctx, k, redis.Z{Score: float64(ms), Member: member})
			pipe.ZRemRangeByRank(ctx, k, 0, -(rawPushBound + 1))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("raw push: %w", err)
		}
	}
	elapsed := time.Since(start)
	selfUsed := selfCPU() - selfBefore
	redisAfter, err := redisinfo.CPU(ctx, rdb)
	if err != nil {
		return nil, err
	}
	n := float64(len(targets))
	return &RawPush{
		Entries: len(targets), Seconds: elapsed.Seconds(), EntriesPerSec: n / elapsed.Seconds(),
		RedisUsPerPush: (redisAfter - redisBefore).Seconds() * 1e6 / n, ClientUsPerPush: selfUsed.Seconds() * 1e6 / n,
		Encoding: enc,
	}, nil
}

// selfCPU is this process's user + system CPU so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
