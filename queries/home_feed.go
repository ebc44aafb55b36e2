package queries

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/readmodel"
)

// maxRedisRounds bounds how many Redis segments one page reads before the
// rest of the page comes from PostgreSQL (many hidden posts in a row).
const maxRedisRounds = 4

// Home returns a page of userID's home feed: the newest-first, non-deleted
// posts of the accounts userID follows and of userID itself (a user sees
// their own posts in their feed: read-your-writes), strictly older than the
// cursor ("" is the first page). Order is (createdAt ms, post id)
// descending, so pages never repeat or skip a post, even when posts arrive
// between pages.
//
// Redis serves what its read models are sure of (the inbox above its
// ~floor, followed celebrities' timelines, the caller's own timeline); the
// rest of the page continues from PostgreSQL. A cold inbox (no ~built) is
// served from PostgreSQL at once and rebuilt in the background. While
// Redis is unavailable the whole page comes from PostgreSQL, marked
// Degraded (degraded.go).
//
// The cursor may be a degraded page's resume cursor (HomeDegraded): the
// page then continues the full merge from where the degraded page was
// read, leaving out the posts it showed.
func (f *Feed) Home(ctx context.Context, userID int64, cursor string, limit int) (Page, error) {
	if err := checkArgs(userID, limit); err != nil {
		return Page{}, err
	}
	hc, err := parseHomeCursor(cursor)
	if err != nil {
		return Page{}, err
	}
	f.touch(userID)
	return f.homeFull(ctx, userID, hc, limit)
}

// homeFull is Home after its checks: the full merge, or the whole page
// from PostgreSQL while Redis is unavailable.
func (f *Feed) homeFull(ctx context.Context, userID int64, hc homeCursor, limit int) (Page, error) {
	return f.guardedPage(ctx, "home",
		func() (Page, error) { return f.home(ctx, userID, hc, limit) },
		func(ctx context.Context) (Page, error) {
			items, err := f.pgPull(ctx, userID, hc.at, limit+1+len(hc.exclude))
			if err != nil {
				return Page{}, err
			}
			return hc.page(items, limit), nil
		})
}

// home is Home from Redis (and PostgreSQL below what Redis is sure of).
func (f *Feed) home(ctx context.Context, userID int64, hc homeCursor, limit int) (Page, error) {
	buf := itemBufs.Get().(*[]item)
	// One more than shown says whether a next page exists; a resume
	// cursor's excluded posts may be among them.
	items, cold, err := f.homeItems(ctx, userID, hc.at, limit+1+len(hc.exclude), (*buf)[:0])
	defer func() { // makePage copied what it shows
		if cap(items) <= 256 {
			clear(items) // keep no post alive (the rest is zero already)
			*buf = items[:0]
			itemBufs.Put(buf)
		}
	}()
	if err != nil {
		return Page{}, err
	}
	p := hc.page(items, limit)
	p.Cold = cold
	return p, nil
}

// page makes the page of items read from hc.at: without hc's excluded
// posts, and, while excluded posts remain below its last item, with a
// nextCursor that still leaves them out.
func (hc homeCursor) page(items []item, limit int) Page {
	if len(hc.exclude) == 0 {
		return makePage(items, limit)
	}
	kept := make([]item, 0, len(items))
	for _, it := range items {
		if !hc.excluded(it.key) {
			kept = append(kept, it)
		}
	}
	p := makePage(kept, limit)
	if p.NextCursor != nil {
		last := kept[limit-1].key
		var left []key
		for _, e := range hc.exclude {
			if e.less(last) {
				left = append(left, e)
			}
		}
		if len(left) > 0 {
			c := encodeResume(last, left)
			p.NextCursor = &c
		}
	}
	return p
}

// homeItems appends to items up to need visible items of userID's home
// feed strictly older than cur, newest first: fewer only when the feed
// ends; cold says a read model of userID's was not built (the rest came
// from PostgreSQL). Home and HomeAfter (refresh.go) page with it.
func (f *Feed) homeItems(ctx context.Context, userID int64, cur key, need int, items []item) ([]item, bool, error) {
	return f.homeItemsAbove(ctx, userID, cur, need, items, key{}, nil)
}

// homeItemsAbove is homeItems ending at floor: the entries at or below it
// are neither hydrated nor returned (fewer items then). A live stream
// reads with its position as the floor (HomeAbove): a wake-up reads a few
// entries from the top and hydrates only those above where the stream
// is, most often one. A read with a floor leaves the reader's follow hint
// as it was: the hint is a first page's authors, not a few. The keys in
// have (ascending) are skipped like those below the floor, and each
// Redis read takes len(have) more keys to make up for them.
func (f *Feed) homeItemsAbove(ctx context.Context, userID int64, cur key, need int, items []item, floor key, have []events.FeedKey) ([]item, bool, error) {
	now := f.now()
	floored := floor != key{}
	fresh := f.useDeletionFeed(now)
	first := cur.ms >= maxCursorMs
	var hint []int64 // the authors a first page hydrates: the next read's hint
	var used [3]bool // redis, pg, cold
	mode := stepRedis
	for round := 0; len(items) < need && mode != stepEnd; round++ {
		if mode == stepRedis && round < maxRedisRounds {
			hr, cold, err := f.homeSegment(ctx, userID, cur, need-len(items)+len(have), true)
			if err != nil {
				return items, used[2], err
			}
			if cold.any() {
				used[2] = true
				f.startRebuilds(userID, cold)
				mode = stepPG
				continue
			}
			used[0] = true
			hr.vis.fresh = fresh
			if first && hr.vis.follows.set == nil && !floored {
				// The authors this page shows are the next read's hint,
				// unless the read cache holds the reader's following set
				// whole: that answers any author, and is read whole again
				// after it changes.
				if hint == nil {
					hint = make([]int64, 0, need+need/2+4)
				}
				hr.vis.authors = &hint
			}
			keys := hr.seg.keys // newest first
			end := len(keys)
			if floored {
				end = slices.IndexFunc(keys, func(k key) bool { return !floor.less(k) })
				if end < 0 {
					end = len(keys)
				}
			}
			items, err = f.hydrate(ctx, without(keys[:end], have), hr.vis, need-len(items), items)
			if err != nil {
				return items, used[2], err
			}
			cur, mode = lower(cur, hr.seg.bound), hr.seg.next
			if end < len(keys) {
				mode = stepEnd // the floor is reached
			}
			continue
		}
		if !used[2] {
			used[1] = true
		}
		got, err := f.pgPull(ctx, userID, cur, need-len(items))
		if err != nil {
			return items, used[2], err
		}
		items = append(items, got...)
		break // PostgreSQL is exact: the page is full or the feed ended
	}
	for i, u := range used {
		if u {
			f.metrics.homeSources[i].Inc()
		}
	}
	if first && used[0] && !floored {
		f.hints.set(userID, hint)
	}
	return items, used[2], nil
}

// without is keys less those in have (ascending): keys itself when none
// is, else a copy.
func without(keys []key, have []events.FeedKey) []key {
	in := func(k key) bool {
		// have is oldest first: the reverse of the feed's order.
		_, ok := slices.BinarySearchFunc(have, events.FeedKey{Ms: k.ms, ID: k.id}, func(h, t events.FeedKey) int { return events.NewestFirst(t, h) })
		return ok
	}
	i := slices.IndexFunc(keys, in)
	if i < 0 {
		return keys
	}
	out := append(make([]key, 0, len(keys)-1), keys[:i]...)
	for _, k := range keys[i+1:] {
		if !in(k) {
			out = append(out, k)
		}
	}
	return out
}

// itemBufs recycles the items of a page (about 1.8 KB for 21 items, the
// largest allocation of a read).
var itemBufs = sync.Pool{New: func() any { b := make([]item, 0, 64); return &b }}

// homeRead is one Redis segment of a home feed and how to show it.
type homeRead struct {
	seg segment
	vis visibility
}

// homeSegment reads, in one pipeline, the inbox from the cursor with its
// sentinels, the caller's own timeline and newest-post marker, and which
// celebrities the caller follows. On the first page the own timeline
// costs one command: reading from +inf inclusive returns ~built (score
// +inf) first and ~floor (the lowest member) whenever the reply is not
// cut; the inbox is one GETRANGE of its sealed string and a GET of its
// buffer. Then the followed
// celebrities' timelines, from the in-process cache when it covers the
// cursor, else in a second pipeline. want is how many visible posts the
// page still needs.
//
// Read-your-writes: the pipeline also reads the caller's newest-post
// marker, which the API sets when it commits a post (PostCreated) and the
// timelines projector clears when it has written the post. Only while
// there is one (seconds) does the segment also read the caller's posts
// newer than their timeline's newest from PostgreSQL, one query after the
// pipeline.
//
// A read model of the reader's that is not built (the inbox, the following
// state, the own timeline) makes the segment cold: the page comes from
// PostgreSQL, and the caller starts their rebuilds.
//
// Without pull (a degraded read, HomeDegraded) the celebrities are neither
// listed nor read: the segment is the inbox and the own timeline alone.
func (f *Feed) homeSegment(ctx context.Context, user int64, cur key, want int, pull bool) (homeRead, coldParts, error) {
	n := want + want/4 + 2 // over-fetch: hidden posts and the ~floor member
	// One view of the active versions for the whole segment: the inbox
	// and the celebrity set it is merged with are of versions built at
	// one celebrity threshold (inboxView).
	iv := f.inboxes()
	var celebs []celeb
	if pull {
		var err error
		if celebs, err = f.celebrities(ctx, iv); err != nil {
			return homeRead{}, coldParts{}, redisErr(err)
		}
	}
	// One SMISMEMBER following:{u} answers, in the same round trip,
	// whether the caller follows each celebrity and each author their last
	// page showed (the hint): a warm page needs no second round trip for
	// the follow check.
	hint := f.hints.get(user)
	asked := make([]int64, 0, len(celebs)+len(hint))
	for _, c := range celebs {
		if c.id == user {
			continue
		}
		asked = append(asked, c.id)
	}
	// asked[:nCeleb] are the celebrities: a few are scanned, more are
	// looked up in a map made for this read.
	nCeleb := len(asked)
	var celebSet map[int64]bool
	if nCeleb > 16 {
		celebSet = make(map[int64]bool, nCeleb)
		for _, c := range asked {
			celebSet[c] = true
		}
	}
	isCeleb := func(a int64) bool {
		if celebSet != nil {
			return celebSet[a]
		}
		return slices.Contains(asked[:nCeleb], a)
	}
	for _, a := range hint {
		if a == user || isCeleb(a) {
			continue
		}
		asked = append(asked, a)
	}
	rr, err := f.readHome(ctx, iv, user, cur, n, asked, nCeleb)
	if err != nil {
		return homeRead{}, coldParts{}, err
	}
	if cold := (coldParts{inbox: !rr.inbox.built, following: !rr.followBuilt, own: !rr.own.built}); cold.any() {
		return homeRead{}, cold, nil
	}
	var probe []cand
	if after, behind := ownBehind(rr.own.src, rr.newest, cur); behind {
		if probe, err = f.pgAuthorCands(ctx, user, cur, after, n); err != nil {
			return homeRead{}, coldParts{}, err
		}
	}
	inboxSrc, ownSrc := rr.inbox.src, rr.own.src
	srcs := make([]source, 0, 8) // and the probe's and the celebrities'
	srcs = append(srcs, inboxSrc, ownSrc)
	var pre map[int64]*cachedPost
	if len(probe) > 0 {
		pre = make(map[int64]*cachedPost, len(probe))
		probeSrc := source{bound: minKey}
		for _, c := range probe {
			pre[c.k.id] = c.cp
			probeSrc.keys = append(probeSrc.keys, c.k)
		}
		if len(probe) >= n {
			probeSrc.bound = probe[len(probe)-1].k // SQL orders exactly: complete above its last row
		}
		srcs = append(srcs, probeSrc)
	}

	follows := newFollowAnswers(asked, rr.member)
	follows.set = rr.set
	if len(asked) > 0 {
		is := rr.member
		var fcBuf [8]int64 // a reader follows a few celebrities
		fc := fcBuf[:0]
		for i, a := range asked[:nCeleb] {
			if ok := i < len(is) && is[i]; ok {
				fc = append(fc, a)
			}
		}
		if srcs, err = f.celebritySources(ctx, fc, cur, n, srcs); err != nil {
			return homeRead{}, coldParts{}, err
		}
	}
	return homeRead{
		seg: mergeSegment(cur, srcs),
		vis: visibility{viewer: user, follows: follows, checkFollow: true, pre: pre, gen: rr.gen},
	}, coldParts{}, nil
}

// ownBehind reports whether the caller's own timeline (own, read from
// cur) is behind their newest-post marker newest (a post id, 0: none),
// which the timelines projector clears when it adds the marked post: the
// timeline lacks the marked post, and perhaps older ones too. after is the
// timeline's newest key below the cursor (minKey: none), above which
// PostgreSQL has the caller's posts the timeline lacks, up to the cursor
// (the timeline's own source covers the rest). A marked post older than
// everything the timeline holds below the cursor is behind nothing there.
func ownBehind(own source, newest int64, cur key) (after key, behind bool) {
	if newest <= 0 {
		return minKey, false
	}
	mk := key{ms: snowflake.Time(newest).UnixMilli(), id: newest}
	after = minKey
	for _, k := range own.keys {
		if k.less(cur) && after.less(k) {
			after = k
		}
	}
	return after, after.less(mk)
}

// celebritySources appends to srcs the timelines of the followed
// celebrities from cur: the cached head when it covers the range, else a
// direct read, all direct reads in one pipeline.
func (f *Feed) celebritySources(ctx context.Context, celebs []int64, cur key, n int, srcs []source) ([]source, error) {
	if len(celebs) == 0 {
		return srcs, nil
	}
	var headBuf [8]*timelineHead
	heads, err := f.timelineHeads(ctx, celebs, headBuf[:0])
	if err != nil {
		return nil, redisErr(err)
	}
	var directs []readmodel.RangeRead
	var directAuthors []int64
	var pipe redis.Pipeliner // made for the first direct read only
	for i, c := range celebs {
		if h := heads[i]; h != nil && h.usable(cur, n) {
			srcs = append(srcs, h.src)
			continue
		}
		if pipe == nil {
			pipe = f.rdb.Pipeline()
		}
		directs = append(directs, f.tl.QueueRange(ctx, pipe, c, cur.ms, n))
		directAuthors = append(directAuthors, c)
	}
	if len(directs) == 0 {
		return srcs, nil
	}
	if err := readmodel.ExecReads(ctx, pipe); err != nil {
		return nil, fmt.Errorf("read celebrity timelines: %w", redisErr(err))
	}
	for i, d := range directs {
		s, built, err := rangeSource(d)
		if err != nil {
			return nil, fmt.Errorf("read celebrity timelines: %w", err)
		}
		if !built {
			f.startRebuild(rebuildKey{rebuildTimelineKind, directAuthors[i]})
		}
		srcs = append(srcs, s)
	}
	return srcs, nil
}
