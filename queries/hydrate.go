package queries

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/readmodel"
)

// visibility says which hydrated posts a page may show.
type visibility struct {
	viewer      int64                 // home feeds: the reader, whose own posts are always shown
	author      int64                 // author pages: only this author's posts
	follows     followAnswers         // follow answers already read for this page (celebrities, hinted authors)
	checkFollow bool                  // hide authors not in following:{viewer}
	pre         map[int64]*cachedPost // posts already read from PostgreSQL
	fresh       bool                  // the deletion feed vouches for cached bodies (postCache.lookup)
	authors     *[]int64              // if set, receives the authors of the hydrated posts (follow hints)
	gen         *cacheGen             // the read-cache generation of the page's segment read (homeReply.gen): followsThrough
}

// hydrate appends to out the segment's keys, newest first, as up to want
// visible items, in batches (see hydrateBatch). A batch over-fetches a
// little so that a few hidden posts (deleted, unfollowed) do not cost
// another batch.
func (f *Feed) hydrate(ctx context.Context, keys []key, vis visibility, want int, out []item) ([]item, error) {
	limit := len(out) + want
	for len(keys) > 0 && len(out) < limit {
		short := limit - len(out)
		n := min(len(keys), short+short/4+2)
		batch := keys[:n]
		keys = keys[n:]
		var err error
		if out, err = f.hydrateBatch(ctx, batch, vis, out, limit); err != nil {
			return nil, err
		}
	}
	return out, nil
}

type hydrated struct {
	item    item
	cp      *cachedPost
	author  int64
	deleted bool
	ok      bool
}

// hydrateBatch shows a batch of keys. Bodies come from the in-process post
// cache; the posts it cannot answer (absent, or live but due for
// confirmation) are read with GET post:{p} in one pipeline, together with
// the follow check of the authors already known, so a warm batch costs one
// round trip. Posts missing from the Redis cache come from PostgreSQL.
func (f *Feed) hydrateBatch(ctx context.Context, batch []key, vis visibility, out []item, limit int) ([]item, error) {
	// A first page's batch (about 28 keys) fits the arrays on the stack.
	var resA [32]hydrated
	var idsA [32]int64
	var cachedA [32]*cachedPost
	res, ids, cached := resA[:0], idsA[:0], cachedA[:0]
	if len(batch) > len(resA) {
		res, ids, cached = make([]hydrated, 0, len(batch)), make([]int64, 0, len(batch)), make([]*cachedPost, 0, len(batch))
	}
	res, ids, cached = res[:len(batch)], ids[:len(batch)], cached[:len(batch)]
	for i, k := range batch {
		ids[i] = k.id
	}
	ask, _ := f.posts.lookup(ids, f.now(), vis.fresh, cached)
	for i, cp := range cached {
		if cp != nil {
			res[i] = fromCache(cp, batch[i])
		}
	}
	// Posts read from PostgreSQL by the fallback probe need no cache.
	// Posts older than the horizon are PostgreSQL's (old): Redis has
	// dropped their keys.
	var get, old []int
	hz, now := f.horizon(), f.now()
	for _, i := range ask {
		if cp, ok := vis.pre[batch[i].id]; ok {
			res[i] = fromCache(cp, batch[i])
			continue
		}
		if !hz.Within(batch[i].id, now) {
			old = append(old, i)
			continue
		}
		get = append(get, i)
	}
	follows := map[int64]bool{}
	// authors of cached bodies whose follow is not known yet
	authors := followQuestions(res, vis, nil)
	switch {
	case len(get) > 0: // bodies to read: the follow questions ride along
		pipe := f.rdb.Pipeline()
		bodies := f.queueBodies(ctx, pipe, batch, get)
		var known followCheck
		if len(authors) > 0 {
			known = followCheck{cmd: f.follows.QueueFollows(ctx, pipe, vis.viewer, memberArgs(authors)...), authors: authors}
		}
		if err := readmodel.ExecReads(ctx, pipe); err != nil {
			return nil, fmt.Errorf("hydrate posts: %w", redisErr(err))
		}
		if err := known.into(follows); err != nil {
			return nil, err
		}
		if err := f.hydrateRead(ctx, batch, res, get, old, bodies); err != nil {
			return nil, err
		}
	case len(authors) > 0: // every body cached: the read cache may know the follows too
		is, err := f.followsThrough(ctx, vis.gen, vis.viewer, authors)
		if err != nil {
			return nil, err
		}
		for i, a := range authors {
			follows[a] = is[i]
		}
	}
	if len(get) == 0 && len(old) > 0 {
		if err := f.hydrateRead(ctx, batch, res, nil, old, readmodel.BodyReads{}); err != nil {
			return nil, err
		}
	}
	f.metrics.hydProcess.Add(float64(len(batch) - len(ask)))
	// Authors learnt from Redis or PostgreSQL in this batch (a cold
	// process cache): one more round trip.
	more, err := f.followsOf(ctx, res, vis, follows)
	if err != nil {
		return nil, err
	}
	for a, ok := range more {
		follows[a] = ok
	}
	cands := make([]cand, 0, len(res))
	for _, h := range res {
		if !h.ok || h.deleted {
			continue
		}
		if vis.authors != nil {
			*vis.authors = append(*vis.authors, h.author)
		}
		if vis.author != 0 && h.author != vis.author {
			continue
		}
		if vis.checkFollow && h.author != vis.viewer && !vis.follows.follows(h.author) && !follows[h.author] {
			continue
		}
		cands = append(cands, cand{k: h.item.key, cp: h.cp})
	}
	known := func(a int64) (bool, bool) {
		if vis.follows.known(a) {
			return vis.follows.follows(a), true
		}
		is, ok := follows[a]
		return is, ok
	}
	return f.show(ctx, fromRedis, vis, known, cands, out, limit)
}

// hydrateRead fills res[i] for the bodies read from Redis (get, read in
// bodies), and from PostgreSQL for those Redis did not have and those
// older than the horizon (old), in one query.
func (f *Feed) hydrateRead(ctx context.Context, batch []key, res []hydrated, get, old []int, bodies readmodel.BodyReads) error {
	now := f.now().UnixNano()
	var missing []int64
	for _, i := range old {
		missing = append(missing, batch[i].id)
	}
	for j, i := range get {
		raw, ok := bodies.At(j)
		if !ok {
			missing = append(missing, batch[i].id)
			continue
		}
		cp, ok := cachedOf(raw, batch[i].id, batch[i].ms, now)
		if !ok {
			missing = append(missing, batch[i].id) // unreadable cache entry: ask the truth
			continue
		}
		res[i] = fromCache(f.posts.store(cp), batch[i])
	}
	f.metrics.hydRedis.Add(float64(len(get) + len(old) - len(missing)))
	if len(missing) > 0 {
		f.metrics.hydPG.Add(float64(len(missing)))
		rows, err := f.pgPostsByID(ctx, missing)
		if err != nil {
			return err
		}
		for i := range res {
			if res[i].ok {
				continue
			}
			if r, ok := rows[batch[i].id]; ok {
				cp := &cachedPost{it: itemOf(r.facts), facts: r.facts, author: r.facts.author, version: r.version, deleted: r.deleted, checkedAt: now}
				res[i] = fromCache(f.posts.store(cp), batch[i])
			}
			// A post the truth does not know is never shown.
		}
	}
	return nil
}

// cachedOf is the cache entry of a body of the Redis post cache (raw) of
// post id, shown at ms (0: at its createdAt); false when it is not
// readable as that post's.
func cachedOf(raw []byte, id, ms, now int64) (*cachedPost, bool) {
	var p readmodel.Post
	if err := json.Unmarshal(raw, &p); err != nil || p.ID != id {
		return nil, false
	}
	if ms == 0 {
		t, err := time.Parse(time.RFC3339Nano, p.CreatedAt)
		if err != nil {
			return nil, false
		}
		ms = t.UnixMilli()
	}
	fa := factsOf(p, ms)
	return &cachedPost{it: itemOf(fa), facts: fa, author: p.AuthorID, version: p.ContentVersion(), deleted: p.Deleted, checkedAt: now}, true
}

// cachedFromRedis is cachedOf the j-th body of reads, false when absent
// or unreadable.
func cachedFromRedis(reads readmodel.BodyReads, j int, id, ms, now int64) (*cachedPost, bool) {
	raw, ok := reads.At(j)
	if !ok {
		return nil, false
	}
	return cachedOf(raw, id, ms, now)
}

// queueBodies queues the reads of the bodies of batch[i] for i in get:
// one MGET on a single Redis server, one GET each on a cluster (every post
// key is its own slot).
func (f *Feed) queueBodies(ctx context.Context, pipe redis.Pipeliner, batch []key, get []int) readmodel.BodyReads {
	if len(get) == 0 {
		return readmodel.BodyReads{}
	}
	ids := make([]int64, len(get))
	for j, i := range get {
		ids[j] = batch[i].id
	}
	_, single := f.rdb.(*redis.Client)
	return f.bodies.QueueGet(ctx, pipe, ids, single)
}

// fromCache shows a cached post at the key the page was built with.
func fromCache(cp *cachedPost, k key) hydrated {
	it := cp.it
	it.key = k
	return hydrated{item: it, cp: cp, author: cp.author, deleted: cp.deleted, ok: true}
}

// followAnswers are the answers of one SMISMEMBER following:{viewer}:
// is[i] for authors[i] (missing answers are false). A page usually asks
// about a few dozen authors, and a scan of the slices the read already
// holds costs less than a map made per read; past maxScannedAuthors
// (many celebrities) an index is made.
type followAnswers struct {
	authors []int64
	is      []bool
	index   map[int64]int // nil: scan
	set     memberSet     // not nil: following:{viewer} whole (homeReply.set), which answers every author
}

const maxScannedAuthors = 96

func newFollowAnswers(authors []int64, is []bool) followAnswers {
	f := followAnswers{authors: authors, is: is}
	if len(authors) > maxScannedAuthors {
		f.index = make(map[int64]int, len(authors))
		for i, a := range authors {
			if _, dup := f.index[a]; !dup {
				f.index[a] = i
			}
		}
	}
	return f
}

// at is the index of a's answer, or -1 if a was not asked.
func (f followAnswers) at(a int64) int {
	if f.index != nil {
		if i, ok := f.index[a]; ok {
			return i
		}
		return -1
	}
	return slices.Index(f.authors, a)
}

// known reports whether a was asked (every author is known with the
// whole set).
func (f followAnswers) known(a int64) bool { return f.set != nil || f.at(a) >= 0 }

// follows reports whether a was asked and the answer was yes.
func (f followAnswers) follows(a int64) bool {
	if f.set != nil {
		return f.set.has(a)
	}
	i := f.at(a)
	return i >= 0 && i < len(f.is) && f.is[i]
}

// followCheck is a queued SMISMEMBER following:{viewer} and its authors.
type followCheck struct {
	cmd     *redis.BoolSliceCmd
	authors []int64
}

// into records the answers in follows.
func (c followCheck) into(follows map[int64]bool) error {
	if c.cmd == nil {
		return nil
	}
	is, err := c.cmd.Result()
	if err != nil {
		return fmt.Errorf("check follows: %w", err)
	}
	for i, a := range c.authors {
		follows[a] = i < len(is) && is[i]
	}
	return nil
}

// followQuestions lists the authors of shown-candidate posts whose follow
// is neither known from the page (the viewer, answers of its first
// pipeline) nor already answered.
func followQuestions(res []hydrated, vis visibility, answered map[int64]bool) []int64 {
	if !vis.checkFollow {
		return nil
	}
	var authors []int64
	for _, h := range res {
		a := h.author
		if !h.ok || h.deleted || a == vis.viewer || slices.Contains(authors, a) { // a batch is a few dozen posts
			continue
		}
		if vis.follows.known(a) {
			continue
		}
		if _, ok := answered[a]; ok {
			continue
		}
		authors = append(authors, a)
	}
	return authors
}

// memberArgs is the SMISMEMBER arguments of ids.
func memberArgs(ids []int64) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = strconv.FormatInt(id, 10)
	}
	return args
}

// followsOf asks following:{viewer} about the authors whose follow is not
// known yet: an author unfollowed since a post was pushed is hidden at once,
// before the inbox projector removes the post.
func (f *Feed) followsOf(ctx context.Context, res []hydrated, vis visibility, answered map[int64]bool) (map[int64]bool, error) {
	authors := followQuestions(res, vis, answered)
	if len(authors) == 0 {
		return nil, nil
	}
	is, err := f.followsThrough(ctx, vis.gen, vis.viewer, authors)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]bool, len(authors))
	for i, a := range authors {
		out[a] = is[i]
	}
	return out, nil
}
