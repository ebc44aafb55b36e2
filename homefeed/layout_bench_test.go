package homefeed

import (
	"context"
	"github.com/feedco/feed/readmodel"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/internal/redisinfo"
	"github.com/feedco/feed/testkit/testenv"
)

// BenchmarkInboxLayouts pushes the same posts into the same inboxes in each
// inbox layout, on a redis-server of its own (so nothing else counts in its
// CPU): benchInboxes inboxes, each post pushed to benchFanout of them,
// first until the inboxes hold InboxMax entries each (fill), then half as
// many again (steady: full inboxes, trims or merges included). It reports,
// for the steady phase, Redis CPU per pushed entry (INFO's used_cpu_sys +
// used_cpu_user) and the client's CPU per pushed entry (getrusage of this
// process), the fill phase's Redis CPU per entry, and MEMORY USAGE summed
// over the inboxes' keys divided by their real entries, of full inboxes
// (B/entry) and of half full ones, half way through the fill; then the
// Redis and client CPU of a home read's inbox page (one round trip each,
// the first page and one half way down) and the Redis CPU of removing a
// post from an inbox (the deletion fan-out's step). Run it with
// -benchtime=1x; each sub-benchmark is one whole run.
//
//   - zset-listpack: the baseline of a sorted set per inbox (zsetBaseline,
//     here: the product has no sorted-set inbox), the raw ZADD +
//     ZREMRANGEBYRANK pair per push; zset-max-listpack-entries 1024.
//   - zset-skiplist-pair: the same with zset-max-listpack-entries 128.
//   - packed: APPEND to the buffer, the merge script when the reply says so
//     (packed.go).
//   - packed-interleaved: the same, the posts pushed in a shuffled order
//     within windows of benchInterleave posts, as the inbox projector's
//     consumers of several partitions deliver them: most merges then find
//     their buffer out of order.
func BenchmarkInboxLayouts(b *testing.B) {
	for _, l := range []struct {
		name       string
		listpack   int
		push       func(benchCtx, []int64, int64, int64)
		interleave int
	}{
		{"zset-listpack", 1024, benchZsetPair, 1},
		{"zset-skiplist-pair", 128, benchZsetPair, 1},
		{"packed", 1024, benchPackedPush, 1},
		{"packed-interleaved", 1024, benchPackedPush, benchInterleave},
	} {
		b.Run(l.name, func(b *testing.B) {
			srv := testenv.StartRedisServer(b)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 4})
			defer rdb.Close()
			ctx := context.Background()
			if err := rdb.ConfigSet(ctx, "zset-max-listpack-entries", strconv.Itoa(l.listpack)).Err(); err != nil {
				b.Fatal(err)
			}
			for range b.N {
				benchLayout(b, ctx, rdb, l.name, l.push, l.interleave)
			}
		})
	}
}

const (
	benchInboxes = 2000
	benchFanout  = 300
	benchReads   = 5000
	benchReadN   = 27 // the home read's over-fetch for a page of 20
	// posts removed, each from about benchFanout inboxes
	benchRemovals = 20
	// posts a window of packed-interleaved's shuffled delivery
	benchInterleave = 8
)

type benchCtx struct {
	ctx context.Context
	rdb *redis.Client
	zs  zsetBaseline
	pk  Inboxes
	pol readmodel.Policy
	b   *testing.B
}

func benchLayout(b *testing.B, ctx context.Context, rdb *redis.Client, name string, push func(benchCtx, []int64, int64, int64), interleave int) {
	packed := strings.HasPrefix(name, "packed")
	if err := rdb.FlushAll(ctx).Err(); err != nil { // the benchmark's own server
		b.Fatal(err)
	}
	pol := readmodel.DefaultPolicy()
	keys := readmodel.Keys{Prefix: "b:"}
	c := benchCtx{ctx: ctx, rdb: rdb, zs: zsetBaseline{prefix: keys.Prefix}, pk: NewInboxes(keys, pol), pol: pol, b: b}
	for u := int64(1); u <= benchInboxes; u++ { // built, empty inboxes
		var err error
		if packed {
			err = c.pk.WriteRebuilt(ctx, rdb, u, nil)
		} else {
			err = c.zs.WriteRebuilt(ctx, rdb, u, nil)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(42, 42))
	users := make([]int64, benchInboxes)
	for i := range users {
		users[i] = int64(i + 1)
	}
	fillPosts := benchInboxes * pol.InboxMax / benchFanout
	steadyPosts := fillPosts / 2
	k := int64(0)
	type delivery struct {
		users  []int64
		id, ms int64
	}
	var window []delivery
	run := func(posts int) (redisUs, clientUs float64) {
		r0, c0 := redisCPU(b, ctx, rdb), clientCPU()
		for p := range posts {
			// benchFanout distinct followers (a partial shuffle)
			for i := range benchFanout {
				j := i + rng.IntN(len(users)-i)
				users[i], users[j] = users[j], users[i]
			}
			ms := testBaseMs + k
			window = append(window, delivery{slices.Clone(users[:benchFanout]), snow(ms, k), ms})
			k++
			if len(window) == interleave || p == posts-1 {
				rng.Shuffle(len(window), func(i, j int) { window[i], window[j] = window[j], window[i] })
				for _, d := range window {
					push(c, d.users, d.id, d.ms)
				}
				window = window[:0]
			}
		}
		n := float64(posts * benchFanout)
		return (redisCPU(b, ctx, rdb) - r0).Seconds() * 1e6 / n, (clientCPU() - c0).Seconds() * 1e6 / n
	}
	// memory sums MEMORY USAGE over the inboxes' keys and counts their
	// real entries.
	memory := func() (mem, entries int64) {
		pipe := rdb.Pipeline()
		var usage []*redis.IntCmd
		var cards []*redis.IntCmd
		for u := int64(1); u <= benchInboxes; u++ {
			if packed {
				s, bk := c.pk.Keys(u)
				usage = append(usage, pipe.MemoryUsage(ctx, s, 0), pipe.MemoryUsage(ctx, bk, 0))
			} else {
				usage = append(usage, pipe.MemoryUsage(ctx, c.zs.Key(u), 0))
				cards = append(cards, pipe.ZCard(ctx, c.zs.Key(u)))
			}
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			b.Fatal(err)
		}
		for _, u := range usage {
			mem += u.Val() // a missing buffer is 0
		}
		for _, cc := range cards {
			entries += cc.Val() - 1 // ~built
		}
		if packed {
			for u := int64(1); u <= benchInboxes; u++ {
				ids, err := c.pk.Posts(ctx, rdb, u)
				if err != nil {
					b.Fatal(err)
				}
				entries += int64(len(ids))
			}
		} else {
			// ~floor, where a trim left one
			p := rdb.Pipeline()
			var fl []*redis.FloatCmd
			for u := int64(1); u <= benchInboxes; u++ {
				fl = append(fl, p.ZScore(ctx, c.zs.Key(u), readmodel.SentinelFloor))
			}
			_, _ = p.Exec(ctx)
			for _, f := range fl {
				if f.Err() == nil {
					entries--
				}
			}
		}
		return mem, entries
	}
	halfRedis, _ := run(fillPosts / 2)
	halfMem, halfEntries := memory() // inboxes half full, none trimmed yet
	restRedis, _ := run(fillPosts - fillPosts/2)
	fillRedis := (halfRedis*float64(fillPosts/2) + restRedis*float64(fillPosts-fillPosts/2)) / float64(fillPosts)
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	steadyRedis, steadyClient := run(steadyPosts)
	stats := rdb.Info(ctx, "commandstats").Val()

	mem, entries := memory()
	// Reads: one pipeline each (a home read's round trip), the first page
	// and a page from a cursor in the middle of the inbox.
	readUs := func(deep bool) (redisUs, clientUs float64) {
		r0, c0 := redisCPU(b, ctx, rdb), clientCPU()
		from := int64(readmodel.MaxScoreMs)
		if deep {
			from = testBaseMs + k - int64(pol.InboxMax)*benchInboxes/benchFanout/2 // about half way down a full inbox
		}
		for i := range benchReads {
			u := int64(1 + rng.IntN(benchInboxes))
			pipe := rdb.Pipeline()
			var err error
			if packed {
				r := c.pk.QueueRead(ctx, pipe, u, from, benchReadN)
				if err = readmodel.ExecReads(ctx, pipe); err == nil {
					var p Page
					p, err = r.Result()
					if err == nil && len(p.Entries) != benchReadN {
						b.Fatalf("read %d: %d entries", i, len(p.Entries))
					}
				}
			} else {
				r := c.zs.QueueRead(ctx, pipe, u, from, benchReadN)
				if err = readmodel.ExecReads(ctx, pipe); err == nil {
					_, err = r.Result()
				}
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		return (redisCPU(b, ctx, rdb) - r0).Seconds() * 1e6 / benchReads, (clientCPU() - c0).Seconds() * 1e6 / benchReads
	}
	readRedis, readClient := readUs(false)
	deepRedis, _ := readUs(true)

	// Cleanup: a post deleted from every inbox it was pushed to (the
	// newest posts' fan-out), pipelined as the deletion's fan-out is.
	r0 := redisCPU(b, ctx, rdb)
	removals := 0
	for i := range benchRemovals {
		post := snow(testBaseMs+k-1-int64(i), k-1-int64(i))
		if err := readmodel.Exec(ctx, rdb, func(pipe redis.Pipeliner) {
			for u := int64(1); u <= benchInboxes; u += benchInboxes / benchFanout {
				if packed {
					c.pk.QueueRemove(ctx, pipe, u, []int64{post})
				} else {
					c.zs.QueueRemove(ctx, pipe, u, post)
				}
			}
		}); err != nil {
			b.Fatal(err)
		}
		removals += (benchInboxes + benchInboxes/benchFanout - 1) / (benchInboxes / benchFanout)
	}
	removeRedis := (redisCPU(b, ctx, rdb) - r0).Seconds() * 1e6 / float64(removals)

	enc := ""
	if !packed {
		enc = rdb.ObjectEncoding(ctx, c.zs.Key(1)).Val()
	}
	b.ReportMetric(float64(mem)/float64(entries), "B/entry")
	b.ReportMetric(float64(halfMem)/float64(halfEntries), "half-full-B/entry")
	b.ReportMetric(steadyRedis, "redis-µs/push")
	b.ReportMetric(steadyClient, "client-µs/push")
	b.ReportMetric(fillRedis, "fill-redis-µs/push")
	b.ReportMetric(float64(entries)/benchInboxes, "entries/inbox")
	b.ReportMetric(readRedis, "redis-µs/read")
	b.ReportMetric(readClient, "client-µs/read")
	b.ReportMetric(deepRedis, "redis-µs/deep-read")
	b.ReportMetric(removeRedis, "redis-µs/remove")
	b.Logf("%s: %d bytes over %d entries (encoding %q), %d posts x %d; steady phase:\n%s", name, mem, entries, enc, fillPosts+steadyPosts, benchFanout, stats)
}

// benchZsetPair is the raw pair: ZADD and ZREMRANGEBYRANK to InboxMax.
func benchZsetPair(c benchCtx, users []int64, post, ms int64) {
	pipe := c.rdb.Pipeline()
	m := strconv.FormatInt(post, 10)
	for _, u := range users {
		k := c.zs.Key(u)
		pipe.ZAdd(c.ctx, k, redis.Z{Score: float64(ms), Member: m})
		pipe.ZRemRangeByRank(c.ctx, k, 0, int64(-c.pol.InboxMax-2)) // ~built kept
	}
	if _, err := pipe.Exec(c.ctx); err != nil {
		c.b.Fatal(err)
	}
}

// benchPackedPush is the packed layout's push of one post (PushAll).
func benchPackedPush(c benchCtx, users []int64, post, _ int64) {
	if _, err := c.pk.PushAll(c.ctx, c.rdb, users, c.pk.NewPush(post)); err != nil {
		c.b.Fatal(err)
	}
}

// redisCPU is the server's CPU time so far (redisinfo.CPU).
func redisCPU(b *testing.B, ctx context.Context, rdb *redis.Client) time.Duration {
	d, err := redisinfo.CPU(ctx, rdb)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// clientCPU is this process's user + system CPU.
func clientCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// zsetBaseline is a sorted set per inbox, `feed:{u}` (member the post id,
// score its millisecond, ~built at +inf), the baseline the packed layout is
// measured against.
type zsetBaseline struct{ prefix string }

func (z zsetBaseline) Key(u int64) string {
	return z.prefix + "feed:{" + strconv.FormatInt(u, 10) + "}"
}

func (z zsetBaseline) WriteRebuilt(ctx context.Context, rdb redis.UniversalClient, u int64, _ []readmodel.Entry) error {
	return rdb.ZAdd(ctx, z.Key(u), redis.Z{Score: math.Inf(1), Member: readmodel.SentinelBuilt}).Err()
}

// zsetRead is a queued first or deeper page of a baseline inbox.
type zsetRead struct{ cmd *redis.ZSliceCmd }

func (r zsetRead) Result() ([]redis.Z, error) { return r.cmd.Result() }

func (z zsetBaseline) QueueRead(ctx context.Context, pipe redis.Pipeliner, u, fromMs int64, n int) zsetRead {
	max := "+inf"
	if fromMs < readmodel.MaxScoreMs {
		max = strconv.FormatInt(fromMs, 10)
	}
	return zsetRead{pipe.ZRevRangeByScoreWithScores(ctx, z.Key(u), &redis.ZRangeBy{Max: max, Min: "-inf", Count: int64(n + 1)})}
}

func (z zsetBaseline) QueueRemove(ctx context.Context, pipe redis.Pipeliner, u, post int64) {
	pipe.ZRem(ctx, z.Key(u), strconv.FormatInt(post, 10))
}
