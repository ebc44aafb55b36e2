package queries

import (
	"sync"
	"time"
)

// postCache is the in-process cache of post bodies. A post's content,
// author and creation time never change, so they are cached for as long as
// there is room; only `deleted` can change, once, from false to true. So:
//
//   - an entry known deleted is final and never asked again;
//   - an entry known live is trusted for ttl after it was last confirmed
//     (read from Redis or PostgreSQL, or written by this process on create);
//   - beyond that, while the deletion feed is fresh (every deletion
//     committed before some T within ttl is applied here, see
//     deletion_feed.go), an entry confirmed within feedTrustMaxAge is
//     trusted too: had it been deleted before T, it would be marked;
//   - otherwise the next page that shows it asks Redis again (GET
//     post:{p}, in the page's hydration pipeline) and confirms or learns
//     the deletion.
//
// Deletions learnt from the feed are also remembered apart from the
// bodies for deletionMemory, so that a body evicted and read again from a
// Redis post cache that has no tombstone yet is still known deleted.
//
// Bounded by two generations of at most size/2 entries each: a hit in the
// old generation moves to the new one, and when the new one fills up the
// old one is dropped, so recently used posts survive (an approximate LRU
// with O(1) work and no per-entry list).
type postCache struct {
	ttl  time.Duration
	half int // entries per generation

	mu       sync.Mutex
	cur, old map[int64]*cachedPost
	deleted  map[int64]int64 // deletions learnt from the feed: id -> unix nanos learnt
}

// cachedPost is one post body and what is known of its deletion.
type cachedPost struct {
	it        item  // the rendered post (key and Post strings)
	author    int64 // for the follow check
	deleted   bool  // final once true
	checkedAt int64 // unix nanos of the last confirmation of !deleted
}

func newPostCache(size int, ttl time.Duration) *postCache {
	half := max(size/2, 1)
	return &postCache{ttl: ttl, half: half, cur: make(map[int64]*cachedPost, half), deleted: map[int64]int64{}}
}

// lookup fills out[i] for every id the cache can answer now (deleted, or
// live and confirmed within ttl, or within feedTrustMaxAge when the
// deletion feed is fresh) and returns the indexes it could not: absent, or
// live but due for confirmation (their bodies are still returned in stale,
// so a confirmation only needs the deleted flag).
func (c *postCache) lookup(ids []int64, now time.Time, feedFresh bool, out []*cachedPost) (ask []int, stale []*cachedPost) {
	cutoff := now.Add(-c.ttl).UnixNano()
	if feedFresh {
		cutoff = min(cutoff, now.Add(-feedTrustMaxAge).UnixNano())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, id := range ids {
		p := c.getLocked(id)
		switch {
		case p == nil:
			ask = append(ask, i)
			stale = append(stale, nil)
		case p.deleted || p.checkedAt > cutoff:
			out[i] = p
		default:
			ask = append(ask, i)
			stale = append(stale, p)
		}
	}
	return ask, stale
}

// getLocked returns the entry of id, promoting it from the old generation.
func (c *postCache) getLocked(id int64) *cachedPost {
	if p, ok := c.cur[id]; ok {
		return p
	}
	p, ok := c.old[id]
	if !ok {
		return nil
	}
	c.putLocked(id, p)
	return p
}

func (c *postCache) putLocked(id int64, p *cachedPost) {
	if len(c.cur) >= c.half {
		c.old, c.cur = c.cur, make(map[int64]*cachedPost, c.half)
	}
	c.cur[id] = p
}

// store records what the source of a confirmation said about a post and
// returns the entry the cache now holds for it. A deletion is never undone
// by an older, live answer (a Redis post cache that has not got the
// tombstone yet), whether it is known from the entry or from the feed.
func (c *postCache) store(p *cachedPost) *cachedPost {
	id := p.it.key.id
	c.mu.Lock()
	defer c.mu.Unlock()
	if was := c.getLocked(id); was != nil && was.deleted {
		return was
	}
	if _, gone := c.deleted[id]; gone && !p.deleted {
		p = p.asDeleted()
	}
	c.putLocked(id, p)
	return p
}

// asDeleted is a copy of p marked deleted (entries are shared with readers:
// never changed in place).
func (p *cachedPost) asDeleted() *cachedPost {
	d := *p
	d.deleted = true
	return &d
}

// markDeleted applies deletions learnt from the deletion feed at now.
func (c *postCache) markDeleted(ids []int64, now time.Time) {
	if len(ids) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		c.deleted[id] = now.UnixNano()
		if p, ok := c.cur[id]; ok && !p.deleted {
			c.cur[id] = p.asDeleted()
		}
		if p, ok := c.old[id]; ok && !p.deleted {
			c.old[id] = p.asDeleted()
		}
	}
}

// forgetDeletionsBefore drops the feed's deletions learnt before t (by then
// the Redis post cache has their tombstones). Entries already marked stay
// deleted.
func (c *postCache) forgetDeletionsBefore(t time.Time) {
	cut := t.UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, at := range c.deleted {
		if at < cut {
			delete(c.deleted, id)
		}
	}
}

// len returns the number of cached entries (both generations).
func (c *postCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.old)
}
