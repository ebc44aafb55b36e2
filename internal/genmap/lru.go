package genmap

import "github.com/hashicorp/golang-lru/v2/simplelru"

// Cache is what the in-process caches ask of a bounded map. Map is the one
// they use; LRU is the plain one beside it, and the contract tests run on
// both.
type Cache[K comparable, V any] interface {
	// Peek looks k up without changing anything (a read lock suffices).
	Peek(k K) (V, bool)
	// Get looks k up and marks it used.
	Get(k K) (V, bool)
	// Put stores v under k, evicting what the bound requires.
	Put(k K, v V)
	// Update replaces k's entry with f of it and reports whether k was
	// there; it adds nothing.
	Update(k K, f func(V) V) bool
	// Delete drops k.
	Delete(k K)
	// Len is the number of entries.
	Len() int
}

var (
	_ Cache[int, int] = (*Map[int, int])(nil)
	_ Cache[int, int] = (*LRU[int, int])(nil)
)

// LRU is the plain bounded map: hashicorp/golang-lru's simplelru with
// Map's bound, not safe for concurrent use either. The caches use Map
// because of their misses: a miss and a put cost Map a few times less CPU
// than LRU and no allocation per entry (LRU allocates a list element), and
// a hit is as cheap in both, Map's under a read lock
// (BenchmarkCache in genmap_test.go: churn and hit). What Map gives up is
// exact recency: it keeps what was used within the last half-bound puts.
type LRU[K comparable, V any] struct {
	l *simplelru.LRU[K, V]
}

// NewLRU returns an LRU keeping at most 2*half entries (half at least 1),
// the bound of New(half).
func NewLRU[K comparable, V any](half int) *LRU[K, V] {
	l, err := simplelru.NewLRU[K, V](2*max(half, 1), nil)
	if err != nil { // only for a size below 1
		panic(err)
	}
	return &LRU[K, V]{l: l}
}

// Peek looks k up without marking it used.
func (c *LRU[K, V]) Peek(k K) (V, bool) { return c.l.Peek(k) }

// Get looks k up and marks it the most recently used.
func (c *LRU[K, V]) Get(k K) (V, bool) { return c.l.Get(k) }

// Put stores v under k, evicting the least recently used entry when full.
func (c *LRU[K, V]) Put(k K, v V) { c.l.Add(k, v) }

// Update replaces k's entry with f of it and reports whether k was there.
func (c *LRU[K, V]) Update(k K, f func(V) V) bool {
	v, ok := c.l.Peek(k)
	if ok {
		c.l.Add(k, f(v))
	}
	return ok
}

// Delete drops k.
func (c *LRU[K, V]) Delete(k K) { c.l.Remove(k) }

// Len is the number of entries.
func (c *LRU[K, V]) Len() int { return c.l.Len() }
