package queries

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// A Feed serves reads before Run and after it stops, without background
// work: a cold reader's page comes from PostgreSQL (Cold), its rebuild is
// not queued (counted deferred), no activity is written, and the read
// cache is off. Between Run and its stop, the same read queues the
// rebuild and the activity write, and the next page is warm. A Feed runs
// once.
func TestReadsBeforeRunAndAfterStop(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	f, err := New(Config{Keys: b.keys, Registerer: prometheus.NewRegistry()}, b.db.Pool, b.rdb)
	if err != nil {
		t.Fatal(err)
	}
	a := b.user()
	for i := range 3 {
		b.cachePost(b.post(a, base+int64(i)))
	}
	deferred := func() float64 {
		return counter(f.metrics.Rebuilds.WithLabelValues(string(rebuildInboxKind), "deferred"))
	}
	activity := func(u int64) int {
		t.Helper()
		var n int
		if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM user_activity WHERE user_id = $1`, u).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// without Run: served, nothing queued, nothing written
	idle := func(when string) {
		t.Helper()
		r := b.user()
		b.follow(r, a)
		before := deferred()
		p, err := f.Home(b.ctx, r, "", 10)
		if err != nil || !p.Cold || len(p.Items) != 3 {
			t.Fatalf("%s: cold %v, %d items, err %v; want a cold page of 3", when, p.Cold, len(p.Items), err)
		}
		if d := deferred(); d != before+1 {
			t.Errorf("%s: inbox rebuilds deferred %v, want %v", when, d, before+1)
		}
		waitIdle(f)
		if n := activity(r); n != 0 {
			t.Errorf("%s: the reader's activity was written", when)
		}
		if ex := b.rdb.Exists(b.ctx, b.inboxKey(r)).Val(); ex != 0 {
			t.Errorf("%s: the inbox was rebuilt", when)
		}
		if f.cache.current() != nil {
			t.Errorf("%s: the read cache is on", when)
		}
	}
	idle("before Run")

	svc := runFeed(t, f)
	r := b.user()
	b.follow(r, a)
	if p, err := f.Home(b.ctx, r, "", 10); err != nil || !p.Cold {
		t.Fatalf("running, first read of a cold reader: cold %v, err %v", p.Cold, err)
	}
	waitIdle(f)
	if n := activity(r); n != 1 {
		t.Errorf("running: activity rows %d, want 1", n)
	}
	if p, err := f.Home(b.ctx, r, "", 10); err != nil || p.Cold || len(p.Items) != 3 {
		t.Errorf("running, after the rebuild: cold %v, %d items, err %v; want a warm page of 3", p.Cold, len(p.Items), err)
	}
	if err := f.Run(context.Background()); !errors.Is(err, ErrRunTwice) {
		t.Errorf("a second Run: %v, want ErrRunTwice", err)
	}

	if err := svc.Stop(); err != nil {
		t.Fatal(err)
	}
	idle("after the stop")
}
