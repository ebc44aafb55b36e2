package queries

import (
	"slices"
	"sync"

	"github.com/feedco/feed/internal/genmap"
)

// followHints remembers, per reader, the authors of the posts their last
// home page hydrated. The next read of the same reader asks following:{u}
// about them in its first pipeline (beside the celebrities), so a warm page
// needs no second round trip for the follow check: its answers are as
// fresh as today's (read from Redis in the same page), only asked earlier.
// An author the hint misses (a new post in the inbox) is asked afterwards,
// as before. Pages whose reader's following set the read cache holds whole
// keep no hint: the set answers every author (homeItems). Bounded like the
// other caches (genmap): two generations of at most half entries each.
type followHints struct {
	shards [hintShards]hintShard
}

// hintShards splits the readers over locks: every home read takes one
// twice (get, set).
const hintShards = 32

type hintShard struct {
	mu sync.RWMutex
	m  genmap.Map[int64, []int64]
	_  [16]byte // keep shards' locks on separate cache lines
}

// maxHintAuthors bounds one reader's hint (a page of 50 with over-fetch
// has at most about 70 distinct authors).
const maxHintAuthors = 80

func newFollowHints(users int) *followHints {
	h := &followHints{}
	for i := range h.shards {
		h.shards[i] = hintShard{m: genmap.New[int64, []int64](users / 2 / hintShards)}
	}
	return h
}

func (h *followHints) shard(user int64) *hintShard {
	return &h.shards[spread(user)%hintShards]
}

// get returns user's hinted authors (shared: do not modify).
func (h *followHints) get(user int64) []int64 {
	sh := h.shard(user)
	a, _ := sh.m.GetShared(&sh.mu, user)
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
	was, ok := sh.m.Peek(user)
	sh.mu.RUnlock()
	if ok && slices.Equal(was, authors) {
		return // the usual case: the same authors as last time
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.m.Put(user, slices.Clip(authors))
}
