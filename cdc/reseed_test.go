package cdc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/testkit/testenv"
)

// A reseed refills a new, empty topic from position 1 while writers keep
// committing and a transaction that began before the reseed commits during
// it; then CDC, restarted on the new topic, streams from its slot. The new
// topic holds every event of the log, each key's new events in commit
// order and its last occurrences too; reseed refuses beside a running CDC
// and for a position past the end of the log.
func TestReseedRefillsANewTopic(t *testing.T) {
	t.Parallel()
	b := setup(t, 6)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, stopCDC := b.start(t, b.config())
	o := newOrdered()
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		o.write(ctx, t, b.db, 21_000_000, 4)
	}()
	testenv.Eventually(t, 60*time.Second, "events published", func() bool { return value(c.m.published) > 200 })

	fresh := *b
	fresh.topic = b.broker.Topic(t, 6)
	cfg := b.config()
	cfg.Topic = fresh.topic
	reseed := func(from ReseedFrom) (ReseedResult, error) {
		pub := b.publisher(t)
		defer pub.Close()
		return Reseed(ctx, cfg, b.db.Pool, from, nil, pub)
	}
	testenv.Eventually(t, 30*time.Second, "slot active", func() bool {
		st, err := Status(ctx, b.db.Pool, b.slot)
		return err == nil && st.Active
	})
	if _, err := reseed(ReseedFrom{Position: 1}); !errors.Is(err, ErrCDCRunning) {
		t.Fatalf("reseed beside a running CDC: %v, want ErrCDCRunning", err)
	}
	stopCDC()
	testenv.Eventually(t, 30*time.Second, "slot inactive", func() bool {
		st, err := Status(ctx, b.db.Pool, b.slot)
		return err == nil && !st.Active
	})
	// Writes while CDC is stopped: the reseed publishes them and CDC,
	// restarted, streams them again from its slot.
	n := o.txns.Load()
	testenv.Eventually(t, 30*time.Second, "writers commit while CDC is stopped", func() bool { return o.txns.Load() >= n+10 })
	var last int64
	if err := b.db.Pool.QueryRow(ctx, `SELECT max(position) FROM events`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if _, err := reseed(ReseedFrom{Position: last + 1_000_000}); !errors.Is(err, ErrUnknownPosition) {
		t.Fatalf("reseed past the end of the log: %v, want ErrUnknownPosition", err)
	}
	if _, err := reseed(ReseedFrom{Time: time.Now().Add(time.Hour)}); !errors.Is(err, ErrUnknownPosition) {
		t.Fatalf("reseed from a time after the newest event: %v, want ErrUnknownPosition", err)
	}

	// A transaction that began before the reseed and commits during it:
	// the reseed waits for it, so it is published, visible.
	l := beginLate(ctx, t, b.db, []row{{events.PostCreated{PostID: 910001, AuthorID: 9_100_001, Content: "late", CreatedAt: time.Now().UTC()}, 1}})
	pub := b.publisher(t)
	defer pub.Close()
	type reseeded struct {
		res ReseedResult
		err error
	}
	done := make(chan reseeded, 1)
	go func() {
		res, err := Reseed(ctx, cfg, b.db.Pool, ReseedFrom{Position: 1}, nil, pub)
		done <- reseeded{res, err}
	}()
	// The reseed holds the slot's advisory lock from its start to its end,
	// and cannot end before the late transaction does.
	testenv.Eventually(t, 30*time.Second, "the reseed underway", func() bool {
		var n int
		err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
			WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()`).Scan(&n)
		return err == nil && n > 0
	})
	l.commit(ctx, t, o)
	r := <-done
	res, err := r.res, r.err
	if err != nil {
		t.Fatal(err)
	}
	if res.Events == 0 || res.FromPosition != 1 {
		t.Fatalf("reseed published %d events from position %d", res.Events, res.FromPosition)
	}

	// CDC again, on the new topic: it streams from its slot what the
	// reseed published and what committed since.
	_, _ = b.start(t, cfg)
	n = o.txns.Load()
	testenv.Eventually(t, 30*time.Second, "writers commit after the reseed", func() bool { return o.txns.Load() >= n+30 })
	cancel()
	<-wdone
	cons, all := checkTopicHasTheLog(t, &fresh, o)
	t.Logf("%d events in the log, %d reseeded in %v, %d records in the new topic, %d duplicates",
		all, res.Events, res.Took.Round(time.Millisecond), len(cons.recs), cons.duplicates())
	// The late transaction committed while the reseed waited: it is in
	// the reseed's snapshot, so its first occurrence is the reseed's.
	for _, r := range cons.recs {
		if r.env.EventID == l.ids[0] {
			if r.env.CommitLSN != res.CommitLSN.String() {
				t.Fatalf("the late transaction's event first arrived with commit LSN %s, not the reseed's %s", r.env.CommitLSN, res.CommitLSN)
			}
			break
		}
	}
	if cons.duplicates() == 0 {
		t.Fatal("no duplicates: CDC streamed nothing the reseed had published (the overlap this test is about did not happen)")
	}
}
