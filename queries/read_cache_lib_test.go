package queries

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/internal/redisinfo"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// BenchmarkHomeClientSideCache serves the same home pages three ways, on
// one Redis server (the shared 127.0.0.1:6379 unless FEED_TEST_REDIS_URL
// says otherwise): without a client-side cache (arm=none), through
// read_cache.go (arm=readcache), and through go-redis's own client-side
// cache (arm=goredis: a RESP3 client with ClientSideCacheConfig, under a
// Feed whose read cache is off). go-redis caches single commands only (a
// pipeline bypasses its cache), so the goredis arm's client runs every
// pipeline made only of commands it caches as single commands
// (cscPipelines): the home read's one pipeline of GET, GETRANGE,
// ZREVRANGEBYSCORE, HEXISTS and SMISMEMBER.
//
// 200 readers follow 50 authors (2 of them celebrities) with 100 posts
// each; packed inboxes, warm. Each arm reads first pages of 20 with 16
// goroutines per core; "writes" also appends, after every 10th read, an
// old post's id to a random reader's inbox buffer through a client of its
// own (an invalidation, a page unchanged). The arms run in turns, rounds
// times (FEED_BENCH_ROUNDS, default 3), each arm on its own client and
// Feed. Reported per read: this process's CPU (getrusage, µs), Redis's
// CPU (INFO cpu, µs), the round trips (writes on the arm's data
// connections: the read cache's invalidation connection is not counted),
// allocations, the cache's hit ratio, and (arm=readcache) the share of
// reads that found no generation of the read cache (its invalidation
// connection down: read uncached). At the end, the medians of the
// rounds and their ratios to arm=none are logged (go test -v).
func BenchmarkHomeClientSideCache(b *testing.B) {
	bb, readers, oldID := cscBenchData(b)
	if _, ok := bb.rdb.(*redis.Client); !ok {
		b.Skip("go-redis's client-side cache serves a single Redis server only")
	}
	ctx := context.Background()
	base := bb.rdb.(*redis.Client).Options()

	type arm struct {
		name  string
		f     *Feed
		trips *atomic.Int64
		lib   *redis.Client // goredis: the client whose cache serves the reads
	}
	newArm := func(name string) arm {
		a := arm{name: name, trips: new(atomic.Int64)}
		o := *base
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		o.Dialer = countingDialer(a.trips)
		cfg := Config{Keys: bb.keys, ReadCacheKeys: -1}
		switch name {
		case "readcache":
			cfg.ReadCacheKeys = 0
			cfg.dataDial = countingDialer(a.trips)
			cfg.invalDial = countingDialer(new(atomic.Int64)) // keep-alive pings are not reads
		case "goredis":
			o.Protocol = 3
			o.ClientSideCacheConfig = &redis.ClientSideCacheConfig{MaxEntries: 4 * defaultReadCacheKeys}
		}
		c := redis.NewClient(&o)
		b.Cleanup(func() { _ = c.Close() })
		if name == "goredis" {
			c.AddHook(cscPipelines{c})
			a.lib = c
		}
		f, err := New(cfg, bb.db.Pool, c)
		if err != nil {
			b.Fatal(err)
		}
		runFeed(b, f)
		a.f = f
		return a
	}
	arms := []arm{newArm("none"), newArm("readcache"), newArm("goredis")}

	procCPU := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	redisCPU := func() time.Duration {
		d, err := redisinfo.CPU(ctx, bb.rdb)
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	hits := func(a arm) (h, m int64) {
		switch {
		case a.lib != nil:
			s := a.lib.CSCStats()
			return int64(s.Hits), int64(s.Misses)
		case a.f.cache != nil:
			return a.f.cache.stats.hits.Load(), a.f.cache.stats.misses.Load()
		}
		return 0, 0
	}
	warm := func(b *testing.B, a arm) {
		if c := a.f.cache; c != nil {
			for { // the first generation starts in the background
				changed := c.genChanged()
				if c.current() != nil {
					break
				}
				<-changed
			}
		}
		for range 2 {
			for _, u := range readers {
				if _, err := a.f.Home(ctx, u, "", 20); err != nil {
					b.Fatal(err)
				}
			}
			waitIdle(a.f)
		}
		if c := a.f.cache; c != nil {
			if err := c.sync(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}

	metrics := []string{"proc-cpu-µs/read", "redis-cpu-µs/read", "trips/read", "allocs/read", "hit-ratio", "uncached/read"}
	direct := func(a arm) int64 {
		if a.f.cache != nil {
			return a.f.cache.stats.direct.Load()
		}
		return 0
	}
	// "variant arm metric" -> the value of each round (a sub-benchmark runs
	// with b.N = 1 before its measured run, which overwrites it)
	results := map[string][]float64{}
	var n, appended atomic.Int64
	next := func() int64 { return readers[int(n.Add(1))%len(readers)] }
	old := string(binary.BigEndian.AppendUint64(nil, uint64(oldID)))
	rounds := 3
	if s, err := strconv.Atoi(os.Getenv("FEED_BENCH_ROUNDS")); err == nil && s > 0 {
		rounds = s
	}
	for _, writes := range []bool{false, true} {
		variant := "reads"
		if writes {
			variant = "writes"
		}
		for round := range rounds {
			for _, a := range arms {
				b.Run(variant+"/arm="+a.name, func(b *testing.B) {
					warm(b, a)
					h0, m0 := hits(a)
					t0, d0 := a.trips.Load(), direct(a)
					var ms0, ms1 runtime.MemStats
					runtime.ReadMemStats(&ms0)
					r0, p0 := redisCPU(), procCPU()
					b.SetParallelism(16)
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						i := 0
						for pb.Next() {
							p, err := a.f.Home(ctx, next(), "", 20)
							if err != nil || len(p.Items) != 20 {
								b.Errorf("page of %d items, %v", len(p.Items), err)
								return
							}
							if i++; writes && i%10 == 0 {
								appended.Add(1)
								if err := bb.rdb.Append(ctx, inboxBuffer(bb.keys, next()), old).Err(); err != nil {
									b.Error(err)
									return
								}
							}
						}
					})
					b.StopTimer()
					r1, p1 := redisCPU(), procCPU()
					runtime.ReadMemStats(&ms1)
					h, m := hits(a)
					h, m = h-h0, m-m0
					per := func(x float64) float64 { return x / float64(b.N) }
					vals := []float64{
						per(float64((p1 - p0).Nanoseconds()) / 1e3),
						per(float64((r1 - r0).Nanoseconds()) / 1e3),
						per(float64(a.trips.Load() - t0)),
						per(float64(ms1.Mallocs - ms0.Mallocs)),
						float64(h) / float64(max(h+m, 1)),
						per(float64(direct(a) - d0)),
					}
					for i, v := range vals {
						b.ReportMetric(v, metrics[i])
						k := variant + " " + a.name + " " + metrics[i]
						if len(results[k]) <= round {
							results[k] = append(results[k], 0)
						}
						results[k][round] = v
					}
				})
			}
		}
	}
	// Medians of the rounds, and their ratios to arm=none's.
	for _, variant := range []string{"reads", "writes"} {
		var sb strings.Builder
		fmt.Fprintf(&sb, "%s, medians of %d rounds (ratio to arm=none):\n", variant, rounds)
		for _, a := range arms {
			fmt.Fprintf(&sb, "  %-10s", a.name)
			for _, m := range metrics {
				v := median(results[variant+" "+a.name+" "+m])
				fmt.Fprintf(&sb, "  %s %.3g", m, v)
				if none := median(results[variant+" none "+m]); none > 0 && m != "hit-ratio" && m != "uncached/read" {
					fmt.Fprintf(&sb, " (%.2f)", v/none)
				}
			}
			sb.WriteByte('\n')
		}
		b.Log(sb.String())
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// cscBenchData seeds 200 readers (ids 51-250) who follow 50 authors (ids
// 1-50; 1 and 2 celebrities) with 100 posts each (Snowflake ids of their
// millisecond, as the packed layout needs), and writes the read models
// warm: packed inboxes of 500, timelines, the post cache, following sets
// built. It returns the oldest post's id too.
func cscBenchData(b *testing.B) (*bundle, []int64, int64) {
	db := testenv.NewDB(b)
	r := testenv.NewRedis(b)
	keys := readmodel.Keys{Prefix: r.Prefix}
	ctx := context.Background()
	bb := &bundle{t: b, ctx: ctx, db: db, rdb: r.Client, keys: keys}
	bb.exec(`INSERT INTO users (name) SELECT 'u' || g FROM generate_series(1, 250) g`)
	bb.exec(`INSERT INTO posts (id, author_id, content, created_at)
SELECT (((extract(epoch FROM t) * 1000)::bigint - $1) << 22) | g, 1 + g % 50, 'post ' || g, t
FROM generate_series(1, 5000) g, LATERAL (SELECT timestamptz '2026-01-01' + g * interval '1 s' AS t) s`,
		snowflake.Epoch.UnixMilli())
	bb.exec(`INSERT INTO follows (follower_id, followee_id) SELECT r, a FROM generate_series(51, 250) r, generate_series(1, 50) a`)
	var readers []int64
	for u := int64(51); u <= 250; u++ {
		readers = append(readers, u)
	}
	r.Client.SAdd(ctx, keys.Celebrities(), readmodel.SentinelBuilt)
	bb.projectAll([]int64{1, 2}, readers, 500, 500)
	args := make([]any, 50)
	for a := range 50 {
		args[a] = strconv.Itoa(a + 1)
	}
	for _, u := range readers {
		r.Client.SAdd(ctx, keys.Following(u), args...)
		r.Client.HSet(ctx, keys.FollowingVersions(u), readmodel.SentinelBuilt, 1)
	}
	var oldest int64
	if err := db.Pool.QueryRow(ctx, `SELECT id FROM posts WHERE author_id > 2 ORDER BY created_at LIMIT 1`).Scan(&oldest); err != nil {
		b.Fatal(err)
	}
	return bb, readers, oldest
}

// countingDialer dials TCP and counts the writes on its connections in
// n: go-redis writes a command, or a pipeline, in one write, so they are
// the round trips.
func countingDialer(n *atomic.Int64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, n: n}, nil
	}
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
}

// cscPipelines runs a pipeline made only of commands go-redis's
// client-side cache holds as single commands through c, so that the
// cache serves them (go-redis sends a pipeline as it is, uncached). A
// cached command costs no round trip; each miss costs one.
type cscPipelines struct{ c *redis.Client }

func (cscPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (cscPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h cscPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if !cscCacheable[c.Name()] {
				return next(ctx, cmds)
			}
		}
		var first error
		for _, c := range cmds {
			if err := h.c.Process(ctx, c); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
}

// cscCacheable are the commands of the home read (and of the other reads
// of a page) that go-redis's client-side cache holds (its allow-list,
// csc_commands.go).
var cscCacheable = map[string]bool{
	"get": true, "getrange": true, "mget": true, "zrevrangebyscore": true, "zrangebyscore": true,
	"zrange": true, "zscore": true, "hexists": true, "hget": true, "smismember": true, "sismember": true,
}

// inboxBuffer is user's inbox push buffer, the key a push appends to.
func inboxBuffer(keys readmodel.Keys, user int64) string {
	_, buf := homefeed.NewInboxes(keys, readmodel.Policy{}).Keys(user)
	return buf
}
