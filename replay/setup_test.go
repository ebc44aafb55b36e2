package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/testkit/kafkatest"
	"github.com/feedco/feed/testkit/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// bundle is a replay test's world: its own database and topic holding the
// same known events.
type bundle struct {
	db     *testenv.DB
	broker *kafkatest.Broker
	topic  string
	envs   []events.Envelope
}

// knownEvents is the fixed history the golden files describe: three users,
// posts (one deleted, one with HTML-sensitive and non-ASCII content),
// follows and an unfollow, as a log written before post.created.v2 holds
// them (posts as post.created.v1). Ids, times and metadata are fixed so the output
// is the same on every run.
func knownEvents(t testing.TB) []events.Envelope {
	t.Helper()
	base := time.Date(2026, 11, 30, 9, 41, 12, 345678000, time.UTC)
	var out []events.Envelope
	add := func(e events.Event, actor string) {
		payload, err := events.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		i := len(out)
		typ := e.EventType()
		if typ == events.TypePostCreated {
			typ = events.TypePostCreatedV1 // a log from before v2: its payload is v1's
		}
		out = append(out, events.Envelope{
			EventID:       fmt.Sprintf("00000000-0000-4000-8000-%012d", i+1),
			Position:      int64(i + 1),
			StreamID:      e.StreamID(),
			Type:          typ,
			Payload:       payload,
			Metadata:      events.Metadata{CorrelationID: "corr-" + strconv.Itoa(i+1), Actor: actor},
			RecordedAt:    base.Add(time.Duration(i) * 1500 * time.Millisecond),
			CommitLSN:     fmt.Sprintf("0/%X", 0x1000000+(i+1)*0x1A0),
			AudienceKey:   e.AudienceKey(),
			StreamVersion: 1,
		})
	}
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second).Truncate(time.Millisecond) }
	add(events.UserRegistered{UserID: 1, Name: "ada"}, "")
	add(events.UserRegistered{UserID: 2, Name: "bob"}, "")
	add(events.UserRegistered{UserID: 3, Name: "cy"}, "")
	add(events.Followed{FollowerID: 2, FolloweeID: 1, FolloweeFollowers: 1}, "2")
	add(events.Followed{FollowerID: 3, FolloweeID: 1, FolloweeFollowers: 2}, "3")
	add(events.PostCreated{PostID: 7400000000000000001, AuthorID: 1, Content: "hello <world> & café", CreatedAt: at(5), AuthorFollowers: 2}, "1")
	add(events.PostCreated{PostID: 7400000000000000002, AuthorID: 2, Content: "bob's first", CreatedAt: at(6), AuthorFollowers: 0}, "2")
	add(events.Followed{FollowerID: 1, FolloweeID: 2, FolloweeFollowers: 1}, "1")
	add(events.PostCreated{PostID: 7400000000000000003, AuthorID: 1, Content: "second", CreatedAt: at(8), AuthorFollowers: 2}, "1")
	add(events.PostDeleted{PostID: 7400000000000000001, AuthorID: 1, DeletedAt: at(9)}, "1")
	add(events.Unfollowed{FollowerID: 3, FolloweeID: 1, FolloweeFollowers: 1}, "3")
	add(events.PostCreated{PostID: 7400000000000000004, AuthorID: 3, Content: "line\nbreak, \"quoted\"", CreatedAt: at(11), AuthorFollowers: 0}, "3")
	add(events.PostEdited{PostID: 7400000000000000003, AuthorID: 1, Content: "second, edited <b>", Version: 2, EditedAt: at(13)}, "1")
	// Stream versions: the deletion is version 2 of its post, the
	// unfollow version 2 of its follow pair, the edit version 2 of its post.
	out[9].StreamVersion = 2
	out[10].StreamVersion = 2
	out[12].StreamVersion = 2
	return out
}

// setup writes the known events into a fresh database, each in its own
// transaction, and publishes the same envelopes to a fresh topic in the
// contract format CDC uses (docs/architecture.md).
func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{db: testenv.NewDB(t), broker: kafkatest.Start(t), envs: knownEvents(t)}
	b.topic = b.broker.Topic(t, 4)
	for i := range b.envs {
		b.insert(t, &b.envs[i])
	}
	b.broker.PublishEvents(t, b.topic, b.envs...)
	return b
}

// insert appends one envelope to the event log in its own transaction, as
// the write side does (position and tx_id from their defaults).
func (b *bundle) insert(t testing.TB, e *events.Envelope) {
	t.Helper()
	md, err := json.Marshal(e.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	// CDC publishes the payload as PostgreSQL stored it (jsonb reorders
	// keys): keep what the log returns, as CDC would see it.
	var payload string
	err = b.db.Pool.QueryRow(context.Background(), `INSERT INTO events
		(event_id, stream_id, stream_version, type, payload, metadata, recorded_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING position, payload::text`,
		e.EventID, e.StreamID, e.StreamVersion, e.Type, string(e.Payload), string(md), e.RecordedAt).Scan(&e.Position, &payload)
	if err != nil {
		t.Fatalf("insert %s: %v", e.EventID, err)
	}
	e.Payload = json.RawMessage(payload)
}

// golden compares got with testdata/name (rewritten with -update).
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden %s (run with -update to create): %v", path, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: output differs from golden\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func setupBroker(t *testing.T) *kafkatest.Broker { return kafkatest.Start(t) }
