package cdc

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wk "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/testkit/kafkatest"
	"github.com/feedco/feed/testkit/testenv"
)

// bundle is what a CDC test works with: its own database, slot, broker and
// topic.
type bundle struct {
	db     *testenv.DB
	broker *kafkatest.Broker
	topic  string
	slot   string
	reg    *prometheus.Registry
}

// setup gives a test its database, broker and topic, and creates the slot
// first: events committed before a slot exists are never streamed.
func setup(t testing.TB, partitions int32) *bundle {
	t.Helper()
	b := &bundle{db: testenv.NewDB(t), broker: kafkatest.Start(t), reg: prometheus.NewRegistry()}
	b.topic = b.broker.Topic(t, partitions)
	b.slot = "feed_cdc_" + b.db.Name
	// Creating a slot waits for every transaction running on the cluster,
	// other databases' included (another test's or engineer's bulk load).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	if _, err := ensureSlot(ctx, b.db.Pool, b.slot, DefaultPublication, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Logf("creating the slot waited %v for running transactions", d.Round(time.Second))
	}
	return b
}

func (b *bundle) config() Config {
	return Config{
		DatabaseURL:     b.db.URL,
		Slot:            b.slot,
		Topic:           b.topic,
		ConfirmInterval: 200 * time.Millisecond,
		StateInterval:   500 * time.Millisecond,
		MinBackoff:      50 * time.Millisecond,
		MaxBackoff:      time.Second,
		Registerer:      b.reg,
		Logger:          testenv.Logger(),
	}
}

// start runs CDC in this process until the returned stop is called (or
// the test ends).
func (b *bundle) start(t testing.TB, cfg Config) (c *CDC, stop func()) {
	t.Helper()
	pub := b.publisher(t)
	c, err := New(cfg, b.db.Pool, pub)
	if err != nil {
		t.Fatal(err)
	}
	return c, b.run(t, c, pub)
}

func (b *bundle) publisher(t testing.TB) *wk.Publisher {
	t.Helper()
	pub, err := kafka.NewPublisher(b.broker.Conn(), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// run runs c until the returned stop is called or the test ends, then
// closes pub.
func (b *bundle) run(t testing.TB, c *CDC, pub *wk.Publisher) (stop func()) {
	stopRun := testenv.Go(t, "cdc run", c.Run)
	var once sync.Once
	stop = func() { once.Do(func() { stopRun(); _ = pub.Close() }) }
	t.Cleanup(stop)
	return stop
}

// row is one event to insert at a stream version.
type row struct {
	ev      events.Event
	version int64
}

// mustInsert appends rows in one transaction (or rolls it back) and
// returns their event ids.
func mustInsert(ctx context.Context, t testing.TB, db *testenv.DB, rows []row, rollback bool) []string {
	t.Helper()
	ids, err := insert(ctx, db, rows, rollback)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func insert(ctx context.Context, db *testenv.DB, rows []row, rollback bool) ([]string, error) {
	ids, streams, types, payloads := make([]string, len(rows)), make([]string, len(rows)), make([]string, len(rows)), make([]string, len(rows))
	versions := make([]int64, len(rows))
	for i, r := range rows {
		p, err := events.Encode(r.ev)
		if err != nil {
			return nil, err
		}
		ids[i], streams[i], versions[i], types[i], payloads[i] = uuid.NewString(), r.ev.StreamID(), r.version, r.ev.EventType(), string(p)
	}
	meta := `{"correlationId":"corr-` + strconv.Itoa(len(rows)) + `"}`
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO events (event_id, stream_id, stream_version, type, payload, metadata)
			SELECT id, s, v, ty, p, $6::jsonb FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::jsonb[]) AS x(id, s, v, ty, p)`,
			ids, streams, versions, types, payloads, meta)
		if err != nil {
			return err
		}
		if rollback {
			return errRollback
		}
		return nil
	})
	if rollback && err == errRollback {
		return ids, nil
	}
	if err != nil {
		return nil, fmt.Errorf("insert events: %w", err)
	}
	return ids, nil
}

var errRollback = fmt.Errorf("roll back on purpose")

// record is one Kafka record read back with a plain Kafka client.
type record struct {
	key       string
	partition int32
	offset    int64
	env       events.Envelope
	headers   map[string]string
	value     []byte
}

// consumer reads the topic from the start with franz-go's kgo: the topic
// is plain Kafka, readable without watermill.
type consumer struct {
	cl   *kgo.Client
	mu   sync.Mutex
	recs []record
	byID map[string]int
}

func newConsumer(t testing.TB, b *bundle) *consumer {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.broker.Addrs()...), kgo.ConsumeTopics(b.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &consumer{cl: cl, byID: map[string]int{}}
}

// readUntil polls until cond holds for the records read so far.
func (c *consumer) readUntil(t testing.TB, timeout time.Duration, what string, cond func(c *consumer) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for !cond(c) {
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := c.cl.PollFetches(pctx)
		pcancel()
		if ctx.Err() != nil {
			t.Fatalf("timed out after %v waiting for %s (read %d records, %d distinct)", timeout, what, len(c.recs), len(c.byID))
		}
		fs.EachRecord(func(r *kgo.Record) {
			rec := record{key: string(r.Key), partition: r.Partition, offset: r.Offset, headers: map[string]string{}, value: r.Value}
			for _, h := range r.Headers {
				rec.headers[h.Key] = string(h.Value)
			}
			if err := json.Unmarshal(r.Value, &rec.env); err != nil {
				t.Errorf("record %d/%d: payload is not an envelope: %v", r.Partition, r.Offset, err)
			}
			c.recs = append(c.recs, rec)
			c.byID[rec.env.EventID]++
		})
	}
}

// hasAll reports whether every id was read.
func (c *consumer) hasAll(ids map[string]bool) bool {
	for id := range ids {
		if c.byID[id] == 0 {
			return false
		}
	}
	return true
}

// duplicates counts records beyond the first of each event.
func (c *consumer) duplicates() int {
	n := 0
	for _, k := range c.byID {
		n += k - 1
	}
	return n
}

// checkOrder verifies, per partition in offset order, that each stream's
// new events come in version order without gaps and that each key's new
// events come in commit order; a redelivered event (seen before) is a
// duplicate and skipped, as an idempotent consumer would.
func (c *consumer) checkOrder(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[string]bool{}
	lastVersion := map[string]int64{}
	lastLSN := map[string]uint64{}
	byPart := map[int32][]record{}
	for _, r := range c.recs {
		byPart[r.partition] = append(byPart[r.partition], r)
	}
	keyPart := map[string]int32{}
	for p, rs := range byPart {
		for i := 1; i < len(rs); i++ {
			if rs[i].offset <= rs[i-1].offset {
				t.Fatalf("partition %d: offsets out of order", p)
			}
		}
		for _, r := range rs {
			if kp, ok := keyPart[r.key]; ok && kp != p {
				t.Fatalf("key %s in partitions %d and %d", r.key, kp, p)
			}
			keyPart[r.key] = p
			if seen[r.env.EventID] {
				continue
			}
			seen[r.env.EventID] = true
			if v := lastVersion[r.env.StreamID]; r.env.StreamVersion != v+1 {
				t.Fatalf("stream %s: version %d after %d (key %s, partition %d offset %d)", r.env.StreamID, r.env.StreamVersion, v, r.key, p, r.offset)
			}
			lastVersion[r.env.StreamID] = r.env.StreamVersion
			lsn := mustLSN(t, r.env.CommitLSN)
			if lsn < lastLSN[r.key] {
				t.Fatalf("key %s: commit %s after a later commit (partition %d offset %d)", r.key, r.env.CommitLSN, p, r.offset)
			}
			lastLSN[r.key] = lsn
		}
	}
}

func mustLSN(t testing.TB, s string) uint64 {
	t.Helper()
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatalf("commit LSN %q: %v", s, err)
	}
	return uint64(lsn)
}

// committedIDs returns every event id in the database.
func committedIDs(t testing.TB, db *testenv.DB) map[string]bool {
	t.Helper()
	return queryIDs(t, context.Background(), db, `SELECT event_id::text FROM events`)
}

// queryIDs runs query, which selects event ids as text, and returns them
// as a set.
func queryIDs(t testing.TB, ctx context.Context, db *testenv.DB, query string, args ...any) map[string]bool {
	t.Helper()
	rows, err := db.Pool.Query(ctx, query, args...)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// workload writes, from several goroutines, registrations, an author's
// posts (created, some deleted) and one follow pair's alternating follows
// and unfollows, each stream at consecutive versions. It returns when ctx
// ends or rounds are done.
type workload struct {
	db     *testenv.DB
	base   int64 // user ids base, so two workloads do not share streams
	rounds int
	pause  time.Duration // between transactions of one writer
	mu     sync.Mutex
	n      int
}

func (w *workload) run(ctx context.Context, t testing.TB, writers int) {
	var wg sync.WaitGroup
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			author := w.base + int64(g)*1000
			follower, followee := author+1, author+2
			followers := int64(0)
			for i := 0; i < w.rounds && ctx.Err() == nil; i++ {
				var rows []row
				post := author*100000 + int64(i)
				rows = append(rows, row{events.PostCreated{PostID: post, AuthorID: author, Content: "p" + strconv.Itoa(i), CreatedAt: time.Now().UTC()}, 1})
				if i%3 == 0 {
					rows = append(rows, row{events.PostDeleted{PostID: post, AuthorID: author, DeletedAt: time.Now().UTC()}, 2})
				}
				if i%2 == 0 {
					followers = 1
					rows = append(rows, row{events.Followed{FollowerID: follower, FolloweeID: followee, FolloweeFollowers: followers}, int64(i + 1)})
				} else {
					followers = 0
					rows = append(rows, row{events.Unfollowed{FollowerID: follower, FolloweeID: followee, FolloweeFollowers: followers}, int64(i + 1)})
				}
				rows = append(rows, row{events.UserRegistered{UserID: author*100000 + int64(i), Name: "u"}, 1})
				if _, err := insert(ctx, w.db, rows, false); err != nil {
					if ctx.Err() == nil {
						t.Errorf("workload: %v", err)
					}
					return
				}
				w.mu.Lock()
				w.n += len(rows)
				w.mu.Unlock()
				if w.pause > 0 {
					time.Sleep(w.pause) // pacing
				}
			}
		}()
	}
	wg.Wait()
}

// value reads a counter or gauge.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

func (w *workload) written() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}
