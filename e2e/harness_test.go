package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/cdc"
	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/internal/auth"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/internal/kafka/kafkatest"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/internal/testenv"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/readmodel"
)

// policies are the knobs of the system under test. They are set low so a
// small workload reaches every path: celebrities (pull), trims and floors
// (PostgreSQL continuation), timelines past their bound.
type policies struct {
	CelebrityThreshold int64
	InboxMax           int
	InboxTrimSlack     int
	TimelineMax        int
	BackfillPosts      int
	FanoutBatch        int
	CacheTTL           time.Duration
}

func (p policies) String() string {
	return fmt.Sprintf("celebrity threshold %d, inbox max %d (+%d slack), timeline max %d, backfill %d, fan-out batch %d, cache TTL %v",
		p.CelebrityThreshold, p.InboxMax, p.InboxTrimSlack, p.TimelineMax, p.BackfillPosts, p.FanoutBatch, p.CacheTTL)
}

// system is the whole pipeline in this process, on a test's own database,
// Redis prefix, broker and topic.
type system struct {
	pol     policies
	db      *testenv.DB
	rdb     redis.UniversalClient
	keys    readmodel.Keys
	broker  *kafkatest.Broker
	topic   string
	slot    string
	groups  []string
	feed    *queries.Feed
	signer  *auth.Signer
	baseURL string
	http    *http.Client
	projReg *prometheus.Registry
}

const jwtSecret = "e2e-oracle-secret-0123456789abcdef"

// startSystem starts everything and stops it, in reverse order, when the
// test ends. The slot is created before any write, so CDC streams every
// event of the test.
func startSystem(t *testing.T, pol policies) *system {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s := &system{pol: pol, db: testenv.NewDB(t), broker: kafkatest.Start(t)}
	r := testenv.NewRedis(t)
	s.rdb, s.keys = r.Client, readmodel.Keys{Prefix: r.Prefix}
	s.topic = s.broker.Topic(t, 12)
	s.slot = "feed_e2e_" + s.db.Name
	if _, err := s.db.Pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, s.slot); err != nil {
		t.Fatalf("create slot: %v", err)
	}

	var stops []func()
	t.Cleanup(func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	})
	run := func(name string, fn func(context.Context) error) {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- fn(rctx) }()
		var once sync.Once
		stops = append(stops, func() {
			once.Do(func() {
				cancel()
				if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("%s stopped with: %v", name, err)
				}
			})
		})
	}

	// CDC: the event log to the topic.
	pub, err := kafka.NewPublisher(s.broker.Addrs(), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	stops = append(stops, func() { _ = pub.Close() })
	c, err := cdc.New(cdc.Config{
		DatabaseURL:     s.db.URL,
		Slot:            s.slot,
		Topic:           s.topic,
		ConfirmInterval: 100 * time.Millisecond,
		StatusInterval:  time.Second,
		StateInterval:   500 * time.Millisecond,
		MinBackoff:      50 * time.Millisecond,
		MaxBackoff:      time.Second,
		Logger:          log,
	}, s.db.Pool, pub)
	if err != nil {
		t.Fatal(err)
	}
	run("cdc", c.Run)

	// Every projector, in consumer groups of this test's own.
	pcfg := projections.Config{
		Keys:               s.keys,
		CelebrityThreshold: pol.CelebrityThreshold,
		InboxMax:           pol.InboxMax,
		InboxTrimSlack:     pol.InboxTrimSlack,
		TimelineMax:        pol.TimelineMax,
		BackfillPosts:      pol.BackfillPosts,
		FanoutBatch:        pol.FanoutBatch,
	}
	s.projReg = prometheus.NewRegistry()
	pm, err := projections.NewMetrics(s.projReg)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := projections.New(pcfg, s.db.Pool, s.rdb, pm)
	if err != nil {
		t.Fatal(err)
	}
	runner, err := projections.NewRunner(projections.RunnerConfig{
		Brokers:      s.broker.Addrs(),
		Topic:        s.topic,
		GroupPrefix:  testenv.RandomName("e2e") + ".",
		RetryInitial: 20 * time.Millisecond,
		RetryMax:     500 * time.Millisecond,
		DrainTimeout: 10 * time.Second,
		LagInterval:  -1,
		Logger:       log,
		Metrics:      pm,
	}, ps...)
	if err != nil {
		t.Fatal(err)
	}
	s.groups = runner.Groups()
	run("projectors", runner.Run)

	// The query side and the API over httptest.
	s.feed, err = queries.New(queries.Config{
		Keys:              s.keys,
		InboxMax:          pol.InboxMax,
		CelebrityCacheTTL: pol.CacheTTL,
		TimelineCacheSize: queries.MaxLimit + 1,
		Registerer:        prometheus.NewRegistry(),
		Logger:            log,
	}, s.db.Pool, s.rdb)
	if err != nil {
		t.Fatal(err)
	}
	stops = append(stops, s.feed.Close)
	ids, err := snowflake.New(1)
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := commands.New(s.db.Pool, ids, commands.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s.signer, err = auth.NewSigner(jwtSecret)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Config{RequestTimeout: 30 * time.Second}, api.Deps{
		Commands: cmds, Tokens: s.signer, Feed: s.feed, Logger: log,
		Ready: map[string]func(context.Context) error{"postgres": s.db.Pool.Ping},
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	stops = append(stops, hs.Close)
	s.baseURL = hs.URL
	s.http = &http.Client{
		Timeout:   60 * time.Second,
		Transport: &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64},
	}
	return s
}

// quiesce waits until everything written so far has gone all the way
// through: CDC has confirmed (after Kafka acknowledged) a WAL position taken
// after the last write, every consumer group has committed the end of every
// partition (lag 0, as `feed status` reports it), and the query side's
// in-process caches have outlived their TTL.
func (s *system) quiesce(t *testing.T, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	var lsn string
	if err := s.db.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatalf("read WAL position: %v", err)
	}
	for {
		var done bool
		err := s.db.Pool.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn >= $1::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $2`, lsn, s.slot).Scan(&done)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatalf("read slot %s: %v", s.slot, err)
		}
		if done {
			break
		}
		if ctx.Err() != nil {
			st, _ := cdc.Status(context.Background(), s.db.Pool, s.slot)
			t.Fatalf("CDC did not confirm WAL %s within %v: %+v", lsn, timeout, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cdcAt := time.Since(start)
	var lags map[string]int64
	for {
		var err error
		lags, err = projections.ConsumerLag(ctx, s.broker.Addrs(), s.topic, s.groups)
		if err == nil {
			total := int64(0)
			for _, g := range s.groups {
				total += lags[g]
			}
			if total == 0 && len(lags) == len(s.groups) {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("consumer groups did not catch up within %v: lag %v (last error %v)", timeout, lags, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.logProjectionStats(t)
	t.Logf("quiescent: CDC confirmed %s after %v, consumer lag 0 after %v; waiting %v for the query caches",
		lsn, cdcAt.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), s.pol.CacheTTL)
	time.Sleep(s.pol.CacheTTL + 100*time.Millisecond)
}

// poisoned returns how many messages went to the poison topic: each one is
// an event some projector gave up on.
func (s *system) poisoned(t *testing.T) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.broker.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, kafka.PoisonTopic(s.topic))
	if err != nil {
		t.Fatalf("list poison topic offsets: %v", err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// logProjectionStats logs, per projector, the messages handled, the time
// spent applying them and the retries.
func (s *system) logProjectionStats(t *testing.T) {
	t.Helper()
	mfs, err := s.projReg.Gather()
	if err != nil {
		t.Logf("gather projection metrics: %v", err)
		return
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			switch {
			case m.GetHistogram() != nil:
				h := m.GetHistogram()
				t.Logf("%s{%v}: count %d, sum %.3fs", mf.GetName(), labels, h.GetSampleCount(), h.GetSampleSum())

			case m.GetCounter() != nil && mf.GetName() != "feed_projection_messages_total":
				t.Logf("%s{%v}: %.0f", mf.GetName(), labels, m.GetCounter().GetValue())
			}
		}
	}
}
