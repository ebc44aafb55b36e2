package queries

import (
	"sync"
	"time"
)

// recentSet remembers, per process, when something last happened to each
// id, for window: the activity writes (at most one per user per
// interval). Every home read asks it, so the ids are split over shards,
// each with its own lock. It stays bounded: past 100,000 ids (over
// all shards), expired ones are dropped.
type recentSet struct {
	window time.Duration

	shards [recentShards]recentShard
}

const recentShards = 32

type recentShard struct {
	mu sync.RWMutex
	at map[int64]time.Time
	_  [32]byte // keep shards' locks on separate cache lines
}

func (r *recentSet) shard(id int64) *recentShard {
	return &r.shards[spread(id)%recentShards]
}

// mark records id at now.
func (r *recentSet) mark(id int64, now time.Time) {
	sh := r.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r.markLocked(sh, id, now)
}

// markUnlessRecent records id at now and reports true, unless id was
// marked within the window (then it reports false and changes nothing).
func (r *recentSet) markUnlessRecent(id int64, now time.Time) bool {
	sh := r.shard(id)
	sh.mu.RLock()
	t, ok := sh.at[id]
	sh.mu.RUnlock()
	if ok && now.Sub(t) < r.window {
		return false // the usual case: marked recently
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if t, ok := sh.at[id]; ok && now.Sub(t) < r.window {
		return false
	}
	r.markLocked(sh, id, now)
	return true
}

func (r *recentSet) markLocked(sh *recentShard, id int64, now time.Time) {
	if sh.at == nil {
		sh.at = make(map[int64]time.Time)
	}
	if len(sh.at) > 100_000/recentShards {
		for k, t := range sh.at {
			if now.Sub(t) >= r.window {
				delete(sh.at, k)
			}
		}
	}
	sh.at[id] = now
}

// has reports whether id was marked within the window.
func (r *recentSet) has(id int64, now time.Time) bool {
	sh := r.shard(id)
	sh.mu.RLock()
	t, ok := sh.at[id]
	sh.mu.RUnlock()
	if !ok {
		return false
	}
	if now.Sub(t) >= r.window {
		sh.mu.Lock()
		if t, ok := sh.at[id]; ok && now.Sub(t) >= r.window {
			delete(sh.at, id)
		}
		sh.mu.Unlock()
		return false
	}
	return true
}

// forget drops id.
func (r *recentSet) forget(id int64) {
	sh := r.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	delete(sh.at, id)
}
