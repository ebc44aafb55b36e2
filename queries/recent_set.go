package queries

import (
	"sync"
	"time"
)

// recentSet remembers, per process, when something last happened to each
// id, for window: the activity writes (at most one per user per interval)
// and the failed write-throughs (probe PostgreSQL for that author until the
// window has passed). It stays bounded: past 100,000 ids, expired ones are
// dropped.
type recentSet struct {
	window time.Duration

	mu sync.Mutex
	at map[int64]time.Time
}

// mark records id at now.
func (r *recentSet) mark(id int64, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.markLocked(id, now)
}

// markUnlessRecent records id at now and reports true, unless id was
// marked within the window (then it reports false and changes nothing).
func (r *recentSet) markUnlessRecent(id int64, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.at[id]; ok && now.Sub(t) < r.window {
		return false
	}
	r.markLocked(id, now)
	return true
}

func (r *recentSet) markLocked(id int64, now time.Time) {
	if r.at == nil {
		r.at = make(map[int64]time.Time)
	}
	if len(r.at) > 100_000 {
		for k, t := range r.at {
			if now.Sub(t) >= r.window {
				delete(r.at, k)
			}
		}
	}
	r.at[id] = now
}

// has reports whether id was marked within the window.
func (r *recentSet) has(id int64, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.at[id]
	if !ok {
		return false
	}
	if now.Sub(t) >= r.window {
		delete(r.at, id)
		return false
	}
	return true
}

// forget drops id.
func (r *recentSet) forget(id int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.at, id)
}
