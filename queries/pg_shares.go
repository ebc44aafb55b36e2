package queries

import (
	"context"
	"fmt"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
)

// The questions of a page's hydration (shares.go) asked of PostgreSQL:
// while Redis is unavailable, and for entries read from PostgreSQL. The
// same answers as the read models' (counts from posts.*_count, the
// viewer's state from likes and reposts, relations from follows, mutes
// and blocks, names from users, the earlier reposts from reposts), in a
// few queries: this path is the exception.

// relationsSQL is, for each account of $2, whether the viewer $1 mutes
// it, blocks it, is blocked by it, and follows it (not muted: following).
const relationsSQL = `
SELECT a,
       EXISTS (SELECT 1 FROM mutes m WHERE m.muter_id = $1 AND m.muted_id = a) AS muted,
       EXISTS (SELECT 1 FROM blocks b WHERE b.blocker_id = $1 AND b.blocked_id = a) AS blocks,
       EXISTS (SELECT 1 FROM blocks b WHERE b.blocker_id = a AND b.blocked_id = $1) AS blocked_by,
       EXISTS (SELECT 1 FROM follows f WHERE f.follower_id = $1 AND f.followee_id = a)
         AND NOT EXISTS (SELECT 1 FROM mutes m WHERE m.muter_id = $1 AND m.muted_id = a) AS follows
FROM unnest($2::bigint[]) a`

// countsSQL is the counts of the posts $2 and whether the viewer $1 likes
// and has a live repost of each.
const countsSQL = `
SELECT p.id, p.like_count, p.repost_count, p.reply_count,
       EXISTS (SELECT 1 FROM likes l WHERE l.user_id = $1 AND l.post_id = p.id),
       EXISTS (SELECT 1 FROM reposts r WHERE r.user_id = $1 AND r.post_id = p.id)
FROM posts p WHERE p.id = ANY($2)`

// earlierSQL is, for each repost $2[i] of the original $1[i], the live
// reposts of that original with smaller ids (exact, whatever their
// number).
const earlierSQL = `
SELECT q.rid, r.id, r.user_id
FROM unnest($1::bigint[], $2::bigint[]) q(orig, rid)
JOIN reposts r ON r.post_id = q.orig AND r.id < q.rid`

// pgShares answers a from PostgreSQL.
func (f *Feed) pgShares(ctx context.Context, a *shareAsk) error {
	if accounts := append(append([]int64{}, a.accounts...), a.follows...); len(accounts) > 0 && a.viewer != 0 {
		rows, err := f.db.Query(ctx, relationsSQL, a.viewer, accounts)
		if err != nil {
			return fmt.Errorf("read relations of %d: %w", a.viewer, err)
		}
		for rows.Next() {
			var x int64
			var r readmodel.Relation
			var follows bool
			if err := rows.Scan(&x, &r.Muted, &r.Blocks, &r.BlockedBy, &follows); err != nil {
				rows.Close()
				return fmt.Errorf("read relations of %d: %w", a.viewer, err)
			}
			a.rel.set(x, r)
			a.follow[x] = follows
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read relations of %d: %w", a.viewer, err)
		}
	}
	if err := f.pgCountsInto(ctx, a, a.posts); err != nil {
		return err
	}
	if len(a.names) > 0 {
		got, err := f.pgNames(ctx, a.names)
		if err != nil {
			return err
		}
		for u, n := range got {
			a.name.set(u, n)
			f.names.put(u, n)
		}
	}
	return f.pgEarlierInto(ctx, a, a.origs, a.reposts)
}

// pgCountsInto reads the counts of posts and a's viewer's state of them
// into a: one query.
func (f *Feed) pgCountsInto(ctx context.Context, a *shareAsk, posts []int64) error {
	if len(posts) == 0 {
		return nil
	}
	rows, err := f.db.Query(ctx, countsSQL, a.viewer, posts)
	if err != nil {
		return fmt.Errorf("read counts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var c Counts
		var s ViewerState
		if err := rows.Scan(&id, &c.Likes, &c.Reposts, &c.Replies, &s.Liked, &s.Reposted); err != nil {
			return fmt.Errorf("read counts: %w", err)
		}
		a.counts.set(id, c)
		a.state.set(id, s)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read counts: %w", err)
	}
	return nil
}

// pgEarlierInto reads into a, for each repost reposts[i] of the original
// origs[i], the live reposts of that original before it (exact): one
// query.
func (f *Feed) pgEarlierInto(ctx context.Context, a *shareAsk, origs, reposts []int64) error {
	if len(reposts) == 0 {
		return nil
	}
	rows, err := f.db.Query(ctx, earlierSQL, origs, reposts)
	if err != nil {
		return fmt.Errorf("read earlier reposts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var rid int64
		var r homefeed.Repost
		if err := rows.Scan(&rid, &r.ID, &r.Reposter); err != nil {
			return fmt.Errorf("read earlier reposts: %w", err)
		}
		a.earlier[rid] = append(a.earlier[rid], r)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read earlier reposts: %w", err)
	}
	return nil
}

// pgNames reads the names of users.
func (f *Feed) pgNames(ctx context.Context, users []int64) (map[int64]string, error) {
	rows, err := f.db.Query(ctx, `SELECT id, name FROM users WHERE id = ANY($1)`, users)
	if err != nil {
		return nil, fmt.Errorf("read names: %w", err)
	}
	defer rows.Close()
	out := make(map[int64]string, len(users))
	for rows.Next() {
		var id int64
		var name string
		if err := rows.Scan(&id, &name); err != nil {
			return nil, fmt.Errorf("read names: %w", err)
		}
		out[id] = name
	}
	return out, rows.Err()
}

// pgFollows answers whether viewer follows (and does not mute) each of
// accounts.
func (f *Feed) pgFollows(ctx context.Context, viewer int64, accounts []int64) ([]bool, error) {
	rows, err := f.db.Query(ctx, `SELECT a, EXISTS (SELECT 1 FROM follows f WHERE f.follower_id = $1 AND f.followee_id = a)
         AND NOT EXISTS (SELECT 1 FROM mutes m WHERE m.muter_id = $1 AND m.muted_id = a) FROM unnest($2::bigint[]) a`, viewer, accounts)
	if err != nil {
		return nil, fmt.Errorf("check follows of %d: %w", viewer, err)
	}
	defer rows.Close()
	is := map[int64]bool{}
	for rows.Next() {
		var a int64
		var ok bool
		if err := rows.Scan(&a, &ok); err != nil {
			return nil, fmt.Errorf("check follows of %d: %w", viewer, err)
		}
		is[a] = ok
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("check follows of %d: %w", viewer, err)
	}
	out := make([]bool, len(accounts))
	for i, a := range accounts {
		out[i] = is[a]
	}
	return out, nil
}
