package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/feedco/feed/events"
)

func mustBound(t *testing.T, s string) Bound {
	t.Helper()
	b, err := ParseBound(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// run replays src into a buffer.
func run(t *testing.T, src Source, f Format, withLSN bool, limit int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := Copy(ctx, src, NewWriter(&buf, f, withLSN), limit); err != nil {
		t.Fatalf("replay: %v", err)
	}
	return buf.Bytes()
}

func (b *bundle) pg(t *testing.T, f Filter) Source {
	t.Helper()
	s, err := NewPG(b.db.Pool, PGConfig{Filter: f, PageSize: 4}) // small pages: several per run
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (b *bundle) kafka(t *testing.T, f Filter, follow bool) Source {
	t.Helper()
	s, err := NewKafka(KafkaConfig{Brokers: b.broker.Addrs(), Topic: b.topic, Filter: f, Follow: follow})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestBothSourcesMatchGolden replays the known history from PostgreSQL and
// from Kafka with each filter and checks both outputs, byte for byte,
// against the same golden file.
func TestBothSourcesMatchGolden(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		name   string
		golden string
		filter Filter
		format Format
		limit  int64
	}{
		{name: "all", golden: "all.jsonl"},
		{name: "all csv", golden: "all.csv", format: CSV},
		{name: "one type", golden: "type_post_created.jsonl", filter: Filter{Types: []string{events.TypePostCreatedV1}}},
		{name: "edits", golden: "type_post_edited.jsonl", filter: Filter{Types: []string{events.TypePostEdited}}},
		{name: "edits csv", golden: "type_post_edited.csv", filter: Filter{Types: []string{events.TypePostEdited}}, format: CSV},
		{name: "two types", golden: "type_follows.jsonl", filter: Filter{Types: []string{events.TypeFollowed, events.TypeUnfollowed}}},
		{name: "stream", golden: "stream_post1.jsonl", filter: Filter{Stream: "post-7400000000000000001"}},
		{name: "author", golden: "author_1.jsonl", filter: Filter{Author: 1}},
		{name: "author csv", golden: "author_1.csv", filter: Filter{Author: 1}, format: CSV},
		{name: "positions", golden: "positions_4_9.jsonl", filter: Filter{From: mustBound(t, "4"), To: mustBound(t, "9")}},
		{name: "from position", golden: "from_10.jsonl", filter: Filter{From: mustBound(t, "10")}},
		{name: "timestamps", golden: "time_range.jsonl", filter: Filter{
			From: mustBound(t, "2026-11-30T09:41:15.345678Z"), // event 3, exactly: inclusive
			To:   mustBound(t, "2026-11-30T09:41:19.845678Z"), // event 6, exactly: inclusive
		}},
		{name: "mixed", golden: "mixed.jsonl", filter: Filter{Author: 1, Types: []string{events.TypePostCreatedV1}, From: mustBound(t, "2026-11-30T09:41:15Z")}},
		{name: "limit", golden: "limit_3.jsonl", limit: 3},
		{name: "limit after filter", golden: "limit_author_2.jsonl", filter: Filter{Author: 2}, limit: 2},
		{name: "nothing", golden: "empty.txt", filter: Filter{Author: 999}},
		{name: "nothing csv", golden: "empty.txt", filter: Filter{Stream: "no-such-stream"}, format: CSV},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := c.format
			if f == "" {
				f = JSONL
			}
			fromPG := run(t, b.pg(t, c.filter), f, false, c.limit)
			golden(t, c.golden, fromPG)
			fromKafka := run(t, b.kafka(t, c.filter, false), f, false, c.limit)
			if !bytes.Equal(fromPG, fromKafka) {
				t.Errorf("sources differ\n--- pg\n%s\n--- kafka\n%s", fromPG, fromKafka)
			}
		})
	}
}

// TestKafkaLSN: the Kafka source knows commit LSNs: --with-lsn prints them,
// and an LSN range selects by them (inclusive).
func TestKafkaLSN(t *testing.T) {
	t.Parallel()
	b := setup(t)
	golden(t, "all_with_lsn.jsonl", run(t, b.kafka(t, Filter{}, false), JSONL, true, 0))
	golden(t, "all_with_lsn.csv", run(t, b.kafka(t, Filter{}, false), CSV, true, 0))
	// Events 4..6 by LSN, the ends exactly: the same lines as positions 4..6.
	f := Filter{From: mustBound(t, b.envs[3].CommitLSN), To: mustBound(t, b.envs[5].CommitLSN)}
	got := run(t, b.kafka(t, f, false), JSONL, false, 0)
	want := run(t, b.pg(t, Filter{From: mustBound(t, "4"), To: mustBound(t, "6")}), JSONL, false, 0)
	if !bytes.Equal(got, want) || strings.Count(string(got), "\n") != 3 {
		t.Errorf("LSN range\n--- got\n%s\n--- want\n%s", got, want)
	}
}

// TestKafkaDedupeAndMerge: duplicates left by at-least-once delivery (the
// same events published again later, as after a CDC restart) are printed
// once, and the partitions are merged back into commit order.
func TestKafkaDedupeAndMerge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.broker.PublishEvents(t, b.topic, b.envs[2:9]...) // redelivered
	golden(t, "all.jsonl", run(t, b.kafka(t, Filter{}, false), JSONL, false, 0))
	// With a tiny per-partition buffer: partitions are paused and resumed
	// all along the merge.
	s, err := NewKafka(KafkaConfig{Brokers: b.broker.Addrs(), Topic: b.topic, MaxBuffered: 1})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "all.jsonl", run(t, s, JSONL, false, 0))
}

// TestInvalid: bad filters and options are ErrInvalid, so `feed events`
// exits 2.
func TestInvalid(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"abc", "-5", "1/xyz", "16/", "2026-13-01T00:00:00Z"} {
		if _, err := ParseBound(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseBound(%q) = %v, want ErrInvalid", s, err)
		}
	}
	if _, err := ParseFormat("xml"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseFormat(xml) = %v", err)
	}
	lsn := Bound{Kind: BoundLSN, LSN: 1}
	bad := []struct {
		name string
		err  error
	}{
		{"unknown type", Filter{Types: []string{"post.created.v9"}}.Validate()},
		{"from after to", Filter{From: Bound{Kind: BoundPosition, Position: 9}, To: Bound{Kind: BoundPosition, Position: 3}}.Validate()},
		{"negative author", Filter{Author: -1}.Validate()},
		{"lsn on pg", func() error { _, err := NewPG(noDB{}, PGConfig{Filter: Filter{From: lsn}}); return err }()},
		{"follow with to", func() error {
			_, err := NewPG(noDB{}, PGConfig{Follow: true, Filter: Filter{To: Bound{Kind: BoundPosition, Position: 3}}})
			return err
		}()},
		{"kafka without brokers", func() error { _, err := NewKafka(KafkaConfig{Topic: "x"}); return err }()},
	}
	for _, c := range bad {
		if !errors.Is(c.err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, c.err)
		}
	}
	// Every type the log may hold is a filter: the current ones, the old
	// post.created.v1, and reposts and likes with their undo.
	for _, typ := range knownTypes {
		if err := (Filter{Types: []string{typ}}).Validate(); err != nil {
			t.Errorf("--type %s: %v", typ, err)
		}
	}
	for _, typ := range []string{events.TypePostCreatedV1, events.TypePostCreated, events.TypePostReposted, events.TypePostUnreposted, events.TypePostLiked, events.TypePostUnliked} {
		if !slices.Contains(knownTypes, typ) {
			t.Errorf("%s is not among the known types", typ)
		}
	}
	if _, err := NewPG(nil, PGConfig{}); err == nil {
		t.Error("NewPG(nil) accepted a nil database")
	}
	if v, err := ParseLSN("16/B374D848"); err != nil || FormatLSN(v) != "16/B374D848" || v != 0x16B374D848 {
		t.Errorf("ParseLSN round trip: %x %v", v, err)
	}
}

// noDB satisfies Querier for constructor tests that never query.
type noDB struct{ Querier }

// TestKafkaMissingTopic is a clear error, not a hang.
func TestKafkaMissingTopic(t *testing.T) {
	t.Parallel()
	b := &bundle{broker: setupBroker(t)}
	s, err := NewKafka(KafkaConfig{Brokers: b.broker.Addrs(), Topic: "no.such.topic"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = Copy(ctx, s, NewWriter(&bytes.Buffer{}, JSONL, false), 0)
	if !errors.Is(err, ErrNoTopic) {
		t.Fatalf("got %v, want ErrNoTopic", err)
	}
}

// TestKafkaMergeBoundedBuffers replays more records than one fetch holds
// through per-partition buffers of 100 records: partitions are paused and
// resumed throughout, and the output is still complete and in commit order.
func TestKafkaMergeBoundedBuffers(t *testing.T) {
	t.Parallel()
	broker := setupBroker(t)
	topic := broker.Topic(t, 4)
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.Addrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 40000
	pad := strings.Repeat("x", 150)
	var recs []*kgo.Record
	for i := 1; i <= n; i++ {
		e := events.Envelope{EventID: fmt.Sprint(i), Position: int64(i), StreamID: "s", Type: events.TypeUserRegistered,
			Payload: json.RawMessage(`{"pad":"` + pad + `"}`), CommitLSN: FormatLSN(uint64(i) * 100), AudienceKey: int64(i % 7)}
		v, _ := json.Marshal(e)
		recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprint(i % 7)), Value: v})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	s, err := NewKafka(KafkaConfig{Brokers: broker.Addrs(), Topic: topic, MaxBuffered: 100})
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	count := 0
	err = s.Stream(context.Background(), func(e *events.Envelope) error {
		if e == nil {
			return nil
		}
		count++
		if e.Position != last+1 {
			return fmt.Errorf("position %d after %d", e.Position, last)
		}
		last = e.Position
		return nil
	})
	if err != nil || count != n {
		t.Fatalf("replayed %d of %d: %v", count, n, err)
	}
}
