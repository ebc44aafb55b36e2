package snowflake

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/feedco/feed/testkit/testenv"
)

// Two processes on one database: a node id held by one is refused to the
// other with who holds it; a process that asks for any node id gets a
// free one; a released node id is free at once.
func TestLeaseRefusesATakenNode(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	a, err := AcquireLease(ctx, db.Pool, LeaseConfig{Node: 5, Holder: "a pid 1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = AcquireLease(ctx, db.Pool, LeaseConfig{Node: 5, Holder: "b pid 2"})
	if !errors.Is(err, ErrNodeTaken) || !strings.Contains(err.Error(), "a pid 1") {
		t.Fatalf("a second lease of node 5: %v, want ErrNodeTaken naming its holder", err)
	}
	b, err := AcquireLease(ctx, db.Pool, LeaseConfig{Node: -1, Holder: "b pid 2"})
	if err != nil || b.Node() == 5 {
		t.Fatalf("a free node: %v, node %d", err, b.Node())
	}
	// A stopped process releases its lease: the node id is free at once.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := AcquireLease(ctx, db.Pool, LeaseConfig{Node: 5, Holder: "c pid 3"}); err != nil {
		t.Fatalf("node 5 after its release: %v", err)
	}
}

// A lease that expired (its process died without releasing it) is free;
// its successor issues no id at or below the high-water mark, however far
// its clock stepped back.
func TestLeaseHighWaterSurvivesAClockStepBack(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	a, err := AcquireLease(ctx, db.Pool, LeaseConfig{Node: 7, Holder: "a pid 1", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for range 1000 {
		last, _ = a.Generator().Next()
	}
	// A renewal persists a mark ahead of the clock; then the process dies.
	if err := a.renew(ctx, 2*time.Second/3); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE node_leases SET expires_at = now() - interval '1 second' WHERE node_id = 7`); err != nil {
		t.Fatal(err) // the lease ran out
	}
	b, err := AcquireLease(ctx, db.Pool, LeaseConfig{Node: 7, Holder: "b pid 2"})
	if err != nil {
		t.Fatal(err)
	}
	g := b.Generator()
	g.now = func() time.Time { return time.Now().Add(-time.Hour) } // the clock stepped back an hour
	id, _ := g.Next()
	if id <= last {
		t.Fatalf("after a clock step back the successor issued %d, not above the predecessor's %d", id, last)
	}
}

// Two generators on one node id (what a lease prevents) issue the same
// ids; each id issued by two processes on distinct leases is distinct.
func TestLeasedGeneratorsDoNotCollide(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	var gens []*Generator
	for _, h := range []string{"a pid 1", "b pid 2"} {
		l, err := AcquireLease(ctx, db.Pool, LeaseConfig{Node: -1, Holder: h})
		if err != nil {
			t.Fatal(err)
		}
		gens = append(gens, l.Generator())
	}
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	for _, g := range gens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50_000 {
				id, _ := g.Next()
				mu.Lock()
				if seen[id] {
					t.Errorf("id %d issued twice", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// A restart with the same node id after its process was killed (the lease
// left unreleased and unrenewed) waits for the lease to run out and takes
// it; a holder that renews its lease is live, and the same wait refuses.
func TestLeaseWaitsForAKilledHolder(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	if _, err := AcquireLease(ctx, db.Pool, LeaseConfig{Node: 9, Holder: "killed pid 1", TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	b, err := AcquireLease(ctx, db.Pool, LeaseConfig{Node: 9, Holder: "restarted pid 2", TTL: time.Second, WaitForExpiry: true})
	if err != nil || b.Node() != 9 {
		t.Fatalf("node 9 after its holder was killed: %v", err)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	_, err = AcquireLease(ctx, db.Pool, LeaseConfig{Node: 9, Holder: "other pid 3", TTL: time.Second, WaitForExpiry: true})
	if !errors.Is(err, ErrNodeTaken) || !strings.Contains(err.Error(), "restarted pid 2") {
		t.Fatalf("node 9 while its holder renews it: %v, want ErrNodeTaken naming the holder", err)
	}
}
