package cdc

import (
	"cmp"
	"context"
	"fmt"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/testkit/kafkatest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"golang.org/x/sync/errgroup"

	"github.com/feedco/feed/testkit/testenv"
)

// nopPublisher acknowledges at once: the baseline that measures the slot
// and the decoding alone.
type nopPublisher struct{}

func (nopPublisher) Publish(string, ...*message.Message) error { return nil }

// preload commits n post events as a backlog, in transactions of txSize,
// from 4 connections, keyed by 10,000 authors.
func preload(b testing.TB, db *testenv.DB, n, txSize int) {
	b.Helper()
	ctx := context.Background()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for start := 0; start < n; start += txSize {
		g.Go(func() error {
			_, err := db.Pool.Exec(gctx, `
				INSERT INTO events (event_id, stream_id, stream_version, type, payload)
				SELECT gen_random_uuid(), 'post-' || i, 1, 'post.created.v1',
				       jsonb_build_object('postId', i::text, 'authorId', (i % 10000 + 1)::text, 'content', 'backlog post number ' || i,
				                          'createdAt', '2026-01-01T00:00:00.000Z', 'authorFollowers', 300)
				FROM generate_series($1::bigint, $2::bigint) AS i`, start+1, min(start+txSize, n))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
}

func benchLanes() int {
	if v, err := strconv.Atoi(os.Getenv("CDC_BENCH_LANES")); err == nil {
		return v
	}
	return 0
}

// BenchmarkCDCBacklog drains a backlog of 500k committed events (1,000 per
// transaction) from the slot to Kafka and reports events/s from the start
// of CDC to the last acknowledgement. The nop sub-benchmark is the
// baseline of the same run: the slot and decoding with a publisher that
// acknowledges at once.
//
//	go test -run '^$' -bench CDCBacklog -benchtime 1x -count 3 ./cdc/
func BenchmarkCDCBacklog(b *testing.B) {
	const n = 500_000
	for _, sink := range []string{"kafka", "nop"} {
		b.Run(sink, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				bb := setup(b, 12)
				preload(b, bb.db, n, 1000)
				cfg := bb.config()
				cfg.Lanes = benchLanes()
				var walsender int
				var wal0 time.Duration
				cfg.OnStreaming = func() {
					// The walsender serves CDC from now on.
					if err := bb.db.Pool.QueryRow(context.Background(), `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, bb.slot).Scan(&walsender); err == nil {
						wal0 = pidCPU(walsender)
					}
				}
				pubs := []Publisher{nopPublisher{}}
				if sink == "kafka" {
					pubs = benchPublishers(b, bb)
				}
				c, err := New(cfg, bb.db.Pool, pubs...)
				if err != nil {
					b.Fatal(err)
				}
				done := make(chan time.Time, 1)
				var count int
				c.proc.onAck = func(_ item, at time.Time) {
					// Lanes run concurrently.
					ackMu.Lock()
					count++
					if count == n {
						done <- at
					}
					ackMu.Unlock()
				}
				ctx, cancel := context.WithCancel(context.Background())
				start := time.Now()
				cpu0 := processCPU()
				runDone := make(chan struct{})
				go func() {
					defer close(runDone)
					_ = c.Run(ctx)
				}()
				var end time.Time
				select {
				case end = <-done:
				case <-time.After(5 * time.Minute):
					b.Fatalf("backlog not drained in 5 minutes (%d acknowledged)", count)
				}
				cpu := processCPU() - cpu0
				walCPU := pidCPU(walsender) - wal0
				cancel()
				<-runDone
				el := end.Sub(start)
				b.ReportMetric(float64(cpu.Microseconds())/n, "proc-cpu-us/event")
				b.ReportMetric(float64(walCPU.Microseconds())/n, "walsender-cpu-us/event")
				b.ReportMetric(float64(n)/el.Seconds(), "events/s")
				b.ReportMetric(el.Seconds(), "drain-s")
				b.ReportMetric(value(c.m.backpressure), "backpressure-s")
			}
		})
	}
}

var ackMu sync.Mutex

// benchPublishers returns CDC_BENCH_PUBLISHERS publishers (default 1).
func benchPublishers(b testing.TB, bb *bundle) []Publisher {
	n := 1
	if v, err := strconv.Atoi(os.Getenv("CDC_BENCH_PUBLISHERS")); err == nil {
		n = v
	}
	var pubs []Publisher
	for range n {
		p := bb.publisher(b)
		b.Cleanup(func() { _ = p.Close() })
		pubs = append(pubs, p)
	}
	return pubs
}

// BenchmarkCDCLag writes at a steady rate (CDC_BENCH_RATE events/s,
// default 10,000, in transactions of CDC_BENCH_TX events, default 50, from
// 4 connections) for 10 s while CDC runs, and reports the
// commit-to-acknowledgement lag p50/p99 (commit timestamp of the
// transaction to the broker's acknowledgement), and what the visibility
// gate did: snapshot reads per transaction and transactions held.
//
//	go test -run '^$' -bench CDCLag -benchtime 1x -count 3 ./cdc/
//	CDC_BENCH_TX=1 CDC_BENCH_RATE=2000 go test -run '^$' -bench CDCLag -benchtime 1x -count 3 ./cdc/
func BenchmarkCDCLag(b *testing.B) {
	rate := 10_000
	if v, err := strconv.Atoi(os.Getenv("CDC_BENCH_RATE")); err == nil {
		rate = v
	}
	txSize := 50
	if v, err := strconv.Atoi(os.Getenv("CDC_BENCH_TX")); err == nil && v > 0 {
		txSize = v
	}
	const writers = 4
	const dur = 10 * time.Second
	for i := 0; i < b.N; i++ {
		bb := setup(b, 12)
		cfg := bb.config()
		cfg.Lanes = benchLanes()
		c, err := New(cfg, bb.db.Pool, benchPublishers(b, bb)...)
		if err != nil {
			b.Fatal(err)
		}
		var lags, slotLags []time.Duration
		c.proc.onAck = func(it item, at time.Time) {
			ackMu.Lock()
			lags = append(lags, at.Sub(it.txn.commitTime))
			slotLags = append(slotLags, it.txn.receivedAt.Sub(it.txn.commitTime))
			ackMu.Unlock()
		}
		ctx, cancel := context.WithCancel(context.Background())
		runDone := make(chan struct{})
		go func() {
			defer close(runDone)
			_ = c.Run(ctx)
		}()
		// Each writer commits txSize events every interval.
		interval := time.Duration(float64(time.Second) * float64(txSize*writers) / float64(rate))
		var written sync.WaitGroup
		var mu sync.Mutex
		total := 0
		start := time.Now()
		for w := 0; w < writers; w++ {
			written.Add(1)
			go func() {
				defer written.Done()
				next := time.Now()
				for seq := 0; time.Since(start) < dur; seq++ {
					base := (w*10_000_000 + seq*txSize)
					_, err := bb.db.Pool.Exec(ctx, `
						INSERT INTO events (event_id, stream_id, stream_version, type, payload)
						SELECT gen_random_uuid(), 'post-' || i, 1, 'post.created.v1',
						       jsonb_build_object('postId', i::text, 'authorId', (i % 10000 + 1)::text, 'content', 'steady post ' || i,
						                          'createdAt', '2026-01-01T00:00:00.000Z', 'authorFollowers', 300)
						FROM generate_series($1::bigint, $2::bigint) AS i`, base+1, base+txSize)
					if err != nil {
						b.Error(err)
						return
					}
					mu.Lock()
					total += txSize
					mu.Unlock()
					next = next.Add(interval)
					time.Sleep(time.Until(next)) // pacing: the steady rate
				}
			}()
		}
		written.Wait()
		wrote := time.Since(start)
		testenv.Eventually(b, 2*time.Minute, "every event acknowledged", func() bool {
			ackMu.Lock()
			defer ackMu.Unlock()
			return len(lags) >= total
		})
		cancel()
		<-runDone
		ackMu.Lock()
		slices.Sort(lags)
		slices.Sort(slotLags)
		p := func(q float64) float64 { return lags[int(q*float64(len(lags)-1))].Seconds() * 1000 }
		ps := func(q float64) float64 { return slotLags[int(q*float64(len(slotLags)-1))].Seconds() * 1000 }
		b.ReportMetric(ps(0.50), "commit-to-read-p50-ms")
		b.ReportMetric(ps(0.99), "commit-to-read-p99-ms")
		b.ReportMetric(float64(total)/wrote.Seconds(), "written-events/s")
		b.ReportMetric(p(0.50), "p50-ms")
		b.ReportMetric(p(0.99), "p99-ms")
		b.ReportMetric(p(1), "max-ms")
		txs := float64(total) / float64(txSize)
		b.ReportMetric(value(c.m.visibilityReads)/txs, "snapshot-reads/tx")
		b.ReportMetric(value(c.m.visibilityHeld), "held-tx")
		fmt.Fprintf(os.Stderr, "lag: %d events, p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", len(lags), p(0.5), p(0.99), p(1))
		ackMu.Unlock()
	}
}

// BenchmarkPublishBaseline is the sink alone, in the same conditions as
// BenchmarkCDCBacklog: CDC_BENCH_LANES goroutines (default 64) publishing
// 200k envelope-sized messages with distinct keys through one watermill
// publisher to the in-process broker.
//
//	go test -run '^$' -bench PublishBaseline -benchtime 1x -count 3 ./cdc/
func BenchmarkPublishBaseline(b *testing.B) {
	const n = 200_000
	g := cmp.Or(benchLanes(), 64)
	for i := 0; i < b.N; i++ {
		bb := &bundle{broker: kafkatest.Start(b)}
		bb.topic = bb.broker.Topic(b, 12)
		pubs := benchPublishers(b, bb)
		payload := []byte(strings.Repeat("x", 420))
		start := time.Now()
		var wg sync.WaitGroup
		for w := 0; w < g; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pub := pubs[w%len(pubs)]
				for j := w; j < n; j += g {
					m := message.NewMessage(strconv.Itoa(j), payload)
					m.Metadata.Set(kafka.MetaPartitionKey, strconv.Itoa(j%10000))
					m.Metadata.Set(kafka.MetaName, "post.created.v1")
					if err := pub.Publish(bb.topic, m); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		b.ReportMetric(n/time.Since(start).Seconds(), "msgs/s")
	}
}

// processCPU is this process's user+system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pidCPU is another process's user+system CPU time (Linux /proc, 100 Hz
// ticks), 0 when unknown.
func pidCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}
