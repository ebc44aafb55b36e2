package cdc

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/testkit/testenv"
)

func TestParseSnapshot(t *testing.T) {
	sn, err := parseSnapshot("10:20:10,14,15")
	if err != nil || sn.xmin != 10 || sn.xmax != 20 || len(sn.xip) != 3 || sn.xip[1] != 14 {
		t.Fatalf("got %+v, %v", sn, err)
	}
	sn, err = parseSnapshot("7:7:")
	if err != nil || sn.xmin != 7 || sn.xmax != 7 || len(sn.xip) != 0 {
		t.Fatalf("got %+v, %v", sn, err)
	}
	for _, bad := range []string{"", "1:2", "a:2:", "1:b:", "1:2:x", "5:4:", "1:2:3:4"} {
		if _, err := parseSnapshot(bad); err == nil {
			t.Errorf("parseSnapshot(%q) accepted", bad)
		}
	}
}

// finished decides by xmin, xmax and the running ids, with the 32-bit xid
// pgoutput sends placed in the snapshot's epoch (or the one next to it).
func TestSnapshotFinished(t *testing.T) {
	sn := pgSnapshot{xmin: 100, xmax: 110, xip: []uint64{100, 105}}
	for xid, want := range map[uint32]bool{99: true, 100: false, 101: true, 105: false, 109: true, 110: false, 200: false} {
		if got := sn.finished(xid); got != want {
			t.Errorf("finished(%d) = %v, want %v", xid, got, want)
		}
	}
	const epoch = uint64(3) << 32
	// xmax just after a wraparound: an xid from the end of the last epoch.
	after := pgSnapshot{xmin: epoch + 5, xmax: epoch + 10}
	if got := after.widen(0xFFFFFFF0); got != epoch-0x10 {
		t.Errorf("widen across the wraparound = %d, want %d", got, epoch-0x10)
	}
	if !after.finished(0xFFFFFFF0) || after.finished(12) || !after.finished(9) {
		t.Error("after a wraparound: want the old epoch's id finished, 12 running, 9 finished")
	}
	// xmax just before a wraparound: an xid already in the next epoch is
	// running (at or above xmax).
	before := pgSnapshot{xmin: epoch - 20, xmax: epoch - 10}
	if got := before.widen(3); got != epoch+3 {
		t.Errorf("widen into the next epoch = %d, want %d", got, epoch+3)
	}
	if before.finished(3) {
		t.Error("an id of the next epoch counted finished")
	}
	// epoch 0: nothing to borrow from.
	if got := (pgSnapshot{xmax: 10}).widen(0xFFFFFFF0); got != 0xFFFFFFF0 {
		t.Errorf("widen in epoch 0 = %d", got)
	}
}

// recordingPublisher acknowledges at once and keeps what it was given.
type recordingPublisher struct {
	mu   sync.Mutex
	msgs []*message.Message
}

func (p *recordingPublisher) Publish(_ string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, msgs...)
	return nil
}

func (p *recordingPublisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.msgs)
}

// A decoded transaction's events wait in their lane while PostgreSQL still
// shows the transaction as running to new snapshots, and go out once it
// committed; the reader goes on decoding meanwhile. (The window where a
// commit is decoded but not yet visible cannot be opened on demand on
// PostgreSQL 15; a transaction that is still open stands in for it: to a
// snapshot both are running ids.)
func TestEventsWaitUntilVisible(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	cfg := Config{DatabaseURL: db.URL, Slot: "unused", Topic: "unused", ConfirmInterval: 20 * time.Second, StatusInterval: 20 * time.Second}
	pub := &recordingPublisher{}
	c, err := New(cfg, db.Pool, pub)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.proc.start(ctx)
	go c.visible.run(ctx)
	r := &reader{c: c, relations: map[uint32]*eventColumns{}}
	cols := []string{"recorded_at", "metadata", "payload", "type", "stream_version", "stream_id", "event_id", "position"}
	if err := r.handle(ctx, encRelation(16384, "public", "events", cols)); err != nil {
		t.Fatal(err)
	}
	lsn := pglogrepl.LSN(1000)
	decode := func(xid uint32, events int) {
		t.Helper()
		if err := r.handle(ctx, encBegin(lsn, time.Now(), xid)); err != nil {
			t.Fatal(err)
		}
		for i := range events {
			pos := strconv.Itoa(int(lsn) + i)
			if err := r.handle(ctx, encInsert(16384, []*string{sp("2026-11-30 09:41:12.345+00"), sp(`{}`),
				sp(`{"followerId": "5", "followeeId": "` + pos + `", "followeeFollowers": 1}`), sp("user.followed.v1"), sp("1"),
				sp("follow-5-" + pos), sp("0193a4b2-7c1e-7d3a-9f00-" + fmt.Sprintf("%012d", int(lsn)+i)), sp(pos)})); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.handle(ctx, encCommit(lsn, lsn+1, time.Now())); err != nil {
			t.Fatal(err)
		}
		lsn += 10
	}
	running := func() (uint32, func() error) {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		var xs string
		if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xs); err != nil {
			t.Fatal(err)
		}
		xid, err := strconv.ParseUint(xs, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return uint32(xid), func() error { return tx.Commit(ctx) }
	}

	xid, commit := running()
	decode(xid, 3) // returns: the reader does not wait
	// The gate keeps asking PostgreSQL while the transaction runs: wait for
	// three of its snapshot reads (on a loaded machine they come slower),
	// then nothing may have been published.
	testenv.Eventually(t, 20*time.Second, "3 snapshot reads while the transaction runs", func() bool {
		return value(c.m.visibilityReads) >= 3
	})
	if n := pub.count(); n != 0 {
		t.Fatalf("%d events of a transaction still running were published", n)
	}
	if n := value(c.m.visibilityHeld); n != 1 {
		t.Errorf("held transactions = %v, want 1", n)
	}
	if err := commit(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the 3 events published after the commit", func() bool { return pub.count() == 3 })

	// A finished transaction goes out without being held.
	xid2, commit2 := running()
	if err := commit2(); err != nil {
		t.Fatal(err)
	}
	decode(xid2, 2)
	testenv.Eventually(t, 5*time.Second, "the next 2 events published", func() bool { return pub.count() == 5 })
	if n := value(c.m.visibilityHeld); n != 1 {
		t.Errorf("held transactions = %v, want still 1", n)
	}
	c.proc.stop()
}

// Through the whole path (PostgreSQL, the slot, CDC, the broker): every
// event read back from Kafka is visible in PostgreSQL at the moment it is
// read, while writers commit single-event transactions as fast as they can
// (the load under which a commit is most often decoded before its backend
// has finished committing).
func TestPublishedEventsAreVisible(t *testing.T) {
	t.Parallel()
	b := setup(t, 4)
	_, stop := b.start(t, b.config())
	defer stop()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.broker.Addrs()...), kgo.ConsumeTopics(b.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var written sync.Map
	var wrote atomic.Int64
	var wg sync.WaitGroup
	const writers, dur = 4, 3 * time.Second
	start := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Since(start) < dur; i++ {
				post := int64(w)<<32 | int64(i+1)
				ids, err := insert(ctx, b.db, []row{{events.PostCreated{PostID: post, AuthorID: int64(w + 1), Content: "v", CreatedAt: time.Now().UTC()}, 1}}, false)
				if err != nil {
					t.Error(err)
					return
				}
				written.Store(ids[0], true)
				wrote.Add(1)
			}
		}()
	}
	writing := make(chan struct{})
	go func() { wg.Wait(); close(writing) }()

	seen := map[string]bool{}
	var invisible []string
	done := false
	for !done {
		select {
		case <-writing:
			done = int64(len(seen)) >= wrote.Load()
		default:
		}
		pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		fs := cl.PollFetches(pctx)
		pcancel()
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d events before the deadline", len(seen), wrote.Load())
		}
		var ids []string
		fs.EachRecord(func(r *kgo.Record) {
			var env events.Envelope
			if err := json.Unmarshal(r.Value, &env); err != nil {
				t.Fatalf("record %d/%d: %v", r.Partition, r.Offset, err)
			}
			ids = append(ids, env.EventID)
		})
		if len(ids) == 0 {
			continue
		}
		// At once, before anything else: which of them PostgreSQL shows.
		there := queryIDs(t, ctx, b.db, `SELECT event_id::text FROM events WHERE event_id = ANY($1::uuid[])`, ids)
		for _, id := range ids {
			if !there[id] {
				invisible = append(invisible, id)
			}
			seen[id] = true
		}
	}
	n := 0
	written.Range(func(k, _ any) bool {
		if !seen[k.(string)] {
			t.Errorf("event %s written, never read back", k)
		}
		n++
		return true
	})
	t.Logf("%d single-event transactions in %v, %d read back, %d read before PostgreSQL showed them", n, dur, len(seen), len(invisible))
	if len(invisible) > 0 {
		t.Errorf("%d events were in Kafka before their transaction was visible in PostgreSQL, e.g. %v", len(invisible), invisible[:min(5, len(invisible))])
	}
}
