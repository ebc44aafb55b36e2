package queries

import (
	"slices"
	"sync"
)

// followHints remembers, per reader, the authors of the posts their last
// home page hydrated. The next read of the same reader asks following:{u}
// about them in its first pipeline (beside the celebrities), so a warm page
// needs no second round trip for the follow check: its answers are as
// fresh as today's (read from Redis in the same page), only asked earlier.
// An author the hint misses (a new post in the inbox) is asked afterwards,
// as before. Bounded like the post cache: two generations of at most half
// entries each.
type followHints struct {
	shards [hintShards]hintShard
}

// hintShards splits the readers over locks: every home read takes one
// twice (get, set).
const hintShards = 32

type hintShard struct {
	mu       sync.RWMutex
	half     int
	cur, old map[int64][]int64
	_        [16]byte // keep shards' locks on separate cache lines
}

// maxHintAuthors bounds one reader's hint (a page of 50 with over-fetch
// has at most about 70 distinct authors).
const maxHintAuthors = 80

func newFollowHints(users int) *followHints {
	h := &followHints{}
	for i := range h.shards {
		h.shards[i] = hintShard{half: max(users/2/hintShards, 1), cur: make(map[int64][]int64)}
	}
	return h
}

func (h *followHints) shard(user int64) *hintShard {
	return &h.shards[spread(user)%hintShards]
}

// get returns user's hinted authors (shared: do not modify).
func (h *followHints) get(user int64) []int64 {
	sh := h.shard(user)
	sh.mu.RLock()
	a, ok := sh.cur[user]
	sh.mu.RUnlock()
	if ok {
		return a
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	a, ok = sh.old[user]
	if ok {
		sh.putLocked(user, a)
	}
	return a
}

// set records the authors of user's page (sorted and deduplicated here),
// unless they are what the hint already says.
func (h *followHints) set(user int64, authors []int64) {
	if len(authors) == 0 {
		return
	}
	slices.Sort(authors)
	authors = slices.Compact(authors)
	if len(authors) > maxHintAuthors {
		authors = authors[:maxHintAuthors]
	}
	sh := h.shard(user)
	sh.mu.RLock()
	was, ok := sh.cur[user]
	sh.mu.RUnlock()
	if ok && slices.Equal(was, authors) {
		return // the usual case: the same authors as last time
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.putLocked(user, slices.Clip(authors))
}

func (sh *hintShard) putLocked(user int64, a []int64) {
	if _, ok := sh.cur[user]; !ok && len(sh.cur) >= sh.half {
		sh.old, sh.cur = sh.cur, make(map[int64][]int64, sh.half)
	}
	sh.cur[user] = a
}
