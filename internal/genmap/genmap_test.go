package genmap

import (
	"sync"
	"testing"
)

// TestBoundAndPromotion: at most 2*half entries; a key read from the
// older generation survives the next rotation, an unread one does not;
// re-putting a key of the newer generation does not rotate.
func TestBoundAndPromotion(t *testing.T) {
	m := New[int, string](3)
	for k := range 3 {
		m.Put(k, "v")
	}
	m.Put(0, "again") // already in the newer generation: no rotation
	if m.Len() != 3 {
		t.Fatalf("len %d after re-putting a key, want 3", m.Len())
	}
	m.Put(3, "v") // rotates: 0,1,2 older; 3 newer
	if _, ok := m.Peek(0); ok {
		t.Fatal("Peek found a key of the older generation")
	}
	if v, ok := m.Get(0); !ok || v != "again" {
		t.Fatalf("Get(0) = %q %v, want the older generation's entry", v, ok)
	}
	if m.Len() != 4 { // 0 moved, not copied
		t.Fatalf("len %d after a promotion, want 4", m.Len())
	}
	m.Put(4, "v") // newer now 3,0,4: full
	m.Put(5, "v") // rotates: 3,0,4 older; 1 and 2 dropped
	for k, want := range map[int]bool{0: true, 1: false, 2: false, 3: true, 4: true, 5: true} {
		if _, ok := m.Get(k); ok != want {
			t.Errorf("key %d present %v, want %v", k, ok, want)
		}
	}
	for k := range 100 {
		m.Put(k+10, "v")
		if m.Len() > 6 {
			t.Fatalf("len %d, bound 6", m.Len())
		}
	}
}

// TestUpdateAndDelete: Update changes an entry where it is (an older one
// stays older: the next rotation drops it) and adds nothing; Delete drops
// a key from either generation.
func TestUpdateAndDelete(t *testing.T) {
	m := New[int, string](2)
	m.Put(1, "a")
	m.Put(2, "b")
	m.Put(3, "c") // rotates: 1, 2 older
	up := func(v string) string { return v + "!" }
	if !m.Update(1, up) || m.Update(9, up) {
		t.Fatal("Update: want true for a present key, false for an absent one")
	}
	if _, ok := m.Peek(1); ok {
		t.Fatal("Update moved an older entry to the newer generation")
	}
	if _, ok := m.Get(9); ok {
		t.Fatal("Update added an absent key")
	}
	m.Delete(2)
	m.Delete(3)
	if v, ok := m.Get(1); !ok || v != "a!" || m.Len() != 1 {
		t.Fatalf("after deletes: Get(1) = %q %v, len %d; want a! true 1", v, ok, m.Len())
	}
}

// TestGetShared: the same answers as Get, taking the lock itself, and a
// key of the older generation is moved forward; the lock is free after.
func TestGetShared(t *testing.T) {
	var mu sync.RWMutex
	m := New[int, string](2)
	m.Put(1, "one")
	m.Put(2, "two")
	m.Put(3, "three") // rotates: 1, 2 older
	if v, ok := m.GetShared(&mu, 3); !ok || v != "three" {
		t.Fatalf("GetShared(3) = %q %v", v, ok)
	}
	if v, ok := m.GetShared(&mu, 1); !ok || v != "one" {
		t.Fatalf("GetShared(1) = %q %v, want the older generation's entry", v, ok)
	}
	if _, ok := m.Peek(1); !ok {
		t.Fatal("GetShared did not move the older entry forward")
	}
	if _, ok := m.GetShared(&mu, 9); ok {
		t.Fatal("GetShared found an absent key")
	}
	if !mu.TryLock() {
		t.Fatal("the lock is still held after GetShared")
	}
	mu.Unlock()
}

// caches are the two Cache implementations, with a bound of 2*half: the
// contract tests run on both.
func caches(half int) map[string]Cache[int, string] {
	m := New[int, string](half)
	return map[string]Cache[int, string]{"genmap": &m, "lru": NewLRU[int, string](half)}
}

// TestCacheContract: what the caches rely on, for both implementations:
// what was put is found until the bound pushes it out, the bound holds, a
// key used since is kept over one that was not, Update changes only a
// present key, Delete drops one.
func TestCacheContract(t *testing.T) {
	for name, c := range caches(4) {
		t.Run(name, func(t *testing.T) {
			for k := range 4 {
				c.Put(k, "v")
			}
			if v, ok := c.Peek(3); !ok || v != "v" {
				t.Fatalf("Peek(3) = %q %v after putting it", v, ok)
			}
			for k := 4; k < 100; k++ {
				if _, ok := c.Get(0); !ok { // kept in use
					t.Fatalf("key 0, used before every put, dropped at %d", k)
				}
				c.Put(k, "v")
				if c.Len() > 8 {
					t.Fatalf("len %d, bound 8", c.Len())
				}
			}
			if _, ok := c.Get(5); ok {
				t.Fatal("key 5, unused since 90 puts, still there")
			}
			up := func(v string) string { return v + "!" }
			if !c.Update(0, up) || c.Update(5, up) {
				t.Fatal("Update: want true for a present key, false for an absent one")
			}
			if v, _ := c.Get(0); v != "v!" {
				t.Fatalf("Get(0) = %q after Update", v)
			}
			if _, ok := c.Get(5); ok {
				t.Fatal("Update added an absent key")
			}
			n := c.Len()
			c.Delete(0)
			c.Delete(12345)
			if _, ok := c.Get(0); ok || c.Len() != n-1 {
				t.Fatalf("after Delete: key 0 there %v, len %d, want gone and %d", ok, c.Len(), n-1)
			}
		})
	}
}

// BenchmarkCache, on a cache of 4,096 entries. "hit": lookups of keys it
// holds, the way a cache shard serves them: Map under the read lock
// (GetShared), LRU under the write lock (Get marks the entry used), one
// goroutine per core. "churn": a miss and a put of a new key, evicting.
//
//	go test -run '^$' -bench Cache -count 5 ./internal/genmap/
func BenchmarkCache(b *testing.B) {
	const n = 4096
	for name, c := range map[string]Cache[int, int]{"genmap": func() *Map[int, int] { m := New[int, int](n / 2); return &m }(), "lru": NewLRU[int, int](n / 2)} {
		b.Run("churn/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for k := 0; b.Loop(); k++ {
				if _, ok := c.Get(-1 - k); ok {
					b.Fatal("hit")
				}
				c.Put(k, k)
			}
		})
	}
	b.Run("hit/genmap", func(b *testing.B) {
		var mu sync.RWMutex
		m := New[int, int](n)
		for k := range n {
			m.Put(k, k)
		}
		b.RunParallel(func(pb *testing.PB) {
			for k := 0; pb.Next(); k++ {
				if _, ok := m.GetShared(&mu, k%n); !ok {
					b.Fatal("miss")
				}
			}
		})
	})
	b.Run("hit/lru", func(b *testing.B) {
		var mu sync.Mutex
		c := NewLRU[int, int](n)
		for k := range n {
			c.Put(k, k)
		}
		b.RunParallel(func(pb *testing.PB) {
			for k := 0; pb.Next(); k++ {
				mu.Lock()
				_, ok := c.Get(k % n)
				mu.Unlock()
				if !ok {
					b.Fatal("miss")
				}
			}
		})
	})
}
