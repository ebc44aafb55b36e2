package queries

import (
	"context"
	"encoding/binary"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/internal/redisinfo"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// benchData seeds 200 readers who follow 50 authors (2 of them
// celebrities) with 100 posts each, and projects warm inboxes.
func benchData(b *testing.B) (*Feed, []int64, redis.UniversalClient, readmodel.Keys, *pgxpool.Pool) {
	db := testenv.NewDB(b)
	r := testenv.NewRedis(b)
	keys := readmodel.Keys{Prefix: r.Prefix}
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			b.Fatal(err)
		}
	}
	exec(`INSERT INTO users (name) SELECT 'u' || g FROM generate_series(1, 250) g`)
	// Post ids are Snowflakes of their millisecond, as the write side's
	// (an inbox orders by id). The posts are of the last 5,000 seconds,
	// inside the post horizon as a live feed's are: their counts and the
	// viewer's state are Redis's (through the read cache), not
	// PostgreSQL's.
	start := time.Now().Add(-5001 * time.Second).Truncate(time.Second)
	exec(`INSERT INTO posts (id, author_id, content, created_at)
SELECT (($2::bigint + g * 1000 - $1::bigint) << 22) | g, 1 + g % 50, 'post ' || g, to_timestamp($2::bigint / 1000.0) + g * interval '1 s' FROM generate_series(1, 5000) g`,
		snowflake.Epoch.UnixMilli(), start.UnixMilli())
	exec(`INSERT INTO follows (follower_id, followee_id) SELECT r, a FROM generate_series(51, 250) r, generate_series(1, 50) a`)
	f, err := New(Config{Keys: keys}, db.Pool, r.Client)
	if err != nil {
		b.Fatal(err)
	}
	runFeed(b, f)
	bb := &bundle{t: b, ctx: ctx, feed: f, db: db, rdb: r.Client, keys: keys}
	var readers []int64
	for u := int64(51); u <= 250; u++ {
		readers = append(readers, u)
	}
	bb.projectAll([]int64{1, 2}, readers, 500, 500)
	for _, u := range readers {
		args := make([]any, 50)
		for a := range 50 {
			args[a] = strconv.Itoa(a + 1)
		}
		r.Client.SAdd(ctx, keys.Following(u), args...)
	}
	return f, readers, r.Client, keys, db.Pool
}

// BenchmarkHome reads first pages of 20 from warm inboxes, 32 goroutines.
// Sub-benchmarks: the full query; the raw Redis work a read needs
// (GETRANGE of the newest 21 ids + MGET 20, then a pipeline of the 20
// posts' HMGET counts:{p} and the reader's two SMISMEMBER); the naive
// fan-out-on-read pull SQL; a page far below the inbox's floor (the
// 2,000th of the 5,000 posts a reader follows, the inbox holding the
// newest 500), which the query side reads from PostgreSQL (pg_read.go):
// what a page past an inbox's bound costs against a first page.
func BenchmarkHome(b *testing.B) {
	f, readers, rdb, keys, pool := benchData(b)
	ctx := context.Background()
	var n atomic.Int64
	next := func() int64 { return readers[int(n.Add(1))%len(readers)] }
	report := func(b *testing.B, start time.Time) {
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "reads/s")
	}
	b.Run("query", func(b *testing.B) {
		b.SetParallelism(16)
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, err := f.Home(ctx, next(), "", 20)
				if err != nil || len(p.Items) != 20 {
					b.Errorf("page %d items, %v", len(p.Items), err)
					return
				}
			}
		})
		report(b, start)
	})
	b.Run("below-floor", func(b *testing.B) {
		deep := encodeCursor(below(1767225600000 + 2000*1000))
		b.SetParallelism(16)
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, err := f.Home(ctx, next(), deep, 20)
				if err != nil || len(p.Items) != 20 {
					b.Errorf("page %d items, %v", len(p.Items), err)
					return
				}
			}
		})
		report(b, start)
	})
	eng := readmodel.NewEngagement(keys)
	b.Run("raw-redis", func(b *testing.B) {
		b.SetParallelism(16)
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				u := next()
				m, err := rdb.GetRange(ctx, homefeed.Key(keys, u), -8*22, -9).Result()
				if err != nil || len(m) != 8*21 {
					b.Errorf("%d bytes, %v", len(m), err)
					return
				}
				ks := make([]string, 20)
				ids := make([]int64, 20)
				for i := range ks {
					ids[i] = int64(binary.BigEndian.Uint64([]byte(m[8*(20-i) : 8*(21-i)])))
					ks[i] = keys.Post(ids[i])
				}
				if err := rdb.MGet(ctx, ks...).Err(); err != nil {
					b.Error(err)
					return
				}
				// The items' dynamic part: each post's counts and the
				// reader's likes and reposts, in one pipeline.
				pipe := rdb.Pipeline()
				eng.QueueCounts(ctx, pipe, ids)
				eng.QueueViewerState(ctx, pipe, u, ids)
				if _, err := pipe.Exec(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
		report(b, start)
	})
	b.Run("pull-sql", func(b *testing.B) {
		b.SetParallelism(8)
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				rows, err := pool.Query(ctx, `SELECT p.id, p.author_id, p.content, p.created_at FROM posts p
JOIN follows f ON f.followee_id = p.author_id WHERE f.follower_id = $1 AND NOT p.deleted
ORDER BY p.created_at DESC, p.id DESC LIMIT 20`, next())
				if err != nil {
					b.Error(err)
					return
				}
				rows.Close()
			}
		})
		report(b, start)
	})
}

// BenchmarkHomeReadCache reads first pages of 20 from warm inboxes, 16
// goroutines, with the read cache on and off (a second Feed over the same
// read models), on FEED_TEST_REDIS's server or cluster; "writes" also
// adds a post to a random reader's inbox after every 10th read (through
// the main client: invalidations, as the projectors' writes). Reported
// per read: this process's CPU (user+sys, µs), the Redis CPU of every
// master (µs), the cache's hit ratio (hits/lookups), and the pings sent
// on the invalidation connections (the reads' barriers share them).
func BenchmarkHomeReadCache(b *testing.B) {
	on, readers, rdb, keys, pool := benchData(b)
	off, err := New(Config{Keys: keys, ReadCacheKeys: -1}, pool, rdb)
	if err != nil {
		b.Fatal(err)
	}
	runFeed(b, off)
	ctx := context.Background()
	redisCPU := func() time.Duration {
		var mu sync.Mutex
		var total time.Duration
		each := func(ctx context.Context, c *redis.Client) error {
			d, err := redisinfo.CPU(ctx, c)
			mu.Lock()
			total += d
			mu.Unlock()
			return err
		}
		var err error
		if cl, ok := rdb.(*redis.ClusterClient); ok {
			err = cl.ForEachMaster(ctx, each)
		} else {
			err = each(ctx, rdb.(*redis.Client))
		}
		if err != nil {
			b.Fatal(err)
		}
		return total
	}
	procCPU := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var n, posted atomic.Int64
	next := func() int64 { return readers[int(n.Add(1))%len(readers)] }
	for _, writes := range []bool{false, true} {
		for _, tc := range []struct {
			name string
			f    *Feed
		}{{"cache=on", on}, {"cache=off", off}} {
			name := tc.name
			if writes {
				name += "/writes"
			}
			f := tc.f
			b.Run(name, func(b *testing.B) {
				for range 2 { // warm: the process caches, and the read cache
					for _, u := range readers {
						if _, err := f.Home(ctx, u, "", 20); err != nil {
							b.Fatal(err)
						}
					}
					waitIdle(f)
				}
				if f.cache != nil {
					if err := f.cache.sync(ctx); err != nil {
						b.Fatal(err)
					}
				}
				hits, misses := int64(0), int64(0)
				pings := func() (n uint64) {
					if f.cache != nil {
						for _, t := range f.cache.trackers() {
							t.pingMu.Lock()
							n += t.sent
							t.pingMu.Unlock()
						}
					}
					return n
				}
				pings0 := pings()
				if f.cache != nil {
					hits, misses = f.cache.stats.hits.Load(), f.cache.stats.misses.Load()
				}
				r0, p0 := redisCPU(), procCPU()
				b.SetParallelism(16)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						p, err := f.Home(ctx, next(), "", 20)
						if err != nil || len(p.Items) != 20 {
							b.Errorf("page %d items, %v", len(p.Items), err)
							return
						}
						p.Release() // as the API, once it encoded the page
						if i++; writes && i%10 == 0 {
							u := next()
							id := (time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()-snowflake.Epoch.UnixMilli())<<22 | (1<<21 + posted.Add(1))
							err := rdb.Append(ctx, homefeed.Key(keys, u)+"+", string(binary.BigEndian.AppendUint64(nil, uint64(id)))).Err()
							if err != nil {
								b.Error(err)
								return
							}
						}
					}
				})
				b.StopTimer()
				r1, p1 := redisCPU(), procCPU()
				b.ReportMetric(float64((p1-p0).Microseconds())/float64(b.N), "proc-cpu-µs/read")
				b.ReportMetric(float64((r1-r0).Microseconds())/float64(b.N), "redis-cpu-µs/read")
				if f.cache != nil {
					h, m := f.cache.stats.hits.Load()-hits, f.cache.stats.misses.Load()-misses
					b.ReportMetric(float64(h)/float64(max(h+m, 1)), "hit-ratio")
					b.ReportMetric(float64(pings()-pings0)/float64(b.N), "pings/read")
				}
			})
		}
	}
}
