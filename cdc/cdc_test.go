package cdc

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/testkit/testenv"
)

// Every committed event arrives, with the message contract of
// docs/architecture.md; each stream's events come in version order and each
// key's in commit order; a rolled-back transaction's events never arrive;
// the slot's confirmed position then covers everything and feed status
// reports no lag.
func TestStreamsCommittedEventsInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, 6)
	ctx := context.Background()
	// Written before CDC starts: a backlog in the slot.
	w := &workload{db: b.db, base: 1_000_000, rounds: 60}
	w.run(ctx, t, 2)
	c, stop := b.start(t, b.config())
	_ = c
	rolledBack := mustInsert(ctx, t, b.db, []row{
		{events.PostCreated{PostID: 42, AuthorID: 7, Content: "never"}, 1},
		{events.UserRegistered{UserID: 7, Name: "never"}, 1},
	}, true)
	w2 := &workload{db: b.db, base: 2_000_000, rounds: 60}
	w2.run(ctx, t, 4)

	want := committedIDs(t, b.db)
	if len(want) != w.n+w2.n {
		t.Fatalf("database holds %d events, wrote %d", len(want), w.n+w2.n)
	}
	cons := newConsumer(t, b)
	cons.readUntil(t, 60*time.Second, "every committed event", func(c *consumer) bool { return c.hasAll(want) })
	cons.checkOrder(t)
	for _, id := range rolledBack {
		if cons.byID[id] > 0 {
			t.Fatalf("event %s of a rolled-back transaction was published", id)
		}
	}
	if len(cons.byID) != len(want) {
		t.Fatalf("read %d distinct events, database holds %d", len(cons.byID), len(want))
	}
	t.Logf("%d events, %d duplicates", len(want), cons.duplicates())

	// The message contract.
	for _, r := range cons.recs[:50] {
		e := r.env
		ev, err := events.DefaultCodec.DecodeEnvelope(e)
		if err != nil {
			t.Fatal(err)
		}
		key := strconv.FormatInt(ev.AudienceKey(), 10)
		checks := map[string][2]string{
			"kafka key":         {r.key, key},
			"audienceKey":       {strconv.FormatInt(e.AudienceKey, 10), key},
			"partition_key":     {r.headers[kafka.MetaPartitionKey], key},
			"name":              {r.headers[kafka.MetaName], e.Type},
			"stream_id":         {r.headers[kafka.MetaStreamID], e.StreamID},
			"stream_version":    {r.headers[kafka.MetaStreamVersion], strconv.FormatInt(e.StreamVersion, 10)},
			"position":          {r.headers[kafka.MetaPosition], strconv.FormatInt(e.Position, 10)},
			"commit_lsn":        {r.headers[kafka.MetaCommitLSN], e.CommitLSN},
			"correlation_id":    {r.headers[kafka.MetaCorrelationID], e.Metadata.CorrelationID},
			"watermill uuid":    {r.headers["_watermill_message_uuid"], e.EventID},
			"correlation value": {e.Metadata.CorrelationID[:5], "corr-"},
		}
		for what, v := range checks {
			if v[0] != v[1] {
				t.Errorf("%s: got %q, want %q", what, v[0], v[1])
			}
		}
		if e.RecordedAt.IsZero() || time.Since(e.RecordedAt) > time.Hour {
			t.Errorf("recordedAt %v", e.RecordedAt)
		}
		if _, err := pglogrepl.ParseLSN(e.CommitLSN); err != nil {
			t.Errorf("commitLsn %q: %v", e.CommitLSN, err)
		}
	}

	// Everything acknowledged is confirmed: the slot's lag reaches zero
	// events, and the status and metrics agree.
	var st SlotStatus
	last := maxCommitLSN(t, cons)
	testenv.Eventually(t, 30*time.Second, "slot confirmed past the last commit and progress saved", func() bool {
		var err error
		st, err = Status(ctx, b.db.Pool, b.slot)
		if err != nil {
			t.Fatal(err)
		}
		// The progress row and the slot's confirmation are written on their
		// own timers, so the confirmed position is part of the wait.
		return st.Exists && st.Active && st.EventsPublished >= int64(len(want)) && st.LagSeconds == 0 &&
			st.ConfirmedLSN != "" && mustLSN(t, st.ConfirmedLSN) > last
	})
	if n := value(c.m.published); n < float64(len(want)) {
		t.Fatalf("feed_cdc_events_published_total %v, want >= %d", n, len(want))
	}
	stop()
	// The walsender notices the closed connection a moment later.
	testenv.Eventually(t, 15*time.Second, "slot inactive after stop", func() bool {
		st, err := Status(ctx, b.db.Pool, b.slot)
		if err != nil {
			t.Fatal(err)
		}
		return !st.Active
	})
}

func maxCommitLSN(t testing.TB, c *consumer) uint64 {
	var m uint64
	for _, r := range c.recs {
		m = max(m, mustLSN(t, r.env.CommitLSN))
	}
	return m
}

// A transaction of 100k events arrives whole. CDC does not buffer a
// transaction: with pgoutput protocol 1 the server sends it only after its
// commit, so its events flow through the bounded lanes as they arrive and
// memory stays bounded by MaxInFlight (logged).
func TestLargeTransactionArrivesWhole(t *testing.T) {
	t.Parallel()
	b := setup(t, 12)
	ctx := context.Background()
	c, _ := b.start(t, b.config())
	n := 100_000
	if raceEnabled {
		n = 20_000 // the full size runs without -race
		t.Logf("race detector: %d events instead of 100k", n)
	}
	// 100 authors, one post stream each event.
	_, err := b.db.Pool.Exec(ctx, `
		INSERT INTO events (event_id, stream_id, stream_version, type, payload)
		SELECT gen_random_uuid(), 'post-' || i, 1, 'post.created.v1',
		       jsonb_build_object('postId', i::text, 'authorId', (i % 100 + 1)::text, 'content', 'bulk ' || i,
		                          'createdAt', '2026-01-01T00:00:00Z', 'authorFollowers', 0)
		FROM generate_series(1, $1) AS i`, n)
	if err != nil {
		t.Fatal(err)
	}
	// CDC's memory while it streams the transaction (the test's consumer
	// starts after, so it does not count).
	var peak atomic.Uint64
	stopSampling := sampleHeap(&peak)
	defer stopSampling()
	testenv.Eventually(t, 3*time.Minute, "every event acknowledged", func() bool { return value(c.m.published) >= float64(n) })
	stopSampling()
	cons := newConsumer(t, b)
	cons.readUntil(t, 3*time.Minute, "every event read back", func(c *consumer) bool { return len(c.byID) >= n })
	cons.checkOrder(t)
	lsns := map[string]bool{}
	for _, r := range cons.recs {
		lsns[r.env.CommitLSN] = true
	}
	if len(lsns) != 1 {
		t.Fatalf("one transaction arrived with %d commit LSNs", len(lsns))
	}
	t.Logf("%d-event transaction: %d records, %d duplicates, peak heap in use while streaming %d MiB (whole test process, parallel tests included), in flight cap %d", n,
		len(cons.recs), cons.duplicates(), peak.Load()>>20, c.cfg.MaxInFlight)
}

// sampleHeap records the peak HeapInuse every 50 ms until stopped.
func sampleHeap(peak *atomic.Uint64) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	var closed atomic.Bool
	return func() {
		if closed.CompareAndSwap(false, true) {
			close(done)
			<-finished
		}
	}
}

// The broker goes away for a few seconds while writes continue: CDC
// retries in order, nothing is confirmed past what Kafka acknowledged,
// and everything arrives once the broker is back.
func TestBrokerOutage(t *testing.T) {
	t.Parallel()
	b := setup(t, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := b.publisher(t)
	c, err := New(b.config(), b.db.Pool, pub)
	if err != nil {
		t.Fatal(err)
	}
	var gapMu sync.Mutex
	var lastAck time.Time
	var longestGap time.Duration
	c.proc.onAck = func(_ item, at time.Time) {
		gapMu.Lock()
		defer gapMu.Unlock()
		if !lastAck.IsZero() {
			longestGap = max(longestGap, at.Sub(lastAck))
		}
		lastAck = at
	}
	b.run(t, c, pub)
	w := &workload{db: b.db, base: 3_000_000, rounds: 1000, pause: 5 * time.Millisecond}
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		w.run(ctx, t, 2)
	}()
	// Stop the broker only once CDC is publishing.
	testenv.Eventually(t, 60*time.Second, "first events acknowledged", func() bool { return value(c.m.published) > 0 })
	b.broker.Stop()
	stoppedAt := time.Now()
	time.Sleep(4 * time.Second) // the scenario: the outage lasts this long
	b.broker.Restart(t)
	t.Logf("broker down for %v", time.Since(stoppedAt).Round(time.Millisecond))
	if w.written() == 0 {
		t.Fatal("no writes")
	}
	<-wdone
	// At least one event after the restart, so the pause shows in acks.
	mustInsert(ctx, t, b.db, []row{{events.UserRegistered{UserID: 99, Name: "after"}, 1}}, false)
	want := committedIDs(t, b.db)
	cons := newConsumer(t, b)
	cons.readUntil(t, 60*time.Second, "every committed event", func(c *consumer) bool { return c.hasAll(want) })
	cons.checkOrder(t)
	gapMu.Lock()
	gap := longestGap
	gapMu.Unlock()
	t.Logf("%d events, %d duplicates, %v publish errors retried, longest pause between acknowledgements %v",
		len(want), cons.duplicates(), value(c.m.publishErrors), gap.Round(time.Millisecond))
	if gap < time.Second {
		t.Fatalf("acknowledgements never paused (longest gap %v): the outage did not reach CDC", gap)
	}
}

// The walsender is terminated mid-stream: CDC reconnects with backoff,
// gets the relation message again on the new connection, skips the
// transactions it already has, and loses nothing.
func TestReconnectAfterServerDisconnect(t *testing.T) {
	t.Parallel()
	b := setup(t, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, _ := b.start(t, b.config())
	w := &workload{db: b.db, base: 4_000_000, rounds: 300}
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		w.run(ctx, t, 2)
	}()
	for range 3 {
		// Each time mid-stream: the slot is streamed from again and CDC
		// published since the last termination (or the workload ended).
		before := value(c.m.published)
		testenv.Eventually(t, 60*time.Second, "CDC streaming again", func() bool {
			var active bool
			if err := b.db.Pool.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, b.slot).Scan(&active); err != nil || !active {
				return false
			}
			select {
			case <-wdone:
				return true
			default:
				return value(c.m.published) > before
			}
		})
		if _, err := b.db.Pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, b.slot); err != nil {
			t.Fatal(err)
		}
	}
	<-wdone
	want := committedIDs(t, b.db)
	cons := newConsumer(t, b)
	cons.readUntil(t, 60*time.Second, "every committed event", func(c *consumer) bool { return c.hasAll(want) })
	cons.checkOrder(t)
	if r := value(c.m.reconnects); r < 1 {
		t.Fatalf("feed_cdc_reconnects_total %v after terminating the walsender", r)
	}
	t.Logf("%d events, %d duplicates, %v reconnects, %v redelivered", len(want), cons.duplicates(),
		value(c.m.reconnects), value(c.m.redelivered))
}

// With nothing in flight CDC confirms the server's position, so writes to
// other tables do not make an idle slot hold WAL.
func TestIdleSlotFollowsServer(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ctx := context.Background()
	b.start(t, b.config())
	var target string
	if err := b.db.Pool.QueryRow(ctx, `INSERT INTO users (name) VALUES ('not an event') RETURNING pg_current_wal_lsn()::text`).Scan(&target); err != nil {
		t.Fatal(err)
	}
	want := mustLSN(t, target)
	testenv.Eventually(t, 30*time.Second, "confirmed_flush_lsn past a write to another table", func() bool {
		st, err := Status(ctx, b.db.Pool, b.slot)
		if err != nil {
			t.Fatal(err)
		}
		return st.ConfirmedLSN != "" && mustLSN(t, st.ConfirmedLSN) >= want
	})
}

// drop-slot refuses while CDC streams, then drops the slot and its
// progress row; status then says the slot is gone.
func TestDropSlot(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ctx := context.Background()
	_, stop := b.start(t, b.config())
	mustInsert(ctx, t, b.db, []row{{events.UserRegistered{UserID: 1, Name: "a"}, 1}}, false)
	testenv.Eventually(t, 30*time.Second, "slot active", func() bool {
		st, err := Status(ctx, b.db.Pool, b.slot)
		return err == nil && st.Active
	})
	if err := DropSlot(ctx, b.db.Pool, b.slot); !errors.Is(err, ErrSlotActive) {
		t.Fatalf("drop of an active slot: %v, want ErrSlotActive", err)
	}
	stop()
	testenv.Eventually(t, 10*time.Second, "slot released", func() bool {
		err := DropSlot(ctx, b.db.Pool, b.slot)
		if err != nil && !errors.Is(err, ErrSlotActive) {
			t.Fatal(err)
		}
		return err == nil
	})
	st, err := Status(ctx, b.db.Pool, b.slot)
	if err != nil || st.Exists {
		t.Fatalf("after drop: exists=%v err=%v", st.Exists, err)
	}
	var rows int
	if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM cdc_state WHERE slot_name = $1`, b.slot).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("progress rows after drop: %d, %v", rows, err)
	}
	if err := DropSlot(ctx, b.db.Pool, b.slot); !errors.Is(err, ErrNoSlot) {
		t.Fatalf("second drop: %v, want ErrNoSlot", err)
	}
}

// OnStreaming is called once, when the replication session streams: the
// slot is then active, held by CDC.
func TestOnStreaming(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ctx := context.Background()
	streaming := make(chan struct{})
	cfg := b.config()
	cfg.OnStreaming = func() { close(streaming) } // a second call panics
	_, stop := b.start(t, cfg)
	<-streaming
	st, err := Status(ctx, b.db.Pool, b.slot)
	if err != nil || !st.Active {
		t.Fatalf("streaming, but the slot: %+v, %v", st, err)
	}
	stop()
}
