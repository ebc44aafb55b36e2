package projections_test

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/kafkatest"
	"github.com/feedco/feed/testkit/testenv"
)

// BenchmarkFanout measures inbox fan-out from Kafka to Redis beside the raw
// Redis ceiling of the naive command pair, in the same run and the same
// zset encoding:
//
//   - 24 authors, two per partition of the 12-partition topic (chosen by the
//     producer's hash, so every partition is busy), with 1,000 to 5,000
//     active followers each out of a pool of 5,000 users, 3 posts each;
//   - every inbox full: 500 entries for the raw run; for the projector the
//     sampled trims' steady state (steadyExtra: 500 - slack up to 500 plus
//     the sampling overshoot, in the proportions the policy keeps them);
//     plus ~floor and ~built;
//   - "entries/s": PostCreated messages published to the embedded broker
//     until the inbox projector has written every entry;
//   - "raw-1/s": ZADD + ZREMRANGEBYRANK per follower in 1,000-follower
//     pipelines from one goroutine; "raw-12/s": the same from 12 goroutines
//     (one per partition's pair of authors, as the projector runs them);
//     "x-raw" is entries/s over the better of the two;
//   - "redis-cpu-µs/entry" and "raw-redis-cpu-µs/entry": Redis main-thread
//     CPU per entry in the projector run and the raw-12 run (INFO cpu), the
//     work the design costs Redis apart from how the shared CPU was split;
//     "pg-cpu-µs/entry": the CPU of the projector's PostgreSQL backends
//     (/proc; the follower queries), which the raw runs do not pay;
//   - "bytes/entry": MEMORY USAGE of a full 500-entry inbox / 500;
//     "bytes/kept": the mean MEMORY USAGE of 200 of the projector's inboxes
//     after the run / 500 (what the trim slack costs).
//
// Encodings: "listpack" sets zset-max-listpack-entries 1024 for the run,
// "skiplist" 128 (the server default); the server's value is restored in a
// cleanup, also when the benchmark fails.
//
//	go test -run '^$' -bench Fanout -benchtime 1x -count 3 ./projections/
//
// -fanout.cache-rows, -fanout.parallel and -fanout.slack change one lever
// of the projector's config at a time (see their help).
func BenchmarkFanout(b *testing.B) {
	for _, enc := range []struct {
		name     string
		listpack string
	}{{"listpack", "1024"}, {"skiplist", "128"}} {
		b.Run(enc.name, func(b *testing.B) { benchFanout(b, enc.listpack) })
	}
}

// Knobs to measure one lever at a time (0 or -1: the default config).
var (
	benchCacheRows = flag.Int("fanout.cache-rows", 0, "BenchmarkFanout: the inbox projector's FollowerCacheRows (-1: off)")
	benchParallel  = flag.Int("fanout.parallel", 0, "BenchmarkFanout: FanoutParallel")
	benchSlack     = flag.Int("fanout.slack", -1, "BenchmarkFanout: InboxTrimSlack with InboxTrimEvery 16 (-1: the default policy)")
	benchBand      = flag.Int("fanout.band", 0, "BenchmarkFanout: InboxTrimBand (0: the default for the policy; with -fanout.slack, the slack: trims start over 500)")
)

const (
	benchPool       = 5000
	benchPartitions = 12
	benchPosts      = 3 // per author
)

// benchFollowers is how many followers author i gets: 1,000 to 5,000.
func benchFollowers(i, n int) int { return 1000 + i*4000/(n-1) }

// partitionOf is the partition sarama's hash partitioner (the publisher's)
// gives a Kafka key.
func partitionOf(key int64, partitions int32) int32 {
	h := fnv.New32a()
	h.Write([]byte(strconv.FormatInt(key, 10)))
	p := int32(h.Sum32()) % partitions
	if p < 0 {
		p = -p
	}
	return p
}

func benchFanout(b *testing.B, listpack string) {
	ctx := context.Background()
	w := newWorld(b)
	rd := testenv.NewRedis(b)
	old, err := rd.Client.ConfigGet(ctx, "zset-max-listpack-entries").Result()
	if err != nil {
		b.Skipf("CONFIG GET not allowed: %v", err)
	}
	if err := rd.Client.ConfigSet(ctx, "zset-max-listpack-entries", listpack).Err(); err != nil {
		b.Skipf("CONFIG SET not allowed: %v", err)
	}
	b.Cleanup(func() {
		if err := rd.Client.ConfigSet(context.Background(), "zset-max-listpack-entries", old["zset-max-listpack-entries"]).Err(); err != nil {
			b.Errorf("restore zset-max-listpack-entries: %v", err)
		}
	})

	var first int64
	if err := w.db.Pool.QueryRow(ctx, `WITH u AS (INSERT INTO users (name) SELECT 'f' FROM generate_series(1, $1::int) RETURNING id)
		SELECT min(id) FROM u`, benchPool).Scan(&first); err != nil {
		b.Fatal(err)
	}
	w.exec(`INSERT INTO user_activity (user_id, last_seen_at) SELECT id, now() FROM users WHERE id >= $1`, first)
	// Two authors per partition.
	perPartition := map[int32][]int64{}
	var authors []int64
	for len(authors) < 2*benchPartitions {
		a := w.user(true)
		if p := partitionOf(a, benchPartitions); len(perPartition[p]) < 2 {
			perPartition[p] = append(perPartition[p], a)
			authors = append(authors, a)
		}
	}
	followers := make(map[int64]int, len(authors))
	total := 0
	for i, a := range authors {
		n := benchFollowers(i, len(authors))
		off := i * benchPool / len(authors) // spread: every user follows about 14 authors
		w.exec(`INSERT INTO follows (follower_id, followee_id) SELECT id, $1 FROM users
			WHERE id >= $2 AND id < $2 + $3 AND (id - $2 + $4) % $3 < $5`, a, first, benchPool, off, n)
		w.exec(`UPDATE users SET follower_count = $2 WHERE id = $1`, a, n)
		followers[a] = n
		total += n * benchPosts
	}
	base := time.Now().Add(-24 * time.Hour).UnixMilli()
	// fill writes every pool inbox under prefix: 500 entries plus extra(v),
	// COPYed server-side from one template per size (fast even under load):
	// sorted sets for the raw runs (zsetKey), packed inboxes (ids of
	// millisecond base + e, ~floor at base - 1, ~built) for the projector.
	fill := func(prefix string, extra func(v int64) int64, packed bool) {
		keys := readmodel.Keys{Prefix: prefix}
		tmpl := map[int64]string{}
		pipe := rd.Client.Pipeline()
		for v := first; v < first+benchPool; v++ {
			x := extra(v)
			t, ok := tmpl[x]
			if !ok {
				t = prefix + "template:" + strconv.FormatInt(x, 10)
				tmpl[x] = t
				if packed {
					sealed := make([]byte, 0, 8*(500+x+1))
					for e := int64(0); e < 500+x; e++ {
						sealed = binary.BigEndian.AppendUint64(sealed, uint64((base+e-snowflake.Epoch.UnixMilli())<<22|x))
					}
					var fl [8]byte
					binary.BigEndian.PutUint64(fl[:], uint64(base-1))
					sealed = append(append(sealed, 1, 1), fl[2:]...) // ~built, the floor

					if err := rd.Client.Set(ctx, t, sealed, 0).Err(); err != nil {
						b.Fatal(err)
					}
				} else {
					zs := make([]redis.Z, 0, 500+x+2)
					for e := int64(0); e < 500+x; e++ {
						zs = append(zs, redis.Z{Score: float64(base + e), Member: strconv.FormatInt(1<<60+x<<20+e, 10)})
					}
					zs = append(zs, redis.Z{Score: float64(base - 1), Member: readmodel.SentinelFloor}, redis.Z{Score: math.Inf(1), Member: readmodel.SentinelBuilt})
					if err := rd.Client.ZAdd(ctx, t, zs...).Err(); err != nil {
						b.Fatal(err)
					}
				}
			}
			if packed {
				pipe.Copy(ctx, t, homefeed.Key(keys, v), 0, true)
			} else {
				pipe.Copy(ctx, t, zsetKey(keys, v), 0, true)
			}
			if pipe.Len() == 500 {
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	// The follower ids of each author, in the projector's (keyset) order.
	followerIDs := map[int64][]int64{}
	for _, a := range authors {
		rows, err := w.db.Pool.Query(ctx, `SELECT follower_id FROM follows WHERE followee_id = $1 ORDER BY follower_id`, a)
		if err != nil {
			b.Fatal(err)
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				b.Fatal(err)
			}
			followerIDs[a] = append(followerIDs[a], id)
		}
		rows.Close()
	}
	// rawAuthor pushes benchPosts posts of author a with the naive pair.
	rawAuthor := func(rk readmodel.Keys, ai int, a int64) error {
		ids := followerIDs[a]
		for p := 0; p < benchPosts; p++ {
			member := strconv.FormatInt(1<<61+int64(p*100+ai), 10)
			score := float64(base + 1000 + int64(p*100+ai))
			for lo := 0; lo < len(ids); lo += 1000 {
				pipe := rd.Client.Pipeline()
				for _, v := range ids[lo:min(lo+1000, len(ids))] {
					pipe.ZAdd(ctx, zsetKey(rk, v), redis.Z{Score: score, Member: member})
					pipe.ZRemRangeByRank(ctx, zsetKey(rk, v), 0, -501)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					return err
				}
			}
		}
		return nil
	}
	raw := func(parallel bool) (float64, float64) {
		prefix := testenv.RandomName("t") + ":"
		fill(prefix, func(int64) int64 { return 0 }, false)
		defer testenv.DeletePrefix(ctx, rd.Client, prefix)
		rk := readmodel.Keys{Prefix: prefix}
		r0, s0 := cpuNow(b, rd.Client)
		c0 := redisStats(b, rd.Client)
		start := time.Now()
		if parallel {
			var wg sync.WaitGroup
			errs := make(chan error, benchPartitions)
			for _, pair := range perPartition {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for _, a := range pair {
						if err := rawAuthor(rk, indexOf(authors, a), a); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		} else {
			for ai, a := range authors {
				if err := rawAuthor(rk, ai, a); err != nil {
					b.Fatal(err)
				}
			}
		}
		rate := float64(total) / time.Since(start).Seconds()
		rus, sus := cpuPerEntry(b, rd.Client, r0, s0, total)
		logStatsSince(b, rd.Client, c0, total, fmt.Sprintf("raw (parallel %v)", parallel))
		// The server is shared: log the encoding the inboxes really had.
		b.Logf("raw (parallel %v): %.0f/s, CPU µs/entry: Redis %.2f, client %.2f; inboxes are %s", parallel, rate, rus, sus, rd.Client.ObjectEncoding(ctx, zsetKey(rk, first)).Val())
		return rate, rus
	}

	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		raw1, _ := raw(false)
		raw12, rawUs := raw(true)
		b.Logf("raw runs with fills: %v", time.Since(t0).Round(time.Millisecond))

		// The projector: PostCreated messages through Kafka, inbox group.
		prefix := testenv.RandomName("t") + ":"
		// The sampled trims' steady state (steadySizes): what a trim keeps
		// up to where trims start, plus the sampling overshoot.
		cfg := projections.Config{Keys: readmodel.Keys{Prefix: prefix}, FollowerCacheRows: *benchCacheRows, FanoutParallel: *benchParallel, InboxTrimBand: *benchBand}
		if *benchSlack >= 0 { // with the sampling set, the slack is taken as it is
			cfg.InboxTrimSlack, cfg.InboxTrimEvery = *benchSlack, 16
		}
		eff := projections.EffectiveConfig(cfg)
		steady := steadySizes(eff.InboxMax-eff.InboxTrimSlack+eff.InboxTrimBand, eff.InboxTrimBand, eff.InboxTrimEvery)
		b.Logf("projector trim policy: keep %d, trim over %d, 1 push in %d sampled", eff.InboxMax-eff.InboxTrimSlack, eff.InboxMax-eff.InboxTrimSlack+eff.InboxTrimBand, eff.InboxTrimEvery)
		fill(prefix, func(v int64) int64 { return steady[(v*7919)%int64(len(steady))] - 500 }, true)
		w.envs = w.envs[:0]
		for p := 0; p < benchPosts; p++ {
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
		w.envs = nil
		bk := kafkatest.Start(b)
		topic := bk.Topic(b, benchPartitions)
		bk.PublishEvents(b, topic, warmup...)
		m, _ := projections.NewMetrics(nil)
		ps, err := projections.New(cfg, w.db.Pool, rd.Client, m, projections.NameInbox)
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
		r0, s0 := cpuNow(b, rd.Client)
		c0 := redisStats(b, rd.Client)
		pg0 := pgCPU(b, w.db)
		start := time.Now()
		bk.PublishEvents(b, topic, posts...)
		for m.EntriesWritten() < int64(total)+1 {
			time.Sleep(2 * time.Millisecond) // polling: the end of the fan-out, timed to 2 ms
			if time.Since(start) > 5*time.Minute {
				b.Fatalf("fan-out wrote %d of %d entries", m.EntriesWritten(), total)
			}
		}
		rate := float64(total) / time.Since(start).Seconds()
		us, sus := cpuPerEntry(b, rd.Client, r0, s0, total)
		logStatsSince(b, rd.Client, c0, total, "projector")
		pgUs := pgCPU(b, w.db).since(pg0) * 1e6 / float64(total)
		cancel()
		<-done
		keys := readmodel.Keys{Prefix: prefix}
		b.Logf("projector: %.0f/s, CPU µs/entry: Redis %.2f, process %.2f, PostgreSQL %.2f; whole run %v", rate, us, sus, pgUs, time.Since(t0).Round(time.Millisecond))
		if in, ok := ps[0].(*projections.Inbox); ok {
			b.Logf("follower lists read from PostgreSQL: %d (cache rows %d)", in.FollowerLoads(), in.FollowerRows())
		}
		kept, sizes := keptBytes(b, rd.Client, keys, first)
		b.Logf("projector inboxes after the run (200 sampled): sizes %v", sizes)
		testenv.DeletePrefix(ctx, rd.Client, prefix)
		bk.Stop()

		b.ReportMetric(rate, "entries/s")
		b.ReportMetric(raw1, "raw-1/s")
		b.ReportMetric(raw12, "raw-12/s")
		b.ReportMetric(rate/max(raw1, raw12), "x-raw")
		b.ReportMetric(kept, "bytes/kept")
		b.ReportMetric(us, "redis-cpu-µs/entry")
		b.ReportMetric(rawUs, "raw-redis-cpu-µs/entry")
		b.ReportMetric(pgUs, "pg-cpu-µs/entry")
	}
	b.ReportMetric(bytesPerEntry(b, rd), "bytes/entry")
}

// cpuNow returns the CPU seconds used so far by Redis's main thread (INFO
// cpu: actual CPU, not the wall time a command spent preempted on the
// shared machine; other clients' commands count too) and by this process
// (the projector, the embedded broker, the publisher, the raw driver).
func cpuNow(b *testing.B, rdb redis.UniversalClient) (redisSec, selfSec float64) {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user_main_thread" || name == "used_cpu_sys_main_thread") {
			x, _ := strconv.ParseFloat(v, 64)
			redisSec += x
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	selfSec = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	return redisSec, selfSec
}

// redisStats reads INFO commandstats (calls and µs per command) and the
// main thread's user and system CPU (as the commands "cpu-user" and
// "cpu-sys", calls 0).
func redisStats(b *testing.B, rdb redis.UniversalClient) map[string][2]float64 {
	info, err := rdb.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string][2]float64{}
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(name, "cmdstat_"):
			var calls, usec float64
			for _, kv := range strings.Split(v, ",") {
				k, x, _ := strings.Cut(kv, "=")
				switch k {
				case "calls":
					calls, _ = strconv.ParseFloat(x, 64)
				case "usec":
					usec, _ = strconv.ParseFloat(x, 64)
				}
			}
			out[strings.TrimPrefix(name, "cmdstat_")] = [2]float64{calls, usec}
		case name == "used_cpu_user_main_thread", name == "used_cpu_sys_main_thread":
			x, _ := strconv.ParseFloat(v, 64)
			out["cpu-"+strings.TrimSuffix(strings.TrimPrefix(name, "used_cpu_"), "_main_thread")] = [2]float64{0, x * 1e6}
		}
	}
	return out
}

// logStatsSince logs, per command run since s0 (by other clients of a
// shared server too), the calls and µs per call and per entry, and the
// main thread's user and system CPU per entry: where Redis's time went
// (command execution against reading requests and writing replies).
func logStatsSince(b *testing.B, rdb redis.UniversalClient, s0 map[string][2]float64, entries int, what string) {
	s1 := redisStats(b, rdb)
	var names []string
	for n := range s1 {
		if s1[n] != s0[n] {
			names = append(names, n)
		}
	}
	sort.Slice(names, func(i, j int) bool { return s1[names[i]][1]-s0[names[i]][1] > s1[names[j]][1]-s0[names[j]][1] })
	var parts []string
	exec := 0.0
	for _, n := range names {
		calls, usec := s1[n][0]-s0[n][0], s1[n][1]-s0[n][1]
		if calls == 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f µs/entry", n, usec/float64(entries)))
			continue
		}
		if n != "evalsha" { // its inner commands are counted on their own too
			exec += usec
		}
		parts = append(parts, fmt.Sprintf("%s %.0f calls %.2f µs/call %.2f µs/entry", n, calls, usec/calls, usec/float64(entries)))
	}
	b.Logf("%s, Redis by command: %s; commands without evalsha %.2f µs/entry", what, strings.Join(parts, "; "), exec/float64(entries))
}

// cpuPerEntry is the CPU µs per entry of Redis and of this process since
// (r0, s0).
func cpuPerEntry(b *testing.B, rdb redis.UniversalClient, r0, s0 float64, entries int) (redisUs, selfUs float64) {
	r1, s1 := cpuNow(b, rdb)
	return (r1 - r0) * 1e6 / float64(entries), (s1 - s0) * 1e6 / float64(entries)
}

// steadySizes returns 1,000 inbox sizes (real entries) in the proportions
// that the sampled trims keep inboxes in over a long run, for the policy
// (max, slack, every): trims start over max (InboxMax - slack + band) and
// cut back to max - slack (pass the band as slack), so the sizes seen by a
// push are max - slack .. max once each per trim cycle, then max + j with
// the odds (1 - 1/every)^j that j more pushes went by unsampled.
func steadySizes(max, slack, every int) []int64 {
	q := 1 - 1/float64(every)
	var sizes []int64
	var weights []float64
	total := 0.0
	for n := max - slack; ; n++ {
		w := 1.0
		if n > max {
			w = math.Pow(q, float64(n-max))
		}
		if w < 1e-4 {
			break
		}
		sizes, weights = append(sizes, int64(n)), append(weights, w)
		total += w
	}
	out := make([]int64, 0, 1000)
	acc, i := 0.0, 0
	for k := 0; k < 1000; k++ {
		u := (float64(k) + 0.5) / 1000 * total
		for acc+weights[i] < u {
			acc += weights[i]
			i++
		}
		out = append(out, sizes[i])
	}
	return out
}

func indexOf(s []int64, v int64) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// keptBytes is the mean MEMORY USAGE of 200 of the pool's inboxes divided by
// the 500 entries a reader is served, and the min/median/max entry counts.
func keptBytes(b *testing.B, rdb redis.UniversalClient, keys readmodel.Keys, first int64) (float64, [3]int64) {
	ctx := context.Background()
	var sum int64
	var sizes []int64
	inboxes := homefeed.NewInboxes(keys, readmodel.Policy{})
	for v := first; v < first+benchPool; v += benchPool / 200 {
		sealed, buf := inboxes.Keys(v)
		sum += rdb.MemoryUsage(ctx, sealed, 0).Val() + rdb.MemoryUsage(ctx, buf, 0).Val()
		ids, err := inboxes.Posts(ctx, rdb, v)
		if err != nil {
			b.Fatal(err)
		}
		sizes = append(sizes, int64(len(ids)))
	}
	sort.Slice(sizes, func(i, j int) bool { return sizes[i] < sizes[j] })
	var entries int64
	for _, n := range sizes {
		entries += n
	}
	b.Logf("inboxes after the run: %.1f real entries on average, %.2f bytes per entry held", float64(entries)/float64(len(sizes)), float64(sum)/float64(entries))
	return float64(sum) / float64(len(sizes)) / 500, [3]int64{sizes[0], sizes[len(sizes)/2], sizes[len(sizes)-1]}
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
	zs = append(zs, redis.Z{Score: float64(base - 1), Member: readmodel.SentinelFloor}, redis.Z{Score: math.Inf(1), Member: readmodel.SentinelBuilt})
	rd.Client.ZAdd(ctx, k, zs...)
	n := rd.Client.MemoryUsage(ctx, k, 0).Val()
	b.Logf("full inbox: %s, MEMORY USAGE %d bytes", rd.Client.ObjectEncoding(ctx, k).Val(), n)
	return float64(n) / 500
}

// pgTicks is the CPU time (clock ticks, /proc) used so far by the
// PostgreSQL client backends of the benchmark's own database (not
// autovacuum, which the fresh tables attract).
type pgTicks map[int]int64

// pgCPU reads the CPU ticks of db's backends (PostgreSQL on this machine).
func pgCPU(b *testing.B, db *testenv.DB) pgTicks {
	rows, err := db.Pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'`)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	out := pgTicks{}
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			b.Fatal(err)
		}
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue // not local, or gone
		}
		// Fields after the command name (which ends with ')'): utime and
		// stime are the 12th and 13th.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			out[pid] = u + s
		}
	}
	return out
}

// since is the CPU seconds used after t0 (backends started since count
// whole); the kernel's clock ticks are 100 a second on Linux.
func (t pgTicks) since(t0 pgTicks) float64 {
	var d int64
	for pid, v := range t {
		d += v - t0[pid]
	}
	return float64(d) / 100
}

// BenchmarkFollowerTargets is the cost of finding a post's push targets
// when the author's follower list is not cached (the common case: most
// authors post seldom): "join" loads the list with each follower's
// last_seen_at (an index probe into user_activity per follower), "rows"
// loads the follower ids alone (an index-only scan), a row per follower,
// and asks the activity index (activity.go), "antijoin" is "rows" with the
// ids in one int8[] row, muters anti-joined (an index probe into mutes per
// follower), "index" is the load the cache makes (followerIDsSQL: the
// followers' array, and the muters' apart from a range of mutes_muted_idx).
// 300 followers per author, every one active.
// Reports PostgreSQL's CPU per list and per follower, and this process's.
func BenchmarkFollowerTargets(b *testing.B) {
	ctx := context.Background()
	w := newWorld(b)
	rd := testenv.NewRedis(b)
	const users, authors, followers = 10000, 200, 300
	var first int64
	if err := w.db.Pool.QueryRow(ctx, `WITH u AS (INSERT INTO users (name) SELECT 'f' FROM generate_series(1, $1::int) RETURNING id)
		SELECT min(id) FROM u`, users).Scan(&first); err != nil {
		b.Fatal(err)
	}
	w.exec(`INSERT INTO user_activity (user_id, last_seen_at) SELECT id, now() FROM users WHERE id >= $1`, first)
	// Author i (user first+i) is followed by 300 users spread over all.
	w.exec(`INSERT INTO follows (follower_id, followee_id)
		SELECT f, e FROM (SELECT $1 + (a * 7919 + k * 31) % $2 AS f, $1 + a AS e
			FROM generate_series(0, $3 - 1) a, generate_series(1, $4) k) x
		WHERE f <> e ON CONFLICT DO NOTHING`, first, users, authors, followers)
	w.exec(`ANALYZE follows`)
	w.exec(`ANALYZE user_activity`)
	ps := newProjectors(b, w, rd.Client, projections.Config{Keys: readmodel.Keys{Prefix: rd.Prefix}})
	var inbox *projections.Inbox
	for _, p := range ps {
		if p.Name() == projections.NameInbox {
			inbox = p.(*projections.Inbox)
		}
	}
	for _, c := range []struct {
		name string
		fn   func(context.Context, int64) (int, error)
	}{{"join", inbox.JoinTargets}, {"rows", inbox.RowTargets}, {"antijoin", inbox.AntiJoinTargets}, {"index", inbox.ColdTargets}} {
		b.Run(c.name, func(b *testing.B) {
			if _, err := c.fn(ctx, first); err != nil { // the activity index's first read
				b.Fatal(err)
			}
			pg0 := pgCPU(b, w.db)
			_, self0 := cpuNow(b, rd.Client)
			targets := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				n, err := c.fn(ctx, first+int64(i%authors))
				if err != nil {
					b.Fatal(err)
				}
				targets += n
			}
			b.StopTimer()
			if targets < b.N*followers*9/10 {
				b.Fatalf("%d targets for %d lists, want about %d each", targets, b.N, followers)
			}
			pgUs := pgCPU(b, w.db).since(pg0) * 1e6 / float64(b.N)
			_, self1 := cpuNow(b, rd.Client)
			b.ReportMetric(pgUs, "pg-cpu-µs/list")
			b.ReportMetric(pgUs*float64(b.N)/float64(targets), "pg-cpu-µs/follower")
			b.ReportMetric((self1-self0)*1e6/float64(b.N), "self-cpu-µs/list")
		})
	}
}

// zsetKey is user's inbox as a sorted set, the raw runs' baseline (the
// product's inboxes are packed).
func zsetKey(keys readmodel.Keys, user int64) string {
	return keys.Prefix + "feed:{" + strconv.FormatInt(user, 10) + "}"
}
