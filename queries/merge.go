package queries

import (
	"math"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
)

// This file is the pure part of the read path: no I/O, so every rule about
// order, duplicates, cursors and completeness bounds is unit-tested alone.

// source is one sorted set's (or one query's) contribution to a segment of a
// feed. The set is complete for keys strictly above bound: everything it
// holds there is in keys. Below bound it knows nothing.
type source struct {
	keys  []key // any order (see desc); may hold keys outside the segment
	bound key   // minKey: complete down to the very first post
	floor bool  // bound is the set's ~floor (below it only PostgreSQL knows), not a LIMIT cut
	desc  bool  // keys are in descending millisecond order (ties in any order): a reverse range reply
}

// step says where a page continues after a segment.
type step int

const (
	stepEnd   step = iota // every source is complete: nothing older exists
	stepRedis             // a LIMIT cut stopped the segment: read Redis again from its bound
	stepPG                // a ~floor (or no progress) stopped it: continue from PostgreSQL
)

// segment is the merged part of a feed the sources are jointly sure of: the
// keys strictly between bound and the cursor.
type segment struct {
	keys  []key // newest first, no duplicates
	bound key
	next  step
}

// mergeSegment merges sources read from cursor cur. Only keys strictly older
// than cur and strictly above the highest bound of all sources are kept:
// above that bound every source is complete, so the union is the feed there.
func mergeSegment(cur key, srcs []source) segment {
	seg := segment{bound: minKey}
	floor := false
	for _, s := range srcs {
		switch {
		case seg.bound.less(s.bound):
			seg.bound, floor = s.bound, s.floor
		case s.bound == seg.bound:
			floor = floor || s.floor
		}
	}
	allDesc := true
	for _, s := range srcs {
		allDesc = allDesc && s.desc
	}
	var keys []key
	if allDesc {
		keys = mergeDesc(cur, seg.bound, srcs) // every Redis source is: no sort
	} else {
		// The keys in range: a descending source (a celebrity's cached
		// head holds 200) is cut at the first millisecond below the bound.
		inRange := func(s source, add func(key)) {
			for _, k := range s.keys {
				if s.desc && k.ms < seg.bound.ms {
					break // every later key is older still
				}
				if k.less(cur) && seg.bound.less(k) {
					add(k)
				}
			}
		}
		n := 0
		for _, s := range srcs {
			inRange(s, func(key) { n++ })
		}
		keys = make([]key, 0, n)
		for _, s := range srcs {
			inRange(s, func(k key) { keys = append(keys, k) })
		}
		sortNewestFirst(keys)
	}
	seg.keys = slices.Compact(keys)
	switch {
	case seg.bound == minKey:
		seg.next = stepEnd
	case floor || !seg.bound.less(cur):
		// A floor means only PostgreSQL knows what is below. No progress
		// (more same-millisecond entries than a fetch returns) would loop
		// forever on Redis; PostgreSQL orders ties exactly.
		seg.next = stepPG
	default:
		seg.next = stepRedis
	}
	return seg
}

// mergeDesc returns the keys of descending sources strictly between bound
// and cur, newest first (duplicates adjacent): each source's window of
// milliseconds from cur's down to bound's is found by binary search, the
// windows are merged by millisecond, and the keys of one millisecond (in
// any order within a source) are then sorted by id.
func mergeDesc(cur, bound key, srcs []source) []key {
	var winBuf [8][]key
	wins := winBuf[:0]
	n := 0
	for _, s := range srcs {
		ks := s.keys
		// The first key at or below cur's millisecond, and the first
		// below bound's: the keys outside are out of range.
		lo := firstBelow(ks, cur.ms, true)
		hi := lo + firstBelow(ks[lo:], bound.ms, false)
		if hi > lo {
			wins = append(wins, ks[lo:hi])
			n += hi - lo
		}
	}
	keys := make([]key, 0, n)
	for len(wins) > 0 {
		best := 0
		for i := 1; i < len(wins); i++ {
			if wins[i][0].ms > wins[best][0].ms {
				best = i
			}
		}
		k := wins[best][0]
		if wins[best] = wins[best][1:]; len(wins[best]) == 0 {
			wins[best] = wins[len(wins)-1]
			wins = wins[:len(wins)-1]
		}
		if k.less(cur) && bound.less(k) { // cur's and bound's own millisecond hold keys on both sides
			keys = append(keys, k)
		}
	}
	// Within one millisecond: by id, newest first (insertion sort: ties
	// are few).
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j].ms == keys[j-1].ms && keys[j-1].id < keys[j].id; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

// firstBelow returns the index of the first key of ks (in descending
// millisecond order) whose millisecond is below ms, or at ms too with
// orAt; len(ks) if none.
func firstBelow(ks []key, ms int64, orAt bool) int {
	lo, hi := 0, len(ks)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if k := ks[m].ms; k > ms || k == ms && !orAt {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// lower returns the older of two keys: where a page continues after a
// segment (its bound may lie above the cursor when it made no progress).
func lower(a, b key) key {
	if a.less(b) {
		return a
	}
	return b
}

// sortNewestFirst sorts keys by (ms, id) descending. Equal keys (one post
// seen through two sources) end up adjacent, so Compact removes them.
func sortNewestFirst(keys []key) {
	slices.SortFunc(keys, func(a, b key) int {
		switch {
		case b.less(a):
			return -1
		case a.less(b):
			return 1
		}
		return 0
	})
}

// mergePage is the textbook feed merge over complete sources: merge,
// drop duplicates, keep entries strictly older than cur, newest first, cut
// to limit.
func mergePage(cur key, limit int, lists ...[]key) []key {
	srcs := make([]source, len(lists))
	for i, l := range lists {
		srcs[i] = source{keys: l, bound: minKey}
	}
	keys := mergeSegment(cur, srcs).keys
	if len(keys) > limit {
		keys = keys[:limit]
	}
	return keys
}

// zsource turns a ZREVRANGEBYSCORE ... LIMIT 0 limit reply (sentinels
// included) and the set's ~floor score into a source. The source is desc:
// a reverse range comes in descending score, and a key's millisecond is
// its score (were that mapping ever not monotonic, desc must go). A full reply is a cut:
// the set is then only known complete above the last score returned, because
// Redis orders same-score members by their bytes, not as numbers, so the
// entries of that last millisecond may be partial.
func zsource(reply []redis.Z, limit int, floorMs *int64) source {
	s := source{bound: minKey, keys: make([]key, 0, len(reply)), desc: true}
	for _, z := range reply {
		m, ok := z.Member.(string)
		if !ok || readmodel.IsSentinel(m) {
			continue
		}
		id, err := strconv.ParseInt(m, 10, 64)
		if err != nil || id <= 0 || math.IsInf(z.Score, 0) || math.IsNaN(z.Score) {
			continue // not a post id: never shown
		}
		s.keys = append(s.keys, key{ms: int64(z.Score), id: id})
	}
	if limit > 0 && len(reply) >= limit {
		last := reply[len(reply)-1].Score
		if !math.IsInf(last, 0) && !math.IsNaN(last) {
			s.bound = below(int64(last))
		}
	}
	if floorMs != nil {
		if fb := below(*floorMs); !fb.less(s.bound) {
			s.bound, s.floor = fb, true
		}
	}
	return s
}

// packedSource turns a packed inbox page into a source, by zsource's
// rules: the page is newest first by id, which is (ms, id) order, so it
// is desc; a page cut by its limit (More) is complete strictly above the
// last millisecond returned (as zsource's cut, though ids order a
// millisecond exactly: the same bound whichever layout); the floor bounds
// it as ~floor does.
func packedSource(p homefeed.Page) source {
	s := source{bound: minKey, keys: make([]key, 0, len(p.Entries)), desc: true}
	for _, e := range p.Entries {
		if e.ID <= 0 {
			continue // not a post id: never shown
		}
		s.keys = append(s.keys, key{ms: e.Ms, id: e.ID})
	}
	if p.More && len(p.Entries) > 0 {
		s.bound = below(p.Entries[len(p.Entries)-1].Ms)
	}
	if p.Floor != nil {
		if fb := below(*p.Floor); !fb.less(s.bound) {
			s.bound, s.floor = fb, true
		}
	}
	return s
}
