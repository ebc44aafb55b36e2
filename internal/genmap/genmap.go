// Package genmap is the bounded map of the in-process caches: two
// generations of at most half the bound each. A miss in the newer one
// looks in the older one and moves what it finds forward; when the newer
// one is full, a new key makes it the older one and drops the older. So
// what was used within the last half-bound insertions stays, without an
// LRU list to maintain on every hit. LRU (lru.go) is the plain
// implementation of the same Cache contract, and BenchmarkCache compares
// the two.
//
// A Map is not safe for concurrent use: the caches shard it and hold a
// shard's lock around it (Peek under a read lock, the rest under a write
// lock; GetShared takes that lock itself).
package genmap

import "sync"

// Map is a two-generation bounded map; make one with New.
type Map[K comparable, V any] struct {
	half     int
	cur, old map[K]V
}

// New returns a map keeping at most 2*half entries (half at least 1).
func New[K comparable, V any](half int) Map[K, V] {
	half = max(half, 1)
	return Map[K, V]{half: half, cur: make(map[K]V, half)}
}

// Peek looks in the newer generation only: it changes nothing, so a read
// lock suffices.
func (m *Map[K, V]) Peek(k K) (V, bool) {
	v, ok := m.cur[k]
	return v, ok
}

// Get looks in both generations and moves an entry found in the older one
// to the newer one.
func (m *Map[K, V]) Get(k K) (V, bool) {
	if v, ok := m.cur[k]; ok {
		return v, true
	}
	v, ok := m.old[k]
	if ok {
		m.Put(k, v)
	}
	return v, ok
}

// GetShared is Get with the shard's lock mu taken here: only the read lock
// when the newer generation holds k (most lookups), the write lock to look
// in the older one and move what it finds.
func (m *Map[K, V]) GetShared(mu *sync.RWMutex, k K) (V, bool) {
	mu.RLock()
	v, ok := m.Peek(k)
	mu.RUnlock()
	if ok {
		return v, true
	}
	mu.Lock()
	defer mu.Unlock()
	return m.Get(k)
}

// Put stores v under k in the newer generation. When that generation is
// full and k is not in it, it becomes the older one first, and the older
// one is dropped.
func (m *Map[K, V]) Put(k K, v V) {
	if _, ok := m.cur[k]; !ok && len(m.cur) >= m.half {
		m.old, m.cur = m.cur, make(map[K]V, m.half)
	}
	m.cur[k] = v
	delete(m.old, k)
}

// Len is the number of entries in both generations.
func (m *Map[K, V]) Len() int { return len(m.cur) + len(m.old) }

// Update replaces k's entry with f of it in whichever generation holds
// k, without moving it, and reports whether k was there.
func (m *Map[K, V]) Update(k K, f func(V) V) bool {
	if v, ok := m.cur[k]; ok {
		m.cur[k] = f(v)
		return true
	}
	if v, ok := m.old[k]; ok {
		m.old[k] = f(v)
		return true
	}
	return false
}

// Delete drops k from both generations.
func (m *Map[K, V]) Delete(k K) {
	delete(m.cur, k)
	delete(m.old, k)
}
