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
