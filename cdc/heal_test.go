package cdc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/testkit/testenv"
)

// ordered remembers, per audience key, the events in commit order. Each
// key is written by one goroutine, one transaction after the other, so
// the order in which the goroutine's commits returned is commit order.
type ordered struct {
	mu    sync.Mutex
	byKey map[string][]string
	txns  atomic.Int64
}

func newOrdered() *ordered { return &ordered{byKey: map[string][]string{}} }

func (o *ordered) committed(rows []row, ids []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, r := range rows {
		k := strconv.FormatInt(r.ev.AudienceKey(), 10)
		o.byKey[k] = append(o.byKey[k], ids[i])
	}
	o.txns.Add(1)
}

// write runs writers goroutines until ctx ends, each with keys of its own:
// an author's posts (some deleted), a follow pair, registrations.
func (o *ordered) write(ctx context.Context, t testing.TB, db *testenv.DB, base int64, writers int) {
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			author := base + int64(g)*1000
			follower, followee := author+1, author+2
			for i := 0; ctx.Err() == nil; i++ {
				post := author*100000 + int64(i)
				rows := []row{{events.PostCreated{PostID: post, AuthorID: author, Content: "p", CreatedAt: time.Now().UTC()}, 1}}
				if i%3 == 0 {
					rows = append(rows, row{events.PostDeleted{PostID: post, AuthorID: author, DeletedAt: time.Now().UTC()}, 2})
				}
				if i%2 == 0 {
					rows = append(rows, row{events.Followed{FollowerID: follower, FolloweeID: followee, FolloweeFollowers: 1}, int64(i + 1)})
				} else {
					rows = append(rows, row{events.Unfollowed{FollowerID: follower, FolloweeID: followee}, int64(i + 1)})
				}
				rows = append(rows, row{events.UserRegistered{UserID: author*100000 + int64(i), Name: "u"}, 1})
				ids, err := insert(ctx, db, rows, false)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("writer: %v", err)
					}
					return
				}
				o.committed(rows, ids)
				time.Sleep(2 * time.Millisecond) // pacing, not synchronisation
			}
		}()
	}
	wg.Wait()
}

// late is a transaction that inserted its events and commits when told.
type late struct {
	tx   pgx.Tx
	rows []row
	ids  []string
}

func beginLate(ctx context.Context, t testing.TB, db *testenv.DB, rows []row) *late {
	t.Helper()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	l := &late{tx: tx, rows: rows}
	for _, r := range rows {
		p, err := events.Encode(r.ev)
		if err != nil {
			t.Fatal(err)
		}
		id := uuid.NewString()
		if _, err := tx.Exec(ctx, `INSERT INTO events (event_id, stream_id, stream_version, type, payload) VALUES ($1, $2, $3, $4, $5)`,
			id, r.ev.StreamID(), r.version, r.ev.EventType(), string(p)); err != nil {
			t.Fatal(err)
		}
		l.ids = append(l.ids, id)
	}
	return l
}

func (l *late) commit(ctx context.Context, t testing.TB, o *ordered) {
	t.Helper()
	if err := l.tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	o.committed(l.rows, l.ids)
}

// dropSlot drops the slot under a running CDC, as an operator would:
// terminate the walsender, drop, and again while CDC wins the race.
func (b *bundle) dropSlot(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	testenv.Eventually(t, 30*time.Second, "slot dropped", func() bool {
		if _, err := b.db.Pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid, 5000) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, b.slot); err != nil {
			t.Fatal(err)
		}
		_, err := b.db.Pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, b.slot)
		var pg *pgconn.PgError
		if errors.As(err, &pg) && pg.Code == "55006" { // active again
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		return true
	})
}

// waitFrontier waits until CDC recorded a frontier above the one seen so
// far, so that a loss from now on has a point to heal from.
func (b *bundle) waitFrontier(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	before := ""
	if st, err := Status(ctx, b.db.Pool, b.slot); err == nil {
		before = st.Frontier
	}
	testenv.Eventually(t, 30*time.Second, "a frontier recorded", func() bool {
		st, err := Status(ctx, b.db.Pool, b.slot)
		if err != nil {
			t.Fatal(err)
		}
		return st.Frontier != "" && st.Frontier != before
	})
}

// stopWritersAfterHeal lets the writers commit 30 more transactions on the
// new slot, then stops them (cancel) and waits for them (done).
func stopWritersAfterHeal(t testing.TB, o *ordered, cancel func(), done <-chan struct{}) {
	t.Helper()
	n := o.txns.Load()
	testenv.Eventually(t, 30*time.Second, "writers commit after the heal", func() bool { return o.txns.Load() >= n+30 })
	cancel()
	<-done
}

// checkTopicHasTheLog reads the topic with a standard client until every
// committed event of the log is in it, then checks the order per key and
// that each key's last occurrences follow commit order. It returns the
// consumer and how many events the log holds.
func checkTopicHasTheLog(t testing.TB, b *bundle, o *ordered) (*consumer, int) {
	t.Helper()
	want := committedIDs(t, b.db)
	cons := newConsumer(t, b)
	cons.readUntil(t, 60*time.Second, "every event of the log", func(c *consumer) bool { return c.hasAll(want) })
	cons.checkOrder(t)
	cons.checkLastOccurrence(t, o)
	return cons, len(want)
}

// checkLastOccurrence verifies that, per key, the last occurrence of each
// event in its partition comes in commit order: whatever was published
// twice, a consumer that keeps the last write ends in the right state.
func (c *consumer) checkLastOccurrence(t testing.TB, o *ordered) {
	t.Helper()
	last := map[string]int64{}
	part := map[string]int32{}
	for _, r := range c.recs {
		if off, ok := last[r.env.EventID]; !ok || r.offset > off {
			last[r.env.EventID] = r.offset
		}
		part[r.env.EventID] = r.partition
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for key, ids := range o.byKey {
		for i := 1; i < len(ids); i++ {
			a, b := ids[i-1], ids[i]
			if part[a] != part[b] {
				t.Fatalf("key %s: events in partitions %d and %d", key, part[a], part[b])
			}
			if last[b] <= last[a] {
				t.Fatalf("key %s: event %s (commit #%d) last seen at offset %d, before %s (commit #%d) at %d",
					key, b, i, last[b], a, i-1, last[a])
			}
		}
	}
}

// The slot is dropped under concurrent writers, with transactions that
// commit late (one open across the drop, so the new slot's creation waits
// for it while the writers commit on): CDC republishes from the event log
// and streams from a new slot; every event of the log reaches Kafka, and per
// key the last occurrences are in commit order.
func TestSlotLossHeals(t *testing.T) {
	t.Parallel()
	b := setup(t, 6)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, _ := b.start(t, b.config())
	o := newOrdered()
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		o.write(ctx, t, b.db, 11_000_000, 4)
	}()
	l1 := beginLate(ctx, t, b.db, []row{{events.PostCreated{PostID: 900001, AuthorID: 9_000_001, Content: "late 1", CreatedAt: time.Now().UTC()}, 1}})
	testenv.Eventually(t, 60*time.Second, "events published", func() bool { return value(c.m.published) > 200 })
	b.waitFrontier(t)
	l2 := beginLate(ctx, t, b.db, []row{{events.PostCreated{PostID: 900002, AuthorID: 9_000_002, Content: "late 2", CreatedAt: time.Now().UTC()}, 1}})
	b.dropSlot(t)
	l1.commit(ctx, t, o)
	// The new slot waits for l2; the writers commit meanwhile, before the
	// new slot's start: only the republish can bring those.
	n := o.txns.Load()
	testenv.Eventually(t, 30*time.Second, "writers commit after the drop", func() bool { return o.txns.Load() >= n+30 })
	l2.commit(ctx, t, o)
	testenv.Eventually(t, 60*time.Second, "slot loss healed", func() bool {
		st, err := Status(ctx, b.db.Pool, b.slot)
		if err != nil {
			t.Fatal(err)
		}
		return st.Exists && st.SlotLosses == 1 && !st.HealPending
	})
	stopWritersAfterHeal(t, o, cancel, wdone)
	cons, events := checkTopicHasTheLog(t, b, o)
	if got := value(c.m.slotLost.WithLabelValues("heal")); got != 1 {
		t.Fatalf("feed_cdc_slot_lost_total{mode=heal} = %v, want 1", got)
	}
	if value(c.m.republished) == 0 {
		t.Fatal("feed_cdc_republished_events_total = 0 after a heal")
	}
	st, err := Status(context.Background(), b.db.Pool, b.slot)
	if err != nil {
		t.Fatal(err)
	}
	if line := st.SlotLossLine(); !strings.Contains(line, "healed: republished") {
		t.Fatalf("status line %q", line)
	}
	t.Logf("%d events, %d records, %d duplicates, %v republished; %s", events, len(cons.recs), cons.duplicates(),
		value(c.m.republished), strings.TrimSpace(st.SlotLossLine()))
}

// CDC is stopped in the middle of a heal (right after it created the new
// slot, and after the republished events were acknowledged but before the
// heal was recorded as done): the next CDC finds the new slot and the heal
// still pending, republishes again, and nothing is missing.
func TestSlotLossHealInterrupted(t *testing.T) {
	t.Parallel()
	for i, stage := range []string{stageSlotCreated, stageRepublished} {
		t.Run(stage, func(t *testing.T) {
			t.Parallel()
			b := setup(t, 4)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			o := newOrdered()
			wdone := make(chan struct{})
			go func() {
				defer close(wdone)
				o.write(ctx, t, b.db, 12_000_000+int64(i)*100_000, 3)
			}()

			pub := b.publisher(t)
			c1, err := New(b.config(), b.db.Pool, pub)
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop1 := context.WithCancel(context.Background())
			defer stop1()
			var hooked atomic.Bool
			c1.hook = func(s string) {
				if s == stage {
					hooked.Store(true)
					stop1()
				}
			}
			done := make(chan error, 1)
			go func() { done <- c1.Run(runCtx) }()
			testenv.Eventually(t, 60*time.Second, "events published", func() bool { return value(c1.m.published) > 100 })
			b.waitFrontier(t)
			b.dropSlot(t)
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("first CDC: %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("first CDC did not stop at the heal stage")
			}
			_ = pub.Close()
			if !hooked.Load() {
				t.Fatal("the heal never reached stage " + stage)
			}
			st, err := Status(ctx, b.db.Pool, b.slot)
			if err != nil {
				t.Fatal(err)
			}
			if !st.Exists || !st.HealPending {
				t.Fatalf("after the interruption: slot exists %v, heal pending %v; want both", st.Exists, st.HealPending)
			}

			c2, _ := b.start(t, b.config())
			testenv.Eventually(t, 60*time.Second, "heal finished by the second CDC", func() bool {
				st, err := Status(ctx, b.db.Pool, b.slot)
				if err != nil {
					t.Fatal(err)
				}
				return !st.HealPending && st.SlotLosses == 1
			})
			stopWritersAfterHeal(t, o, cancel, wdone)
			cons, events := checkTopicHasTheLog(t, b, o)
			if value(c2.m.republished) == 0 {
				t.Fatal("the second CDC republished nothing")
			}
			t.Logf("%d events, %d records, %d duplicates", events, len(cons.recs), cons.duplicates())
		})
	}
}

// With OnSlotLoss stop, CDC stops with ErrSlotLost, creates no slot, fails
// readiness and says so in the progress row; started again, it stops again.
func TestSlotLossStop(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ctx := context.Background()
	cfg := b.config()
	cfg.OnSlotLoss = SlotLossStop
	pub := b.publisher(t)
	c, err := New(cfg, b.db.Pool, pub)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	mustInsert(ctx, t, b.db, []row{{events.UserRegistered{UserID: 1, Name: "a"}, 1}}, false)
	testenv.Eventually(t, 30*time.Second, "event published", func() bool { return value(c.m.published) >= 1 })
	if err := c.Ready(); err != nil {
		t.Fatalf("ready while streaming: %v", err)
	}
	b.dropSlot(t)
	select {
	case err := <-done:
		if !errors.Is(err, ErrSlotLost) {
			t.Fatalf("Run after the slot loss: %v, want ErrSlotLost", err)
		}
		t.Logf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("CDC did not stop after the slot loss")
	}
	if err := c.Ready(); !errors.Is(err, ErrSlotLost) {
		t.Fatalf("Ready after the stop: %v, want ErrSlotLost", err)
	}
	if got := value(c.m.slotLost.WithLabelValues("stop")); got != 1 {
		t.Fatalf("feed_cdc_slot_lost_total{mode=stop} = %v, want 1", got)
	}
	st, err := Status(ctx, b.db.Pool, b.slot)
	if err != nil {
		t.Fatal(err)
	}
	if st.Exists {
		t.Fatal("CDC in stop mode created a slot")
	}
	if line := st.SlotLossLine(); !strings.Contains(line, "SLOT LOST") || !strings.Contains(line, "stopped") {
		t.Fatalf("status line %q", line)
	}

	c2, err := New(cfg, b.db.Pool, pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Run(ctx); !errors.Is(err, ErrSlotLost) {
		t.Fatalf("second Run: %v, want ErrSlotLost", err)
	}
	if st, err := Status(ctx, b.db.Pool, b.slot); err != nil || st.Exists {
		t.Fatalf("after the second run: slot exists %v (%v)", st.Exists, err)
	}
}

// While PostgreSQL refuses connections or is starting up or shutting
// down, the pause between reconnects stays at most UnavailableBackoff;
// other errors back off exponentially up to MaxBackoff.
func TestRetryDelay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A real refused connection: nothing listens on port 1.
	_, refused := pgconn.Connect(ctx, "postgres://postgres@127.0.0.1:1/feed?sslmode=disable&connect_timeout=5")
	if refused == nil {
		t.Fatal("connected to port 1")
	}
	cases := []struct {
		name        string
		err         error
		unavailable bool
	}{
		{"connection refused", fmt.Errorf("open replication connection: %w", refused), true},
		{"admin shutdown 57P01", fmt.Errorf("replication stream: %w", &pgconn.PgError{Code: "57P01"}), true},
		{"crash shutdown 57P02", &pgconn.PgError{Code: "57P02"}, true},
		{"connect error", &pgconn.ConnectError{Config: &pgconn.Config{}}, true},
		{"starting up 57P03 (pg error)", fmt.Errorf("look up slot: %w", &pgconn.PgError{Code: "57P03"}), true},
		{"slot does not exist", &pgconn.PgError{Code: "42704"}, false},
		{"other", errors.New("replication stream: server ended the copy"), false},
	}
	cfg := Config{}.withDefaults()
	for _, tc := range cases {
		backoff := cfg.MinBackoff
		var waits []time.Duration
		for range 12 {
			waits = append(waits, retryDelay(backoff, tc.err, cfg.UnavailableBackoff))
			backoff = min(backoff*2, cfg.MaxBackoff)
		}
		longest := waits[len(waits)-1]
		switch {
		case tc.unavailable && longest > time.Second:
			t.Errorf("%s: waits %v, want at most 1s", tc.name, waits)
		case !tc.unavailable && longest != cfg.MaxBackoff:
			t.Errorf("%s: waits %v, want exponential up to %v", tc.name, waits, cfg.MaxBackoff)
		}
		if waits[0] != cfg.MinBackoff || waits[1] != 2*cfg.MinBackoff {
			t.Errorf("%s: first waits %v, want exponential from %v", tc.name, waits[:2], cfg.MinBackoff)
		}
	}
}

// TestPrepareFirstStart: `feed dev` creates the slot before its API takes
// a write. On a first start it creates the slot and the progress row with
// a frontier, as Run would; again, it changes nothing; and a slot that was
// lost (progress row, no slot) is left to Run, which heals or stops,
// never re-created past the lost events.
func TestPrepareFirstStart(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	slot := "feed_prep_" + db.Name
	cfg := Config{DatabaseURL: db.URL, Slot: slot, Topic: "unused", Logger: testenv.Logger()}
	exists := func() bool {
		var ok bool
		if err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, slot).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if err := PrepareFirstStart(ctx, cfg, db.Pool); err != nil {
		t.Fatal(err)
	}
	if !exists() {
		t.Fatal("no slot after the first start")
	}
	var frontier *string
	if err := db.Pool.QueryRow(ctx, `SELECT frontier_xid::text FROM cdc_state WHERE slot_name = $1`, slot).Scan(&frontier); err != nil || frontier == nil {
		t.Fatalf("progress row: frontier %v, %v; want one recorded", frontier, err)
	}
	if err := PrepareFirstStart(ctx, cfg, db.Pool); err != nil {
		t.Fatalf("second call: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot); err != nil {
		t.Fatal(err)
	}
	if err := PrepareFirstStart(ctx, cfg, db.Pool); err != nil {
		t.Fatalf("after the loss: %v", err)
	}
	if exists() {
		t.Fatal("a lost slot was created again outside Run, past the events committed since the loss")
	}
}
