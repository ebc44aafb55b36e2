package readmodel

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/internal/redisinfo"
	"github.com/feedco/feed/seed"
	"github.com/feedco/feed/testkit/testenv"
)

// BenchmarkFollowGraphLayouts compares the follow graph's layouts on the
// same graph, in one run, on a redis-server of its own (its defaults:
// hash-max-listpack-entries and set-max-intset-entries 512): the graph of
// `feed seed --users 10000 --avg-follows 300` (seed.Generate), written
// in each layout as its bulk build writes it, under two prefixes of one
// server. It reports:
//
//   - B/edge: MEMORY USAGE summed over every followers:{a},
//     following:{u} and following_v:{u} key, per follow edge (both
//     directions: the edge is in its followee's count and its follower's
//     set); the log gives each kind's share;
//   - follow-µs: Redis CPU (INFO cpu: used_cpu_sys + used_cpu_user) per
//     follow event through the projector's scripts, in pipelines of
//     benchFollowBatch events: new follows and unfollows of existing
//     pairs, half each, the same events for both layouts;
//   - read-µs: Redis CPU per read of a user's following state, the home
//     read's commands for it in one pipeline: HEXISTS following_v ~built,
//     SSCAN following 0 COUNT 512 (the whole set, for the read cache) and
//     SMISMEMBER following of 50 authors.
//
// The two layouts' events and reads alternate in chunks (previous,
// compact, previous, ...), so both see the same machine. "previous" is
// the layout the compact one replaced (a version per follower in
// followers:{a}, every pair's version in following_v:{u}), with its
// scripts as they were (previousFollowerCountScript,
// previousFollowingScript). With FEED_BENCH_ID_OFFSET set, user ids start
// after it (300000000: ids of a 300M-user deployment, 4 bytes in an
// intset instead of 2). Run it with -benchtime=1x.
func BenchmarkFollowGraphLayouts(b *testing.B) {
	var offset int64
	if s := os.Getenv("FEED_BENCH_ID_OFFSET"); s != "" {
		var err error
		if offset, err = strconv.ParseInt(s, 10, 64); err != nil {
			b.Fatal(err)
		}
	}
	d, err := seed.Generate(seed.Params{Users: 10_000, AvgFollows: 300, End: time.Now().Truncate(time.Hour), IDOffset: offset})
	if err != nil {
		b.Fatal(err)
	}
	srv := testenv.StartRedisServer(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 4})
	defer rdb.Close()
	ctx := context.Background()
	for range b.N {
		benchFollowGraph(b, ctx, rdb, d)
	}
}

const (
	benchFollowEvents = 40_000
	benchFollowBatch  = 100
	benchFollowReads  = 20_000
	benchFollowChunks = 20
	benchMembers      = 50
)

// followLayout is one layout of the benchmark: its keys and how it writes
// the graph and applies an event.
type followLayout struct {
	name  string
	keys  Keys
	build func(pipe redis.Pipeliner, followers map[int64][]int64, following map[int64][]int64)
	apply func(pipe redis.Pipeliner, e FollowEvent)
	cpu   struct{ follow, read time.Duration }
}

func benchFollowGraph(b *testing.B, ctx context.Context, rdb *redis.Client, d *seed.Dataset) {
	if err := rdb.FlushAll(ctx).Err(); err != nil { // the benchmark's own server
		b.Fatal(err)
	}
	followers, following := map[int64][]int64{}, map[int64][]int64{}
	for k := range d.Edges {
		f, a := d.Edge(k)
		followers[a] = append(followers[a], f)
		following[f] = append(following[f], a)
	}
	edges := int64(len(d.Edges))
	prevKeys, compKeys := Keys{Prefix: "p:"}, Keys{Prefix: "c:"}
	// flush sends a build's pipeline every few hundred keys.
	flush := func(pipe redis.Pipeliner) {
		if pipe.Len() < 256 {
			return
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	comp := NewFollows(compKeys)
	layouts := []*followLayout{
		{name: "previous", keys: prevKeys,
			build: func(pipe redis.Pipeliner, followers, following map[int64][]int64) {
				for a, fs := range followers {
					args := make([]any, 0, 2*len(fs)+4)
					for _, f := range fs {
						args = append(args, f, 1)
					}
					pipe.HSet(ctx, prevKeys.Followers(a), append(args, "count", len(fs), SentinelBuilt, 1)...)
					flush(pipe)
				}
				for u, as := range following {
					args := make([]any, 0, 2*len(as)+2)
					members := make([]any, 0, len(as))
					for _, a := range as {
						args = append(args, a, 1)
						members = append(members, a)
					}
					pipe.HSet(ctx, prevKeys.FollowingVersions(u), append(args, SentinelBuilt, 1)...)
					pipe.SAdd(ctx, prevKeys.Following(u), members...)
					flush(pipe)
				}
			},
			apply: func(pipe redis.Pipeliner, e FollowEvent) {
				f := "0"
				if e.Version%2 == 1 {
					f = "1"
				}
				previousFollowerCountScript.EvalSha(ctx, pipe, []string{prevKeys.Followers(e.Followee)}, itoa(e.Follower), e.Version, f)
				previousFollowingScript.EvalSha(ctx, pipe, []string{prevKeys.Following(e.Follower), prevKeys.FollowingVersions(e.Follower)},
					itoa(e.Followee), e.Version, itoa(e.Followee))
			}},
		{name: "compact", keys: compKeys,
			build: func(pipe redis.Pipeliner, followers, following map[int64][]int64) {
				for a, fs := range followers {
					comp.QueueBuildFollowers(ctx, pipe, a, int64(len(fs)), 1)
					flush(pipe)
				}
				for u, as := range following {
					members := make([]any, 0, len(as))
					for _, a := range as {
						members = append(members, a)
					}
					comp.QueueBuildFollowing(ctx, pipe, u, nil, members, true)
					flush(pipe)
				}
			},
			apply: func(pipe redis.Pipeliner, e FollowEvent) { comp.QueueApply(ctx, pipe, e) }},
	}
	for _, l := range layouts {
		pipe := rdb.Pipeline()
		l.build(pipe, followers, following)
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	for _, s := range []*redis.Script{previousFollowerCountScript, previousFollowingScript, followerCountScript, followingScript} {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			b.Fatal(err)
		}
	}
	users := make([]int64, len(d.InDegree))
	for i := range users {
		users[i] = d.UserID(i)
	}
	memory := func(l *followLayout) (perKind [3]int64) {
		pipe := rdb.Pipeline()
		var usage [3][]*redis.IntCmd
		for _, u := range users {
			for i, k := range []string{l.keys.Followers(u), l.keys.Following(u), l.keys.FollowingVersions(u)} {
				usage[i] = append(usage[i], pipe.MemoryUsage(ctx, k, 0))
			}
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			b.Fatal(err)
		}
		for i := range usage {
			for _, c := range usage[i] {
				perKind[i] += c.Val() // a missing key is 0
			}
		}
		return perKind
	}
	perEdge := func(l *followLayout, when string) float64 {
		m := memory(l)
		total := m[0] + m[1] + m[2]
		b.Logf("%s, %s: %.2f B/edge over %d edges (followers:{a} %.2f, following:{u} %.2f, following_v:{u} %.2f)",
			l.name, when, float64(total)/float64(edges), edges,
			float64(m[0])/float64(edges), float64(m[1])/float64(edges), float64(m[2])/float64(edges))
		return float64(total) / float64(edges)
	}
	mem := map[string]float64{}
	for _, l := range layouts {
		mem[l.name] = perEdge(l, "as built")
	}

	// The events: half new follows of random pairs, half unfollows of
	// existing ones, each at the pair's next version; a followee's count
	// and position move with its events.
	rng := rand.New(rand.NewPCG(5, 8))
	count := map[int64]int64{}
	for a, fs := range followers {
		count[a] = int64(len(fs))
	}
	follows := map[[2]int64]bool{}
	for k := range d.Edges {
		f, a := d.Edge(k)
		follows[[2]int64{f, a}] = true
	}
	evs := make([]FollowEvent, 0, benchFollowEvents)
	pos := int64(2)
	for len(evs) < benchFollowEvents {
		var f, a int64
		if len(evs)%2 == 0 {
			f, a = users[rng.IntN(len(users))], users[rng.IntN(len(users))]
			if f == a || follows[[2]int64{f, a}] {
				continue
			}
			follows[[2]int64{f, a}] = true
			count[a]++
			evs = append(evs, FollowEvent{Follower: f, Followee: a, Version: 1, Position: pos, Followers: count[a]})
		} else {
			f, a = d.Edge(rng.IntN(len(d.Edges)))
			if !follows[[2]int64{f, a}] {
				continue
			}
			follows[[2]int64{f, a}] = false
			count[a]--
			evs = append(evs, FollowEvent{Follower: f, Followee: a, Version: 2, Position: pos, Followers: count[a]})
		}
		pos++
	}
	reads := make([][]any, benchFollowReads)
	readers := make([]int64, benchFollowReads)
	for i := range reads {
		readers[i] = users[rng.IntN(len(users))]
		for range benchMembers {
			reads[i] = append(reads[i], users[rng.IntN(len(users))])
		}
	}

	cpu := func() time.Duration {
		c, err := redisinfo.CPU(ctx, rdb)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	for chunk := range benchFollowChunks {
		ce := evs[chunk*len(evs)/benchFollowChunks : (chunk+1)*len(evs)/benchFollowChunks]
		cr := chunk * len(reads) / benchFollowChunks
		cr1 := (chunk + 1) * len(reads) / benchFollowChunks
		for _, l := range layouts {
			c0 := cpu()
			for i := 0; i < len(ce); i += benchFollowBatch {
				pipe := rdb.Pipeline()
				for _, e := range ce[i:min(i+benchFollowBatch, len(ce))] {
					l.apply(pipe, e)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
			l.cpu.follow += cpu() - c0
			c0 = cpu()
			for i := cr; i < cr1; i++ {
				u := readers[i]
				pipe := rdb.Pipeline()
				built := pipe.HExists(ctx, l.keys.FollowingVersions(u), SentinelBuilt)
				pipe.SScan(ctx, l.keys.Following(u), 0, "", FollowingScanCount)
				pipe.SMIsMember(ctx, l.keys.Following(u), reads[i]...)
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatal(err)
				}
				if !built.Val() {
					b.Fatalf("%s: following state of %d not built", l.name, u)
				}
			}
			l.cpu.read += cpu() - c0
		}
	}
	// Both layouts answer the same after the same events.
	for _, u := range users[:200] {
		p, err := rdb.SMembers(ctx, prevKeys.Following(u)).Result()
		if err != nil {
			b.Fatal(err)
		}
		c, err := rdb.SMembers(ctx, compKeys.Following(u)).Result()
		if err != nil {
			b.Fatal(err)
		}
		if len(p) != len(c) {
			b.Fatalf("following:{%d}: %d members in the previous layout, %d in the compact one", u, len(p), len(c))
		}
		np, _ := rdb.HGet(ctx, prevKeys.Followers(u), "count").Int64()
		nc, _ := rdb.HGet(ctx, compKeys.Followers(u), "count").Int64()
		if np != nc || nc != count[u] {
			b.Fatalf("count of %d: previous %d, compact %d, want %d", u, np, nc, count[u])
		}
	}
	for _, l := range layouts {
		perEdge(l, fmt.Sprintf("after %d follow events", len(evs)))
		b.ReportMetric(mem[l.name], l.name+"-B/edge")
		b.ReportMetric(l.cpu.follow.Seconds()*1e6/float64(len(evs)), l.name+"-follow-µs")
		b.ReportMetric(l.cpu.read.Seconds()*1e6/float64(len(reads)), l.name+"-read-µs")
	}
}

// The previous layout's scripts, as they were, for the comparison.
var (
	// previousFollowerCountScript: KEYS[1] followers:{followee}; ARGV[1]
	// follower id; ARGV[2] stream version; ARGV[3] '1' for Followed.
	previousFollowerCountScript = redis.NewScript(`
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
	// previousFollowingScript: KEYS[1] following:{follower}; KEYS[2]
	// following_v:{follower}; ARGV[1] followee; ARGV[2] stream version;
	// ARGV[3] the version field.
	previousFollowingScript = redis.NewScript(`
local function membership(a)
  local f = tonumber(redis.call('HGET', KEYS[2], a) or '0')
  local m = tonumber(redis.call('HGET', KEYS[2], 'm:' .. a) or '0')
  if f % 2 == 1 and m % 2 == 0 then
    redis.call('SADD', KEYS[1], a)
  else
    redis.call('SREM', KEYS[1], a)
  end
end
local v = tonumber(ARGV[2])
local cur = tonumber(redis.call('HGET', KEYS[2], ARGV[3]) or '0')
if v <= cur then return 0 end
redis.call('HSET', KEYS[2], ARGV[3], ARGV[2])
membership(ARGV[1])
return 1
`)
)
