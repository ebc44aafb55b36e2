package projections_test

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/internal/kafka/kafkatest"
	"github.com/feedco/feed/internal/rkeys"
	"github.com/feedco/feed/internal/testenv"
	"github.com/feedco/feed/projections"
)

// BenchmarkFanout measures inbox fan-out from Kafka to Redis (authors with
// 1k-5k active followers, every inbox already full: 500 entries and the
// sentinels), beside the raw Redis ceiling measured in the same run: ZADD +
// ZREMRANGEBYRANK per follower in 1,000-follower pipelines on equally full
// inboxes. Both with the server's default zset encoding (skiplist past 128
// entries) and with zset-max-listpack-entries raised so inboxes stay
// listpacks (set for the run, restored after). Also reports MEMORY USAGE of
// a full 500-entry inbox per entry.
//
//	go test -run '^$' -bench Fanout -count 3 ./projections/
func BenchmarkFanout(b *testing.B) {
	for _, enc := range []struct {
		name     string
		listpack string
	}{{"skiplist", "128"}, {"listpack", "1024"}} {
		b.Run(enc.name, func(b *testing.B) { benchFanout(b, enc.listpack) })
	}
}

const benchPool = 5000

var benchAuthors = []int{1000, 2000, 3000, 4000, 5000, 2500}

func benchFanout(b *testing.B, listpack string) {
	ctx := context.Background()
	w := newWorld(b)
	rd := testenv.NewRedis(b)
	old := rd.Client.ConfigGet(ctx, "zset-max-listpack-entries").Val()["zset-max-listpack-entries"]
	if err := rd.Client.ConfigSet(ctx, "zset-max-listpack-entries", listpack).Err(); err != nil {
		b.Skipf("CONFIG SET not allowed: %v", err)
	}
	b.Cleanup(func() { rd.Client.ConfigSet(context.Background(), "zset-max-listpack-entries", old) })

	var first int64
	if err := w.db.Pool.QueryRow(ctx, `WITH u AS (INSERT INTO users (name) SELECT 'f' FROM generate_series(1, $1::int) RETURNING id)
		SELECT min(id) FROM u`, benchPool).Scan(&first); err != nil {
		b.Fatal(err)
	}
	w.exec(`INSERT INTO user_activity (user_id, last_seen_at) SELECT id, now() FROM users WHERE id >= $1`, first)
	var authors []int64
	for _, n := range benchAuthors {
		a := w.user(true)
		w.exec(`INSERT INTO follows (follower_id, followee_id) SELECT id, $1 FROM users WHERE id >= $2 AND id < $3`, a, first, first+int64(n))
		w.exec(`UPDATE users SET follower_count = $2 WHERE id = $1`, a, n)
		authors = append(authors, a)
	}
	base := time.Now().Add(-24 * time.Hour).UnixMilli()
	fill := func(prefix string) {
		keys := rkeys.Keys{Prefix: prefix}
		for u := first; u < first+benchPool; u += 100 {
			pipe := rd.Client.Pipeline()
			for v := u; v < u+100 && v < first+benchPool; v++ {
				zs := make([]redis.Z, 0, 502)
				for e := int64(0); e < 500; e++ {
					zs = append(zs, redis.Z{Score: float64(base + e), Member: strconv.FormatInt(1<<60+v<<20+e, 10)})
				}
				zs = append(zs, redis.Z{Score: float64(base - 1), Member: rkeys.SentinelFloor}, redis.Z{Score: math.Inf(1), Member: rkeys.SentinelBuilt})
				pipe.ZAdd(ctx, keys.Inbox(v), zs...)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	const postsPerAuthor = 8
	total := 0
	for _, n := range benchAuthors {
		total += n * postsPerAuthor
	}

	for i := 0; i < b.N; i++ {
		// Raw ceiling: the naive pair per follower, 1,000 a pipeline.
		raw := testenv.RandomName("t") + ":"
		fill(raw)
		rk := rkeys.Keys{Prefix: raw}
		start := time.Now()
		for p := 0; p < postsPerAuthor; p++ {
			for ai, n := range benchAuthors {
				member := strconv.FormatInt(1<<61+int64(p*100+ai), 10)
				score := float64(base + 1000 + int64(p*100+ai))
				for u := first; u < first+int64(n); u += 1000 {
					pipe := rd.Client.Pipeline()
					for v := u; v < u+1000 && v < first+int64(n); v++ {
						pipe.ZAdd(ctx, rk.Inbox(v), redis.Z{Score: score, Member: member})
						pipe.ZRemRangeByRank(ctx, rk.Inbox(v), 0, -501)
					}
					if _, err := pipe.Exec(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		rawRate := float64(total) / time.Since(start).Seconds()
		// The server is shared: another process may change the setting
		// mid-run. Log the encoding the inboxes really had.
		b.Logf("raw run: inboxes are %s", rd.Client.ObjectEncoding(ctx, rk.Inbox(first)).Val())
		testenv.DeletePrefix(ctx, rd.Client, raw)

		// The projector: PostCreated messages through Kafka, inbox group.
		prefix := testenv.RandomName("t") + ":"
		fill(prefix)
		w.envs = w.envs[:0]
		for p := 0; p < postsPerAuthor; p++ {
			for _, a := range authors {
				w.post(a)
			}
		}
		posts := w.envs
		w.envs = nil
		warm := w.user(true)
		fan := w.user(true)
		w.follow(fan, warm)
		w.post(warm) // one entry (the follow backfill copies it; the push then adds nothing)
		warmup := w.envs
		bk := kafkatest.Start(b)
		topic := bk.Topic(b, 12)
		publish(b, bk.Addrs(), topic, warmup)
		m, _ := projections.NewMetrics(nil)
		ps, err := projections.New(projections.Config{Keys: rkeys.Keys{Prefix: prefix}}, w.db.Pool, rd.Client, m, projections.NameInbox)
		if err != nil {
			b.Fatal(err)
		}
		r, err := projections.NewRunner(projections.RunnerConfig{Brokers: bk.Addrs(), Topic: topic, Logger: quietLogger(), LagInterval: -1, Metrics: m}, ps...)
		if err != nil {
			b.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		testenv.Eventually(b, time.Minute, "the warm-up post", func() bool {
			select {
			case err := <-done:
				b.Fatalf("runner stopped: %v", err)
			default:
			}
			return m.EntriesWritten() >= 1
		})
		start = time.Now()
		publish(b, bk.Addrs(), topic, posts)
		for m.EntriesWritten() < int64(total)+1 {
			time.Sleep(2 * time.Millisecond)
			if time.Since(start) > 5*time.Minute {
				b.Fatalf("fan-out wrote %d of %d entries", m.EntriesWritten(), total)
			}
		}
		rate := float64(total) / time.Since(start).Seconds()
		b.Logf("projector run: inboxes are %s", rd.Client.ObjectEncoding(ctx, rkeys.Keys{Prefix: prefix}.Inbox(first)).Val())
		cancel()
		<-done
		testenv.DeletePrefix(ctx, rd.Client, prefix)
		bk.Stop()

		b.ReportMetric(rate, "entries/s")
		b.ReportMetric(rawRate, "raw-followers/s")
		b.ReportMetric(rate/rawRate, "x-raw")
	}
	b.ReportMetric(bytesPerEntry(b, rd), "bytes/entry")
}

// bytesPerEntry is MEMORY USAGE of a full 500-entry inbox (19-digit post
// ids, millisecond scores, both sentinels) divided by 500.
func bytesPerEntry(b *testing.B, rd *testenv.Redis) float64 {
	ctx := context.Background()
	k := rd.Prefix + "feed:{memory}"
	zs := make([]redis.Z, 0, 502)
	base := time.Now().UnixMilli()
	for e := int64(0); e < 500; e++ {
		zs = append(zs, redis.Z{Score: float64(base + e*37), Member: strconv.FormatInt(int64(1)<<62+e*4096*37, 10)})
	}
	zs = append(zs, redis.Z{Score: float64(base - 1), Member: rkeys.SentinelFloor}, redis.Z{Score: math.Inf(1), Member: rkeys.SentinelBuilt})
	rd.Client.ZAdd(ctx, k, zs...)
	n := rd.Client.MemoryUsage(ctx, k, 0).Val()
	b.Logf("full inbox: %s, MEMORY USAGE %d bytes", rd.Client.ObjectEncoding(ctx, k).Val(), n)
	return float64(n) / 500
}
