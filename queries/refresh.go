package queries

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Refresh: the pages just above a cursor, read upwards.
//
// A refresh page is the up to limit visible posts strictly newer than the
// client's `after` cursor that are closest to it, newest first: no visible
// post lies between the cursor and the page, so a client that follows
// prevCursor until a page comes back empty sees every post above its first
// page once. The page is read with the same machinery as a page read
// downwards (homeItems, authorItems: inbox or timeline, celebrity pull,
// hidden posts, cold read models, PostgreSQL below what Redis is sure of),
// walked down from the settled horizon (RefreshSettle) to the cursor,
// keeping the oldest limit posts above it. When more than refreshScan
// posts lie above the cursor, walking down costs more than asking the
// source of truth, and PostgreSQL answers upwards at once (pullAfterSQL).

// refreshScan is how many posts above the cursor a refresh walks through
// in Redis before it asks PostgreSQL instead (Feed.refreshScan; tests
// lower it).
const refreshScan = 400

// HomeAfter returns the refresh page of userID's home feed above after (a
// cursor of Home, HomeAfter or their prevCursor; "" is malformed): the up
// to limit posts strictly newer than it that are closest to it, created
// before the settled horizon (now less RefreshSettle), newest first.
// NextCursor is nil; PrevCursor is the newest item's cursor, nil on an
// empty page (the client keeps its cursor and asks again later).
func (f *Feed) HomeAfter(ctx context.Context, userID int64, after string, limit int) (Page, error) {
	if err := checkArgs(userID, limit); err != nil {
		return Page{}, err
	}
	a, err := parseAfter(after)
	if err != nil {
		return Page{}, err
	}
	f.touch(userID)
	h := f.settled()
	if !a.less(h) {
		return makePage(nil, limit), nil // nothing settled above the cursor yet
	}
	pg := func(ctx context.Context, _ int) ([]item, error) { return f.pgPullAfter(ctx, userID, a, h, limit) }
	return f.guarded(ctx, "home_after", limit,
		func() (Page, error) {
			return f.refresh(ctx, "home_after", a, h, limit, func(cur key, need int) ([]item, error) {
				items, _, err := f.homeItems(ctx, userID, cur, need, nil)
				return items, err
			}, pg)
		}, pg)
}

// AuthorPostsAfter is HomeAfter for authorID's own posts (AuthorPosts).
func (f *Feed) AuthorPostsAfter(ctx context.Context, viewer, authorID int64, after string, limit int) (Page, error) {
	if err := checkArgs(authorID, limit); err != nil {
		return Page{}, err
	}
	a, err := parseAfter(after)
	if err != nil {
		return Page{}, err
	}
	h := f.settled()
	if !a.less(h) {
		return makePage(nil, limit), nil
	}
	pg := func(ctx context.Context, _ int) ([]item, error) {
		return f.pgAuthorAfter(ctx, viewer, authorID, a, h, limit)
	}
	return f.guarded(ctx, "author_after", limit,
		func() (Page, error) {
			return f.refresh(ctx, "author_after", a, h, limit, func(cur key, need int) ([]item, error) {
				return f.authorItems(ctx, viewer, authorID, cur, need, nil)
			}, pg)
		}, pg)
}

// parseAfter decodes a refresh cursor: a cursor of either version, never
// empty (the first page has no refresh). A resume cursor (a degraded home
// page's nextCursor) stands for the oldest post that page showed, as a
// version 1 nextCursor stands for its page's last post.
func parseAfter(s string) (key, error) {
	if s == "" {
		return key{}, &CursorError{Reason: "empty"}
	}
	hc, err := parseHomeCursor(s)
	if err != nil {
		return key{}, err
	}
	return hc.lowest(), nil
}

// settled returns the refresh horizon: a refresh shows only posts strictly
// older than it. It is RefreshSettle behind the clock, rounded down to the
// second, so that the refreshes of one second read the same ranges (and
// share the read cache's replies) instead of one range per millisecond.
func (f *Feed) settled() key {
	ms := f.now().Add(-f.cfg.RefreshSettle).UnixMilli()
	ms -= ms % int64(time.Second/time.Millisecond)
	return key{ms: ms, id: 0} // ids are positive: every post of ms is above
}

// refresh walks a feed down from the horizon h with read (up to need items
// strictly older than a cursor, newest first) until it passes a, and
// returns the page of the limit items closest above a. Past f.refreshScan
// items it returns pg's page instead (the same page, from PostgreSQL).
func (f *Feed) refresh(ctx context.Context, query string, a, h key, limit int, read func(cur key, need int) ([]item, error), pg func(ctx context.Context, n int) ([]item, error)) (Page, error) {
	batch := limit + 1
	var above []item // newest first, strictly between a and h
	for cur := h; len(above) < f.refreshScan; {
		got, err := read(cur, batch)
		if err != nil {
			return Page{}, err
		}
		reached := len(got) < batch // the feed ended
		for _, it := range got {
			if !a.less(it.key) {
				reached = true
				break
			}
			above = append(above, it)
		}
		if reached {
			return makePage(above[max(0, len(above)-limit):], limit), nil
		}
		cur = got[len(got)-1].key
	}
	items, err := pg(ctx, limit)
	if err != nil {
		return Page{}, err
	}
	f.metrics.Sources.WithLabelValues(query, "pg").Inc()
	return makePage(items, limit), nil
}

// pullAfterSQL is pullSQL upwards: the oldest $6 entries (non-deleted
// posts, live reposts) of the accounts $1 follows and of $1 itself
// strictly newer than ($2, $3) and strictly older than ($4, $5), oldest
// first. The same LATERAL scans, read forwards.
const pullAfterSQL = `
SELECT e.* FROM (SELECT f.followee_id AS author_id FROM follows f WHERE f.follower_id = $1
        AND NOT EXISTS (SELECT 1 FROM mutes m WHERE m.muter_id = $1 AND m.muted_id = f.followee_id)
      UNION ALL SELECT $1::bigint) a
CROSS JOIN LATERAL (
    (SELECT ` + postCols + ` FROM posts p
     WHERE p.author_id = a.author_id AND NOT p.deleted
       AND (p.created_at, p.id) > ($2::timestamptz, $3::bigint)
       AND (p.created_at, p.id) < ($4::timestamptz, $5::bigint)
     ORDER BY p.created_at, p.id
     LIMIT $6)
    UNION ALL
    (SELECT ` + repostCols + ` FROM reposts r JOIN posts o ON o.id = r.post_id
     WHERE r.user_id = a.author_id
       AND (r.created_at, r.id) > ($2::timestamptz, $3::bigint)
       AND (r.created_at, r.id) < ($4::timestamptz, $5::bigint)
     ORDER BY r.created_at, r.id
     LIMIT $6)) e
ORDER BY e.created_at, e.id
LIMIT $6`

// authorAfterSQL is authorSQL upwards, oldest first.
const authorAfterSQL = `
SELECT e.* FROM (
    (SELECT ` + postCols + ` FROM posts p
     WHERE p.author_id = $1 AND NOT p.deleted
       AND (p.created_at, p.id) > ($2::timestamptz, $3::bigint)
       AND (p.created_at, p.id) < ($4::timestamptz, $5::bigint)
     ORDER BY p.created_at, p.id
     LIMIT $6)
    UNION ALL
    (SELECT ` + repostCols + ` FROM reposts r JOIN posts o ON o.id = r.post_id
     WHERE r.user_id = $1
       AND (r.created_at, r.id) > ($2::timestamptz, $3::bigint)
       AND (r.created_at, r.id) < ($4::timestamptz, $5::bigint)
     ORDER BY r.created_at, r.id
     LIMIT $6)) e
ORDER BY e.created_at, e.id
LIMIT $6`

// pgPullAfter reads the refresh page of user's home feed from PostgreSQL:
// the n items closest above a and below h, newest first.
func (f *Feed) pgPullAfter(ctx context.Context, user int64, a, h key, n int) ([]item, error) {
	return f.pgAfter(ctx, "pull feed from PostgreSQL", pullAfterSQL, visibility{viewer: user, checkFollow: true}, user, a, h, n)
}

// pgAuthorAfter is pgPullAfter for one author's items as viewer sees them.
func (f *Feed) pgAuthorAfter(ctx context.Context, viewer, author int64, a, h key, n int) ([]item, error) {
	return f.pgAfter(ctx, "read author posts from PostgreSQL", authorAfterSQL, visibility{viewer: viewer, author: author}, author, a, h, n)
}

// pgAfter reads entries upwards from a until n are shown under the feed
// rules or none are left below h.
func (f *Feed) pgAfter(ctx context.Context, what, sql string, vis visibility, id int64, a, h key, n int) ([]item, error) {
	var items []item
	for len(items) < n {
		m := n - len(items)
		m += m/4 + 2
		rows, err := f.db.Query(ctx, sql, id, time.UnixMilli(a.ms).UTC(), a.id, time.UnixMilli(h.ms).UTC(), h.id, m)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		es, err := scanEntries(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		cs := cands(es, f.now().UnixNano())
		followed := map[int64]bool{}
		for _, c := range cs {
			followed[c.cp.author] = true
		}
		known := func(x int64) (bool, bool) {
			if followed[x] {
				return true, true
			}
			return false, false
		}
		if items, err = f.show(ctx, fromPG, vis, known, cs, items, n); err != nil {
			return nil, err
		}
		if len(cs) < m {
			break
		}
		a = cs[len(cs)-1].k
	}
	slices.Reverse(items) // newest first, as every page
	return items, nil
}
