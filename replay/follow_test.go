package replay

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/feedco/feed/events"
)

// follower runs a following replay into a pipe and hands back each line.
type follower struct {
	lines  chan events.Envelope
	cancel context.CancelFunc
	done   chan error
}

func follow(t *testing.T, src Source) *follower {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{lines: make(chan events.Envelope, 100), cancel: cancel, done: make(chan error, 1)}
	go func() {
		_, err := Copy(ctx, src, NewWriter(pw, JSONL, false), 0)
		pw.CloseWithError(err)
		f.done <- err
	}()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var e events.Envelope
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				panic(err)
			}
			f.lines <- e
		}
		close(f.lines)
	}()
	t.Cleanup(func() {
		cancel()
		<-f.done
	})
	return f
}

// next returns the next event printed, or fails after timeout.
func (f *follower) next(t *testing.T, what string) events.Envelope {
	t.Helper()
	select {
	case e, ok := <-f.lines:
		if !ok {
			t.Fatalf("%s: output ended", what)
		}
		return e
	// The PostgreSQL source prints only below the safe xid horizon, which is
	// cluster-wide: a transaction of another test package (the suite runs
	// packages at once against one server) holds it back for its duration.
	case <-time.After(90 * time.Second):
		t.Fatalf("%s: nothing printed within 90s", what)
	}
	return events.Envelope{}
}

// startSignal closes ch when the wrapped source finishes its first poll
// (its first nil emit: caught up, waiting for more).
type startSignal struct {
	Source
	ch   chan struct{}
	once sync.Once
}

func (s *startSignal) Stream(ctx context.Context, emit func(*events.Envelope) error) error {
	return s.Source.Stream(ctx, func(e *events.Envelope) error {
		if e == nil {
			s.once.Do(func() { close(s.ch) })
		}
		return emit(e)
	})
}

// newEvent is one more event after the known history.
func (b *bundle) newEvent(t *testing.T, n int) events.Envelope {
	t.Helper()
	e := events.PostCreated{PostID: int64(7500000000000000000 + n), AuthorID: 2, Content: fmt.Sprint("live ", n),
		CreatedAt: time.Date(2026, 12, 1, 0, 0, n, 0, time.UTC), AuthorFollowers: 1}
	payload, _ := events.Encode(e)
	return events.Envelope{
		EventID: fmt.Sprintf("00000000-0000-4000-9000-%012d", n), StreamID: e.StreamID(), StreamVersion: 1,
		Type: e.EventType(), Payload: payload, RecordedAt: time.Date(2026, 12, 1, 0, 0, n, 0, time.UTC),
		CommitLSN: fmt.Sprintf("1/%X", n*0x100), AudienceKey: e.AudienceKey(),
	}
}

// TestPGFollowPrintsLaterCommit: --follow prints the history, then an event
// committed after it started.
func TestPGFollowPrintsLaterCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	src, err := NewPG(b.db.Pool, PGConfig{Follow: true, Filter: Filter{Author: 2}, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f := follow(t, src)
	for _, want := range []int64{2, 7, 8} { // author 2's history
		if got := f.next(t, "history"); got.Position != want {
			t.Fatalf("history: position %d, want %d", got.Position, want)
		}
	}
	e := b.newEvent(t, 1)
	b.insert(t, &e)
	if got := f.next(t, "live event"); got.EventID != e.EventID || got.AudienceKey != 2 {
		t.Fatalf("live: got %+v", got)
	}
	f.cancel()
	if err := <-f.done; !errors.Is(err, context.Canceled) {
		t.Fatalf("follow ended with %v, want context.Canceled", err)
	}
	f.done <- nil // for the cleanup
}

// TestPGFollowLateCommitBelowPrinted is the case a reader that pages by
// position alone loses: transaction A got its id first, B took a lower
// position, A appended a higher one and committed while B was still open.
// The follower prints A's event, and B's when B commits, although its
// position is below what was already printed.
func TestPGFollowLateCommitBelowPrinted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	src, err := NewPG(b.db.Pool, PGConfig{Follow: true, Filter: Filter{From: mustBound(t, "14")}, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The follower must be past its start before A and B get their ids:
	// a start would wait for B, which this test holds open until A's
	// event is printed.
	started := &startSignal{Source: src, ch: make(chan struct{})}
	f := follow(t, started)
	select {
	case <-started.ch:
	case <-time.After(90 * time.Second):
		t.Fatal("follower did not finish its first poll within 90s")
	}

	txA, err := b.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(ctx)
	if _, err := txA.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil { // A's id first
		t.Fatal(err)
	}
	txB, err := b.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txB.Rollback(ctx)
	eB, eA := b.newEvent(t, 2), b.newEvent(t, 3)
	var posB, posA int64
	q := `INSERT INTO events (event_id, stream_id, stream_version, type, payload, recorded_at)
		VALUES ($1, $2, 1, $3, $4, $5) RETURNING position`
	if err := txB.QueryRow(ctx, q, eB.EventID, eB.StreamID, eB.Type, string(eB.Payload), eB.RecordedAt).Scan(&posB); err != nil {
		t.Fatal(err)
	}
	if err := txA.QueryRow(ctx, q, eA.EventID, eA.StreamID, eA.Type, string(eA.Payload), eA.RecordedAt).Scan(&posA); err != nil {
		t.Fatal(err)
	}
	if posB >= posA {
		t.Fatalf("setup: B's position %d should be below A's %d", posB, posA)
	}
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.next(t, "A's event"); got.Position != posA {
		t.Fatalf("first printed position %d, want A's %d", got.Position, posA)
	}
	if err := txB.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.next(t, "B's event"); got.Position != posB {
		t.Fatalf("then printed position %d, want B's %d", got.Position, posB)
	}
}

// TestKafkaFollowPrintsLaterRecord: the Kafka source prints the history
// merged, then records published after it started.
func TestKafkaFollowPrintsLaterRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := follow(t, b.kafka(t, Filter{}, true))
	for i := range b.envs {
		if got := f.next(t, "history"); got.Position != b.envs[i].Position {
			t.Fatalf("history[%d]: position %d, want %d", i, got.Position, b.envs[i].Position)
		}
	}
	e := b.newEvent(t, 4)
	e.Position = 100
	b.broker.PublishEvents(t, b.topic, e)
	if got := f.next(t, "live record"); got.EventID != e.EventID {
		t.Fatalf("live: got %+v", got)
	}
}
