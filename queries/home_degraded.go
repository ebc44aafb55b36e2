package queries

import (
	"context"
)

// The degraded home feed: what a process at its degrade point answers
// instead of the full merge (the api decides when, docs/api.md "Load
// shedding").
//
// A degraded page is the reader's inbox and own posts from Redis alone: no
// celebrity pull and no PostgreSQL page below a ~floor, so it costs one
// pipeline and the hydration. It may lack posts the full merge would show
// among its own (a followed celebrity's, or those only PostgreSQL holds
// below the inbox's floor), so its nextCursor is a resume cursor (version
// 2, cursor.go): the position the page was read from and the keys of the
// posts it showed. A page read from that cursor is the full merge from the
// same position without those posts: the degraded page and the pages
// after it show every post of the feed once, none skipped, none repeated.
// A resume cursor keeps the excluded posts that lie below its page's last
// post, so the pages after it go on leaving them out until they pass them.

// HomeDegraded is Home for a process at its degrade point: the degraded
// page above, marked Degraded and Partial. It answers the full merge
// (Home) instead when a degraded page is not possible or not useful: the
// cursor is a resume cursor already (so its exclusions stay bounded by one
// page), a read model of the reader is not built (cold), or Redis holds
// nothing to show from the cursor. While Redis is unavailable the page
// comes from PostgreSQL, as Home's does.
func (f *Feed) HomeDegraded(ctx context.Context, userID int64, cursor string, limit int) (Page, error) {
	if err := checkArgs(userID, limit); err != nil {
		return Page{}, err
	}
	hc, err := parseHomeCursor(cursor)
	if err != nil {
		return Page{}, err
	}
	f.touch(userID)
	if len(hc.exclude) > 0 {
		return f.homeFull(ctx, userID, hc, limit)
	}
	var full bool
	p, err := f.guardedPage(ctx, "home",
		func() (Page, error) {
			p, ok, err := f.homePartial(ctx, userID, hc.at, limit)
			full = err == nil && !ok
			return p, err
		},
		func(ctx context.Context) (Page, error) {
			items, err := f.pgPull(ctx, userID, hc.at, limit+1)
			if err != nil {
				return Page{}, err
			}
			return makePage(items, limit), nil
		})
	if full {
		return f.homeFull(ctx, userID, hc, limit)
	}
	return p, err
}

// homePartial reads the degraded page of userID's home feed from cur: up
// to limit visible posts of the inbox and the own timeline, newest first.
// It reports false (and no page) when the full merge must answer: a read
// model of the reader is cold (its rebuild is started), or nothing is
// shown.
func (f *Feed) homePartial(ctx context.Context, userID int64, cur key, limit int) (Page, bool, error) {
	start := cur
	fresh := f.useDeletionFeed(f.now())
	var items []item
	for round := 0; len(items) < limit && round < maxRedisRounds; round++ {
		hr, cold, err := f.homeSegment(ctx, userID, cur, limit-len(items), false)
		if err != nil {
			return Page{}, false, err
		}
		if cold.any() {
			f.startRebuilds(userID, cold)
			return Page{}, false, nil
		}
		hr.vis.fresh = fresh
		if items, err = f.hydrate(ctx, hr.seg.keys, hr.vis, limit-len(items), items); err != nil {
			return Page{}, false, err
		}
		if hr.seg.next != stepRedis {
			break // the inbox's floor (or its end): below is the full merge's
		}
		cur = lower(cur, hr.seg.bound)
	}
	if len(items) == 0 {
		return Page{}, false, nil
	}
	p := makePage(items, limit)
	shown := make([]key, len(items))
	for i, it := range items {
		shown[i] = it.key
	}
	next := encodeResume(start, shown)
	p.NextCursor = &next
	p.Degraded, p.Partial = true, true
	f.metrics.Sources.WithLabelValues("home", "partial").Inc()
	return p, true, nil
}
