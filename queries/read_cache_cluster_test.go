package queries

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/testkit/testenv"
)

// clusterReaders is a bundle on the test cluster with one reader on each
// master (by the node of the reader's keys, which share one hash tag),
// each following author a with three posts and read until a repeated
// read costs no round trip.
func clusterReaders(t *testing.T) (b *bundle, readers map[string]int64, a int64) {
	t.Helper()
	b = setupOn(t, Config{}, testenv.NewRedisCluster(t))
	b.useClock(newClock(time.Now()))
	cl := b.rdb.(*redis.ClusterClient)
	var nm atomic.Int64 // ForEachMaster runs fn on the masters concurrently
	if err := cl.ForEachMaster(b.ctx, func(context.Context, *redis.Client) error { nm.Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	masters := int(nm.Load())
	if masters < 2 {
		t.Skipf("a cluster of %d masters", masters)
	}
	readers = map[string]int64{}
	var us []int64
	for tries := 0; len(readers) < masters; tries++ {
		if tries == 200 {
			t.Fatalf("readers on %d of %d masters", len(readers), masters)
		}
		u := b.user()
		node, err := cl.MasterForKey(b.ctx, b.feed.tl.Key(u))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := readers[node.Options().Addr]; !ok {
			readers[node.Options().Addr] = u
			us = append(us, u)
		}
	}
	a = b.user()
	for _, u := range us {
		b.follow(u, a)
	}
	for i := range 3 {
		b.post(a, base+int64(i))
	}
	b.projectAll(nil, us, 500, 500)
	for addr, u := range readers {
		var rt *roundTrips
		var misses int64
		inOneGeneration(b, u, func() {
			for range 2 {
				firstItem(b, u)
				waitIdle(b.feed)
			}
			rt = countRoundTrips(b)
			misses = b.feed.cache.stats.misses.Load()
			firstItem(b, u)
		})
		if n := rt.n.Load(); n != 0 { // the items' counts (on their posts' nodes) and viewer state are kept too
			t.Fatalf("reader %d on %s: a repeated read took %d round trips (%d cache misses: %s), want 0",
				u, addr, n, b.feed.cache.stats.misses.Load()-misses, rt)
		}
		if g := genOf(b, u); g == nil || g.t.addr != addr {
			t.Fatalf("reader %d on %s: served by the tracker of %v", u, addr, g)
		}
	}
	return b, readers, a
}

// On a cluster, a reply cached from each master is invalidated by a write
// of another client to that master: each node's invalidations reach its
// own tracker.
func TestReadCacheClusterEachNode(t *testing.T) {
	t.Parallel()
	b, readers, a := clusterReaders(t)
	other := otherClient(b)
	i := int64(10)
	for addr, u := range readers {
		inv := b.feed.cache.stats.invalidated.Load()
		k := addToInbox(b, other, u, a, base+i)
		i++
		if err := b.feed.cache.sync(b.ctx); err != nil {
			t.Fatal(err)
		}
		if got := b.feed.cache.stats.invalidated.Load() - inv; got < 1 {
			t.Fatalf("node %s: %d invalidations after the write, want the inbox", addr, got)
		}
		if got, n := firstItem(b, u); got != k || n != 4 {
			t.Fatalf("node %s: first item %v of %d, want the new post %v of 4 (a stale inbox)", addr, got, n, k)
		}
	}
}

// A master's connections all lost at once (as a restart of the node drops
// them, and with them what it tracked for us): the cache is flushed, and
// a write made meanwhile, of which no invalidation reaches us, is on the
// first read of the node's next generation; the other nodes' trackers go
// on.
func TestReadCacheClusterNodeConnectionsLost(t *testing.T) {
	t.Parallel()
	b, readers, a := clusterReaders(t)
	var addr string
	var u int64
	for addr, u = range readers {
		break
	}
	g := genOf(b, u)
	others := map[int64]*cacheGen{}
	for _, v := range readers {
		if v != u {
			others[v] = genOf(b, v)
		}
	}
	node := nodeClient(b, g)
	ids := []int64{g.id}
	for _, tc := range g.conns {
		tc.mu.Lock()
		id, err := tc.cn.ClientID(b.ctx).Result()
		tc.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	flushes := b.feed.cache.stats.flushes.Load()
	for _, id := range ids {
		if err := node.Do(b.ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	k := addToInbox(b, otherClient(b), u, a, base+10)
	cacheUp(b, u, 2)
	if got := b.feed.cache.stats.flushes.Load() - flushes; got < 1 {
		t.Fatalf("%d flushes after node %s's connections were lost, want at least 1", got, addr)
	}
	if got, n := firstItem(b, u); got != k || n != 4 {
		t.Fatalf("first item %v of %d after node %s came back, want the new post %v of 4", got, n, addr, k)
	}
	for v, og := range others {
		if genOf(b, v) != og {
			t.Errorf("reader %d: its node's generation ended with another node's connections", v)
		}
	}
}

// A slot map that differs from the one read before (a slot moved, a
// failover) flushes the whole cache: the keys of a moved slot live on a
// node that never tracked them for us. (The slot map last read is
// replaced here by another; the cluster itself is shared by the tests and
// is not resharded.)
func TestReadCacheClusterSlotMapChangeFlushes(t *testing.T) {
	t.Parallel()
	b, readers, _ := clusterReaders(t)
	c := b.feed.cache
	flushes := c.stats.flushes.Load()
	c.mu.Lock()
	c.topo = "0-16383=127.0.0.1:1,"
	c.mu.Unlock()
	testenv.Eventually(t, 10*time.Second, "flush on the slot map change", func() bool {
		return c.stats.flushes.Load() > flushes
	})
	// Every reader's own keys are read again (the posts' counts, shared
	// by the readers, are read again by the first of them).
	for addr, u := range readers {
		misses := c.stats.misses.Load()
		rt := countRoundTrips(b)
		firstItem(b, u)
		if got := c.stats.misses.Load() - misses; rt.n.Load() == 0 || got < 4 {
			t.Fatalf("reader on %s: read from the cache after the slot map changed (%d round trips, %d misses, want the inbox, the timeline and both EXISTS at least)",
				addr, rt.n.Load(), got)
		}
	}
}
