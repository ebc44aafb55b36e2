package queries

import (
	"context"
	"fmt"

	"github.com/feedco/feed/readmodel"
)

// AuthorPosts returns a page of authorID's non-deleted posts, newest first,
// strictly older than the cursor, with the same order and cursor as Home.
// The author's timeline serves what it holds above its ~floor; below, and
// when the timeline has nothing at all (never written, or the projector has
// not caught up with a new author), PostgreSQL continues. A timeline that is
// not built (lost with Redis) is served from PostgreSQL and rebuilt in the
// background (cold_rebuild.go). While Redis is
// unavailable the page comes from PostgreSQL, marked Degraded.
func (f *Feed) AuthorPosts(ctx context.Context, viewer, authorID int64, cursor string, limit int) (Page, error) {
	if err := checkArgs(authorID, limit); err != nil {
		return Page{}, err
	}
	cur, err := parseCursor(cursor)
	if err != nil {
		return Page{}, err
	}
	return f.guarded(ctx, "author", limit,
		func() (Page, error) { return f.authorPosts(ctx, viewer, authorID, cur, limit) },
		func(ctx context.Context, n int) ([]item, error) {
			return f.pgAuthor(ctx, viewer, authorID, cur, minKey, n)
		})
}

// authorPosts is AuthorPosts from the author's timeline (and PostgreSQL
// below it).
func (f *Feed) authorPosts(ctx context.Context, viewer, authorID int64, cur key, limit int) (Page, error) {
	items, err := f.authorItems(ctx, viewer, authorID, cur, limit+1, nil)
	if err != nil {
		return Page{}, err
	}
	return makePage(items, limit), nil
}

// authorItems appends to items up to need of authorID's non-deleted posts
// strictly older than cur, newest first: fewer only when the author has no
// more. AuthorPosts and AuthorPostsAfter (refresh.go) page with it.
func (f *Feed) authorItems(ctx context.Context, viewer, authorID int64, cur key, need int, items []item) ([]item, error) {
	fresh := f.useDeletionFeed(f.now())
	used := map[string]bool{}
	mode := stepRedis
	for round := 0; len(items) < need && mode != stepEnd; round++ {
		if mode == stepRedis && round < maxRedisRounds {
			short := need - len(items)
			n := short + short/4 + 2
			pipe := f.rdb.Pipeline()
			rr := f.tl.QueueRange(ctx, pipe, authorID, cur.ms, n)
			if err := readmodel.ExecReads(ctx, pipe); err != nil {
				return items, fmt.Errorf("read timeline of %d: %w", authorID, redisErr(err))
			}
			src, built, err := rangeSource(rr)
			if err != nil {
				return items, fmt.Errorf("read timeline of %d: %w", authorID, err)
			}
			if !built {
				used["cold"] = true
				f.startRebuild(rebuildKey{rebuildTimelineKind, authorID})
				mode = stepPG
				continue
			}
			if len(src.keys) == 0 && src.bound == minKey {
				mode = stepPG // nothing in Redis below the cursor: let the truth say so
				continue
			}
			used["redis"] = true
			seg := mergeSegment(cur, []source{src})
			items, err = f.hydrate(ctx, seg.keys, visibility{viewer: viewer, author: authorID, fresh: fresh}, short, items)
			if err != nil {
				return items, err
			}
			cur, mode = lower(cur, seg.bound), seg.next
			continue
		}
		if !used["cold"] {
			used["pg"] = true
		}
		got, err := f.pgAuthor(ctx, viewer, authorID, cur, minKey, need-len(items))
		if err != nil {
			return items, err
		}
		items = append(items, got...)
		break
	}
	for s := range used {
		f.metrics.Sources.WithLabelValues("author", s).Inc()
	}
	return items, nil
}

// Blocks reports whether blocker blocks blocked, from PostgreSQL's blocks
// (the write side's inline state, so a block hides at once): the API
// shows a blocked account none of the blocker's posts.
func (f *Feed) Blocks(ctx context.Context, blocker, blocked int64) (bool, error) {
	if blocker == blocked {
		return false, nil
	}
	rows, err := f.db.Query(ctx, `SELECT 1 FROM blocks WHERE blocker_id = $1 AND blocked_id = $2`, blocker, blocked)
	if err != nil {
		return false, fmt.Errorf("read block of %d by %d: %w", blocked, blocker, err)
	}
	defer rows.Close()
	found := rows.Next()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("read block of %d by %d: %w", blocked, blocker, err)
	}
	return found, nil
}
