package queries

import (
	"sync"
	"time"

	"github.com/feedco/feed/internal/genmap"
)

// postCache is the in-process cache of post bodies. A post's author and
// creation time never change; its content changes only by an edit, which
// raises its version, and `deleted` only once, from false to true. So:
//
//   - an entry known deleted is final and never asked again;
//   - an entry known live is trusted for ttl after it was last confirmed
//     (read from Redis or PostgreSQL, or written by this process on create
//     or edit);
//   - beyond that, while the change feed is fresh (every deletion and
//     edit committed before some T within ttl is applied here, see
//     deletion_feed.go), an entry confirmed within feedTrustMaxAge is
//     trusted too: had it been deleted or edited before T, it would be
//     marked or hold the edit;
//   - otherwise the next page that shows it asks Redis again (GET
//     post:{p}, in the page's hydration pipeline) and confirms or learns
//     the deletion or the edit.
//
// A body never replaces one of a higher version (an older answer from a
// Redis post cache the edit has not reached yet). Deletions and edits
// learnt from the feed are also remembered apart from the bodies for
// deletionMemory, so that a body evicted and read again from a Redis post
// cache that has no tombstone or edit yet is still known deleted or shown
// edited.
//
// Bounded by two generations of at most size/2 entries each (genmap): a
// hit in the old generation moves to the new one, and when the new one
// fills up the old one is dropped, so recently used posts survive (an
// approximate LRU with O(1) work and no per-entry list). Split in shards by post id, each
// with its own lock held for one post at a time: every page looks up 20-60
// posts, and on a busy 2-core machine one lock over the whole cache made
// readers queue behind a holder the kernel had descheduled.
type postCache struct {
	ttl    time.Duration
	shards []postShard
	mask   uint64
}

// postShard is one shard: its generations and the feed's deletions and
// edits of its ids.
type postShard struct {
	mu      sync.RWMutex // read-locked for a hit in the new generation (most lookups)
	m       genmap.Map[int64, *cachedPost]
	deleted map[int64]int64    // deletions learnt from the feed: id -> unix nanos learnt
	edits   map[int64]postEdit // the newest edit of each id learnt from the feed or written here
	_       [16]byte           // keep shards' locks on separate cache lines
}

// postEdit is an edit learnt from the change feed (or made by this
// process): the post's content as of version.
type postEdit struct {
	version  int64
	content  string
	editedAt string // RFC 3339 ms, "" when not known
	learnt   int64  // unix nanos
}

// cachedPost is one post body and what is known of its deletion.
type cachedPost struct {
	it        item      // the rendered post (key and Post strings)
	facts     postFacts // what it was rendered from, and what the rules need
	author    int64     // for the follow check
	version   int64     // the post version of its content (1 as created)
	deleted   bool      // final once true
	checkedAt int64     // unix nanos of the last confirmation of !deleted
}

// withEdit is a copy of p showing edit e (entries are shared with
// readers: never changed in place).
func (p *cachedPost) withEdit(id int64, e postEdit) *cachedPost {
	d := *p
	if d.facts.id == 0 { // made from its item alone (tests)
		d.facts = postFacts{id: id, author: p.author, ms: p.it.key.ms}
	}
	d.facts.content = e.content
	if e.editedAt != "" {
		d.facts.editedAt = e.editedAt
	}
	d.it = itemOf(d.facts)
	d.version = e.version
	return &d
}

// newPostCache splits size over up to 64 shards of at least 1,024 posts
// per generation (one shard below 4,096 posts).
func newPostCache(size int, ttl time.Duration) *postCache {
	n := 1
	for n < 64 && size/(4*n) >= 1024 { // doubling keeps 1,024 per generation
		n *= 2
	}
	c := &postCache{ttl: ttl, shards: make([]postShard, n), mask: uint64(n - 1)}
	for i := range c.shards {
		c.shards[i] = postShard{m: genmap.New[int64, *cachedPost](size / 2 / n), deleted: map[int64]int64{}, edits: map[int64]postEdit{}}
	}
	return c
}

// spread hashes an id for picking a shard (Fibonacci hashing: Snowflake
// ids share their low bits, sequential user ids their high ones). The
// post cache, the recent sets and the follow hints shard by it.
func spread(id int64) uint64 { return uint64(id) * 0x9E3779B97F4A7C15 >> 32 }

// shard returns the shard of post id.
func (c *postCache) shard(id int64) *postShard {
	return &c.shards[spread(id)&c.mask]
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
	for i, id := range ids {
		sh := c.shard(id)
		p, _ := sh.m.GetShared(&sh.mu, id) // promotes from the old generation
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

// store records what the source of a confirmation said about a post and
// returns the entry the cache now holds for it. A deletion is never undone
// by an older, live answer (a Redis post cache that has not got the
// tombstone yet), whether it is known from the entry or from the feed;
// nor is an edit: an answer of a lower version than the entry or an edit
// the feed learnt keeps the newer content (the answer still confirms that
// the post is live).
func (c *postCache) store(p *cachedPost) *cachedPost {
	id := p.it.key.id
	if p.facts.id == 0 { // made from its item alone
		p.facts = postFacts{id: id, author: p.author, content: p.it.post.Content, ms: p.it.key.ms}
	}
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	was, _ := sh.m.Get(id)
	if was != nil && was.deleted {
		return was
	}
	if _, gone := sh.deleted[id]; gone && !p.deleted {
		p = p.asDeleted()
	}
	if !p.deleted {
		if e, ok := sh.edits[id]; ok && e.version > p.version {
			p = p.withEdit(id, e)
		}
		if was != nil && was.version > p.version {
			q := *was
			q.checkedAt = max(was.checkedAt, p.checkedAt)
			p = &q
		}
	}
	sh.m.Put(id, p)
	return p
}

// markEdited applies an edit (from the change feed, or made by this
// process) at now: the cached body, if older, shows it, and a body read
// later from a source that has not got it yet does too (store).
func (c *postCache) markEdited(id, version int64, content string, editedAt, now time.Time) {
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, ok := sh.edits[id]; ok && e.version >= version {
		return
	}
	e := postEdit{version: version, content: content, learnt: now.UnixNano()}
	if !editedAt.IsZero() {
		e.editedAt = formatTime(editedAt.UnixMilli())
	}
	sh.edits[id] = e
	sh.m.Update(id, func(p *cachedPost) *cachedPost {
		if p.deleted || p.version >= version {
			return p
		}
		return p.withEdit(id, e)
	})
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
	for _, id := range ids {
		sh := c.shard(id)
		sh.mu.Lock()
		sh.deleted[id] = now.UnixNano()
		sh.m.Update(id, func(p *cachedPost) *cachedPost {
			if p.deleted {
				return p
			}
			return p.asDeleted()
		})
		sh.mu.Unlock()
	}
}

// forgetDeletionsBefore drops the feed's deletions and edits learnt
// before t (by then the Redis post cache has their tombstones and edits).
// Entries already marked stay deleted or edited.
func (c *postCache) forgetDeletionsBefore(t time.Time) {
	cut := t.UnixNano()
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for id, at := range sh.deleted {
			if at < cut {
				delete(sh.deleted, id)
			}
		}
		for id, e := range sh.edits {
			if e.learnt < cut {
				delete(sh.edits, id)
			}
		}
		sh.mu.Unlock()
	}
}

// knowsDeleted reports whether the feed's deletions hold id.
func (c *postCache) knowsDeleted(id int64) bool {
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, ok := sh.deleted[id]
	return ok
}

// evict drops id's body (not a deletion learnt from the feed).
func (c *postCache) evict(id int64) {
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.m.Delete(id)
}

// len returns the number of cached entries (both generations) and of
// deletions learnt from the feed.
func (c *postCache) len() (bodies, deletions int) {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		bodies += sh.m.Len()
		deletions += len(sh.deleted)
		sh.mu.Unlock()
	}
	return bodies, deletions
}
