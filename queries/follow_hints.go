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
	half int

	mu       sync.Mutex
	cur, old map[int64][]int64
}

// maxHintAuthors bounds one reader's hint (a page of 50 with over-fetch
// has at most about 70 distinct authors).
const maxHintAuthors = 80

func newFollowHints(users int) *followHints {
	half := max(users/2, 1)
	return &followHints{half: half, cur: make(map[int64][]int64)}
}

// get returns user's hinted authors (shared: do not modify).
func (h *followHints) get(user int64) []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a, ok := h.cur[user]; ok {
		return a
	}
	a, ok := h.old[user]
	if ok {
		h.putLocked(user, a)
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
	h.mu.Lock()
	defer h.mu.Unlock()
	if was, ok := h.cur[user]; ok && slices.Equal(was, authors) {
		return
	}
	h.putLocked(user, slices.Clip(authors))
}

func (h *followHints) putLocked(user int64, a []int64) {
	if _, ok := h.cur[user]; !ok && len(h.cur) >= h.half {
		h.old, h.cur = h.cur, make(map[int64][]int64, h.half)
	}
	h.cur[user] = a
}
