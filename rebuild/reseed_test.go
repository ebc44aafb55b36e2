package rebuild

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/feedco/feed/queries"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedco/feed/cdc"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
	"github.com/feedco/feed/verify"
)

// TestReseedNewTopicThenRebuildAll: the operator's refill of a new, empty
// topic. With CDC and the projectors stopped (and writes going on while
// they are), `cdc.Reseed` republishes the log from position 1 into a new
// topic; CDC and the projectors restart on it. The projectors' groups have
// no offsets there, so they apply the whole topic again over the read
// models they built from the old one, and CDC streams again what committed
// since its slot's position: every event twice or more, and every feed
// still equals the truth (the duplicates absorbed). Then `rebuild all`
// from the new topic, under writes, while the query side that has served
// since before the reseed reads nothing; the celebrities post after the
// switch (the pull path), and the oracle again: every feed through that
// long-running query side against the truth, with no key of version 1
// written back by its first reads; then through a query side started
// now, and verify over every active user.
func TestReseedNewTopicThenRebuildAll(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	s.seed(t, 24, 5, 80)
	s.quiesce(t)
	s.checkConverged(t)

	ctx := context.Background()
	s.StopProjectors()
	s.StopCDC()
	for range 40 { // committed while nothing streams: in the reseed and in CDC's slot
		if err := s.step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	topic, res := s.reseedAll(t)
	t.Logf("reseeded %d events (positions %d to %d) in %v", res.Events, res.FromPosition, res.ToPosition, res.Took.Round(time.Millisecond))

	s.MoveToTopic(t, topic)
	s.quiesce(t)
	s.checkConverged(t)
	if n := s.Poisoned(t); n != 0 {
		t.Fatalf("%d messages poisoned replaying the reseeded topic", n)
	}

	// rebuild all reads the topic its runner names: the new one.
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var firstErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for wctx.Err() == nil {
			if err := s.step(ctx); err != nil && firstErr == nil {
				firstErr = err
			}
			time.Sleep(5 * time.Millisecond) // pacing
		}
	}()
	r := s.rebuilder(t, nil)
	if r.cfg.Runner.Topic != topic {
		t.Fatalf("the rebuild reads topic %s, not the reseeded %s", r.cfg.Runner.Topic, topic)
	}
	results, err := r.Run(ctx, All)
	stop()
	wg.Wait()
	if err != nil {
		t.Fatalf("rebuild all from the reseeded topic: %v", err)
	}
	if firstErr != nil {
		t.Fatalf("a write failed during the rebuild: %v", firstErr)
	}
	if len(results) != len(projections.Names()) {
		t.Fatalf("want %d results, got %+v", len(projections.Names()), results)
	}
	celebs := s.celebritiesPost(t, 3)
	s.quiesce(t)
	t.Logf("celebrities %v posted after the switch", celebs)
	s.checkConverged(t) // the query side started before the reseed
	s.checkOnlyVersion(t, 2)
	// The oracle through a query side started now, as after the roles'
	// restart on the new topic.
	fresh, err := queries.New(queries.Config{Keys: readmodel.Keys{Prefix: s.Prefix}, InboxMax: policies.InboxMax,
		CelebrityCacheTTL: 300 * time.Millisecond, TimelineCacheSize: queries.MaxLimit + 1,
		Registerer: prometheus.NewRegistry(), Logger: s.Log}, s.DB.Pool, s.Redis)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Start(t, fresh.Service())
	s.Feed = fresh
	s.checkConverged(t)
	vs, err := readmodel.LoadVersions(ctx, s.DB.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range readmodel.Projections() {
		if vs.Version(p) != 2 {
			t.Errorf("%s is at version %d after rebuild all, want 2", p, vs.Version(p))
		}
	}
	rep, err := verify.Run(ctx, verify.Config{
		Slot: s.Slot, Users: len(s.users), Seed: 1, Logger: s.Log,
		Prefix: s.Prefix, Policy: policies.Policy(),
		Kafka: s.Broker.Conn(), Topic: topic, GroupPrefix: s.GroupPrefix,
	}, s.DB.Pool, s.Redis)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Users == 0 {
		t.Fatalf("verify after the rebuild from the reseeded topic: %s; %v", rep.Summary(), rep.Differences)
	}
	t.Logf("verify: %s", rep.Summary())
}

// reseedAll republishes the whole log (cdc.Reseed from position 1) into a
// new topic, with CDC and the projectors stopped, and checks that every
// event of the log was published.
func (s *system) reseedAll(t *testing.T) (string, cdc.ReseedResult) {
	t.Helper()
	ctx := context.Background()
	topic := s.Broker.Topic(t, 6)
	pub, err := kafka.NewPublisher(s.Broker.Conn(), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CDCConfig()
	cfg.Topic = topic
	res, err := cdc.Reseed(ctx, cfg, s.DB.Pool, cdc.ReseedFrom{Position: 1}, nil, pub)
	_ = pub.Close()
	if err != nil {
		t.Fatal(err)
	}
	var logged int64
	if err := s.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&logged); err != nil {
		t.Fatal(err)
	}
	if res.Events != logged {
		t.Fatalf("reseed published %d events; the log holds %d", res.Events, logged)
	}
	return topic, res
}
