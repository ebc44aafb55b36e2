// Package systest starts the whole pipeline in the test's process, for the
// tests that check the system end to end (e2e, rebuild): a database of the
// test's own with a logical replication slot, a Redis key prefix, an
// embedded Kafka-protocol broker with a topic, CDC from the slot to the
// topic, every projector, the query side and the command side. Everything
// stops, in reverse order, when the test ends. It is a normal package so
// that several packages' tests can share it, and only tests import it.
package systest

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"go.opentelemetry.io/otel/trace"

	"github.com/feedco/feed/cdc"
	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/internal/tracing"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/kafkatest"
	"github.com/feedco/feed/testkit/testenv"
)

// Config is what differs between the suites that start a system.
type Config struct {
	// Name tags the test's replication slot (feed_{Name}_{database}) and
	// consumer groups, so a leftover says which suite made it.
	Name string
	// Partitions is the number of partitions of the test's topic.
	Partitions int32
	// Projections holds the policies of the projectors; Start sets Keys to
	// the test's prefix. Its InboxMax is the query side's too.
	Projections projections.Config
	// CacheTTL is the query side's celebrity cache TTL.
	CacheTTL time.Duration
	// RefreshSettle is the query side's refresh horizon
	// (queries.Config.RefreshSettle; 0: its default).
	RefreshSettle time.Duration
	// Supervised runs the projectors under a projections.Supervisor, which
	// follows the version registry (`feed rebuild` switches), instead of
	// one Runner at the first versions.
	Supervised bool
	// RedisCluster puts the read models on the Redis Cluster of
	// testenv.NewRedisCluster (skipped, or failed in CI, when it is not
	// running) instead of NewRedis's server.
	RedisCluster bool
	// TracerProvider, when set, traces CDC, the projectors and their Redis
	// calls (internal/tracing), as OTEL_* does for feed's roles.
	TracerProvider trace.TracerProvider
}

// System is a running pipeline and the handles a test reads it with.
type System struct {
	// DB is the test's database, the event log and the inline tables.
	DB *testenv.DB
	// Redis is the client of the read models, all under Prefix.
	Redis  redis.UniversalClient
	Prefix string
	// Keys names the read models at the first versions (no rebuild).
	Keys readmodel.Keys
	// Broker and Topic carry the events from CDC to the projectors.
	Broker *kafkatest.Broker
	Topic  string
	// Slot is CDC's replication slot.
	Slot string
	// GroupPrefix starts the names of the projectors' consumer groups.
	GroupPrefix string
	// Groups are the consumer groups of the projectors when they run under
	// one Runner (nil when Supervised: the registry names them).
	Groups []string
	// Commands is the write side; Feed is the query side.
	Commands *commands.Commands
	Feed     *queries.Feed
	// ProjectionMetrics is the registry of the projectors' metrics.
	ProjectionMetrics *prometheus.Registry
	// Log is the components' logger (warnings and errors to stderr).
	Log *slog.Logger

	pcfg       projections.Config
	pm         *projections.Metrics
	tp         trace.TracerProvider
	supervised bool
	stopCDC    func()
	stopProj   func()
}

// startCDC runs CDC from the system's slot to its topic until StopCDC or
// the end of the test.
func (s *System) startCDC(t testing.TB) {
	t.Helper()
	pub, err := kafka.NewPublisher(s.Broker.Conn(), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cdc.New(s.CDCConfig(), s.DB.Pool, pub)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, "cdc", c.Run)
	s.stopCDC = func() { stop(); _ = pub.Close() }
	t.Cleanup(func() { _ = pub.Close() })
}

// CDCConfig is the configuration of the system's CDC: its slot and topic,
// short intervals.
func (s *System) CDCConfig() cdc.Config {
	return cdc.Config{
		DatabaseURL:     s.DB.URL,
		Slot:            s.Slot,
		Topic:           s.Topic,
		ConfirmInterval: 100 * time.Millisecond,
		StatusInterval:  time.Second,
		StateInterval:   500 * time.Millisecond,
		MinBackoff:      50 * time.Millisecond,
		MaxBackoff:      time.Second,
		Logger:          s.Log,
		TracerProvider:  s.tp,
	}
}

// startProjectors runs every projector on the system's topic until
// StopProjectors or the end of the test.
func (s *System) startProjectors(t testing.TB, except ...string) {
	t.Helper()
	if s.supervised {
		if len(except) > 0 {
			t.Fatal("systest: StartProjectorsExcept with Supervised")
		}
		sup, err := projections.NewSupervisor(projections.SupervisorConfig{
			Projections:  s.pcfg,
			Runner:       s.RunnerConfig(),
			PollInterval: 200 * time.Millisecond,
		}, s.DB.Pool, s.Redis, s.pm)
		if err != nil {
			t.Fatal(err)
		}
		s.stopProj = run(t, "projectors", sup.Run)
		return
	}
	ps, err := projections.New(s.pcfg, s.DB.Pool, s.Redis, s.pm)
	if err != nil {
		t.Fatal(err)
	}
	rc := s.RunnerConfig()
	rc.Metrics = s.pm
	runner, err := projections.NewRunner(rc, ps...)
	if err != nil {
		t.Fatal(err)
	}
	s.Groups = runner.Groups()
	if len(except) > 0 {
		ps = slices.DeleteFunc(ps, func(p projections.Projector) bool { return slices.Contains(except, p.Name()) })
		if runner, err = projections.NewRunner(rc, ps...); err != nil {
			t.Fatal(err)
		}
	}
	s.stopProj = run(t, "projectors", runner.Run)
}

// StopCDC stops CDC (it confirms what Kafka acknowledged and leaves the
// slot inactive), as an operator stops `feed cdc`.
func (s *System) StopCDC() { s.stopCDC() }

// StopProjectors stops the projectors (they drain and commit their
// offsets).
func (s *System) StopProjectors() { s.stopProj() }

// StartProjectors starts the projectors again after StopProjectors, as an
// operator restarts `feed project`: each group resumes at its committed
// offsets.
func (s *System) StartProjectors(t testing.TB) { s.startProjectors(t) }

// StartProjectorsExcept starts, after StopProjectors, every projector but
// the named ones (projections.NameInbox, ...): their groups stay at the
// offsets they committed, as a projector process that is down. Groups
// still lists every group, so WaitConsumed waits for them too.
func (s *System) StartProjectorsExcept(t testing.TB, names ...string) { s.startProjectors(t, names...) }

// ProjectorMetrics are the projectors' metrics (counters the tests read).
func (s *System) ProjectorMetrics() *projections.Metrics { return s.pm }

// MoveToTopic points the system at another topic of its broker and starts
// CDC and the projectors again on it (stop them first): CDC streams from
// its slot's position into it, and the projectors' groups, which have no
// offsets there, read it from the start. As an operator restarts the
// roles with another FEED_TOPIC.
func (s *System) MoveToTopic(t testing.TB, topic string) {
	t.Helper()
	s.Topic = topic
	s.startCDC(t)
	s.startProjectors(t)
}

// Start starts the pipeline. The slot is created before anything is
// written, so CDC streams every event of the test.
func Start(t testing.TB, cfg Config) *System {
	t.Helper()
	ctx := context.Background()
	s := &System{DB: testenv.NewDB(t), Broker: kafkatest.Start(t),
		Log: testenv.Logger()}
	var r *testenv.Redis
	if cfg.RedisCluster {
		r = testenv.NewRedisCluster(t)
	} else {
		r = testenv.NewRedis(t)
	}
	s.Redis, s.Prefix, s.Keys = r.Client, r.Prefix, readmodel.Keys{Prefix: r.Prefix}
	if cfg.TracerProvider != nil {
		s.tp = cfg.TracerProvider
		if err := redisotel.InstrumentTracing(s.Redis, redisotel.WithTracerProvider(tracing.ChildrenOnly(s.tp))); err != nil {
			t.Fatal(err)
		}
	}
	s.Topic = s.Broker.Topic(t, cfg.Partitions)
	s.Slot = "feed_" + cfg.Name + "_" + s.DB.Name
	s.GroupPrefix = testenv.RandomName(cfg.Name) + "."
	if _, err := s.DB.Pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, s.Slot); err != nil {
		t.Fatalf("create slot: %v", err)
	}

	// CDC: the event log to the topic.
	s.startCDC(t)

	// Every projector, in consumer groups of this test's own, under the
	// policy recorded with the active versions, as a process records it
	// at its first start (readmodel.ResolvePolicy).
	s.pcfg = cfg.Projections
	s.pcfg.Keys = s.Keys
	s.supervised = cfg.Supervised
	if err := readmodel.CheckPolicy(context.Background(), s.DB.Pool, s.pcfg.Policy()); err != nil {
		t.Fatal(err)
	}
	s.ProjectionMetrics = prometheus.NewRegistry()
	var err error
	if s.pm, err = projections.NewMetrics(s.ProjectionMetrics); err != nil {
		t.Fatal(err)
	}
	s.startProjectors(t)

	// The query side and the command side.
	s.Feed, err = queries.New(queries.Config{
		Keys:               s.Keys,
		InboxMax:           cfg.Projections.InboxMax,
		CelebrityThreshold: cfg.Projections.CelebrityThreshold,
		CelebrityBand:      cfg.Projections.CelebrityBand,
		NotificationsMax:   cfg.Projections.NotificationsMax,
		CelebrityCacheTTL:  cfg.CacheTTL,
		RefreshSettle:      cfg.RefreshSettle,
		TimelineCacheSize:  queries.MaxLimit + 1,
		Registerer:         prometheus.NewRegistry(),
		Logger:             s.Log,
	}, s.DB.Pool, s.Redis)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Start(t, s.Feed.Service())
	ids, err := snowflake.New(1)
	if err != nil {
		t.Fatal(err)
	}
	if s.Commands, err = commands.New(s.DB.Pool, ids, commands.Config{}); err != nil {
		t.Fatal(err)
	}
	return s
}

// run runs fn until the test ends; an end other than the cancellation
// fails the test.
func run(t testing.TB, name string, fn func(context.Context) error) (stop func()) {
	return testenv.Go(t, name+" stopped with", func(ctx context.Context) error {
		if err := fn(ctx); !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	})
}

// RunnerConfig is how the system's projectors consume: the test's broker,
// topic and group prefix, short retries, no lag sampling.
func (s *System) RunnerConfig() projections.RunnerConfig {
	return projections.RunnerConfig{
		Brokers:      s.Broker.Addrs(),
		Topic:        s.Topic,
		GroupPrefix:  s.GroupPrefix,
		RetryInitial: 20 * time.Millisecond,
		RetryMax:     500 * time.Millisecond,
		DrainTimeout: 10 * time.Second,
		LagInterval:  -1,
		Logger:       s.Log,
		// Nil unless Config.TracerProvider.
		TracerProvider: s.tp,
	}
}

// WaitCDC waits until CDC has confirmed a WAL position taken now, after
// every write so far; CDC confirms a position only once Kafka has
// acknowledged every event up to it. It returns that position.
func (s *System) WaitCDC(t testing.TB, timeout time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var lsn string
	if err := s.DB.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatalf("read WAL position: %v", err)
	}
	for {
		var done bool
		err := s.DB.Pool.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn >= $1::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $2`, lsn, s.Slot).Scan(&done)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) && ctx.Err() == nil {
			t.Fatalf("read slot %s: %v", s.Slot, err)
		}
		if done {
			return lsn
		}
		if ctx.Err() != nil {
			st, _ := cdc.Status(context.Background(), s.DB.Pool, s.Slot)
			t.Fatalf("CDC did not confirm WAL %s within %v: %+v", lsn, timeout, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitConsumed waits until every consumer group in Groups has committed
// the end of every partition (lag 0, as `feed status` reports it).
func (s *System) WaitConsumed(t testing.TB, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var lags map[string]int64
	for {
		var err error
		lags, err = projections.ConsumerLag(ctx, s.Broker.Conn(), s.Topic, s.Groups)
		if err == nil {
			total := int64(0)
			for _, g := range s.Groups {
				total += lags[g]
			}
			if total == 0 && len(lags) == len(s.Groups) {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("consumer groups did not catch up within %v: lag %v (last error %v)", timeout, lags, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Poisoned returns how many messages went to the poison topic: each one is
// an event some projector gave up on.
func (s *System) Poisoned(t testing.TB) int64 {
	t.Helper()
	cl, err := s.Broker.Conn().NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, kafka.PoisonTopic(s.Topic))
	if err != nil {
		t.Fatalf("list poison topic offsets: %v", err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// LogProjectionStats logs, per projector, the messages handled, the time
// spent applying them and the retries.
func (s *System) LogProjectionStats(t testing.TB) {
	t.Helper()
	mfs, err := s.ProjectionMetrics.Gather()
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
