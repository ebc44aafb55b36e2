package queries

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// The PostgreSQL side of the read path: the source of truth, used below what
// Redis is sure of, for cold inboxes, and for the caller's newest posts.

// pgTime converts a cursor key's millisecond for a timestamptz comparison.
// The first page's cursor is later than any post.
func pgTime(k key) time.Time {
	if k.ms >= maxCursorMs {
		return time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return time.UnixMilli(k.ms).UTC()
}

func pgID(k key) int64 {
	if k.ms >= maxCursorMs {
		return math.MaxInt64
	}
	return k.id
}

// pullSQL is the feed from the source of truth: the newest non-deleted posts
// of the accounts $1 follows and does not mute and of $1 itself, strictly older than
// ($2, $3). One LATERAL index range scan of posts_author_time_idx per
// followed account, each stopped at $4 rows, then a top-$4 merge: the cost
// is followees x limit index entries, whatever the authors' post counts.
const pullSQL = `
SELECT p.id, p.author_id, p.content, p.created_at
FROM (SELECT f.followee_id AS author_id FROM follows f WHERE f.follower_id = $1
        AND NOT EXISTS (SELECT 1 FROM mutes m WHERE m.muter_id = $1 AND m.muted_id = f.followee_id)
      UNION ALL SELECT $1::bigint) a
CROSS JOIN LATERAL (
    SELECT id, author_id, content, created_at FROM posts
    WHERE posts.author_id = a.author_id AND NOT deleted
      AND (created_at, id) < ($2::timestamptz, $3::bigint)
    ORDER BY created_at DESC, id DESC
    LIMIT $4) p
ORDER BY p.created_at DESC, p.id DESC
LIMIT $4`

// authorSQL is one author's non-deleted posts strictly older than ($2, $3)
// and strictly newer than ($4, $5), newest first.
const authorSQL = `
SELECT id, author_id, content, created_at FROM posts
WHERE author_id = $1 AND NOT deleted
  AND (created_at, id) < ($2::timestamptz, $3::bigint)
  AND (created_at, id) > ($4::timestamptz, $5::bigint)
ORDER BY created_at DESC, id DESC
LIMIT $6`

// postsByIDSQL hydrates posts the Redis post cache does not have (yet).
const postsByIDSQL = `SELECT id, author_id, content, created_at, deleted, version FROM posts WHERE id = ANY($1)`

func scanItems(rows pgx.Rows) ([]item, error) {
	defer rows.Close()
	var out []item
	for rows.Next() {
		var id, author int64
		var content string
		var at time.Time
		if err := rows.Scan(&id, &author, &content, &at); err != nil {
			return nil, err
		}
		out = append(out, newItem(id, author, content, at.UnixMilli()))
	}
	return out, rows.Err()
}

func newItem(id, author int64, content string, ms int64) item {
	return item{key: key{ms: ms, id: id}, post: encodePost(postFacts{id: id, author: author, content: content, ms: ms})}
}

// pgPull reads up to n feed items of user strictly older than cur.
func (f *Feed) pgPull(ctx context.Context, user int64, cur key, n int) ([]item, error) {
	rows, err := f.db.Query(ctx, pullSQL, user, pgTime(cur), pgID(cur), n)
	if err != nil {
		return nil, fmt.Errorf("pull feed from PostgreSQL: %w", err)
	}
	items, err := scanItems(rows)
	if err != nil {
		return nil, fmt.Errorf("pull feed from PostgreSQL: %w", err)
	}
	return items, nil
}

// pgAuthor reads up to n posts of author strictly between after and before.
func (f *Feed) pgAuthor(ctx context.Context, author int64, before, after key, n int) ([]item, error) {
	afterT, afterID := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), int64(math.MinInt64)
	if after != minKey {
		afterT, afterID = time.UnixMilli(after.ms).UTC(), after.id
	}
	rows, err := f.db.Query(ctx, authorSQL, author, pgTime(before), pgID(before), afterT, afterID, n)
	if err != nil {
		return nil, fmt.Errorf("read author posts from PostgreSQL: %w", err)
	}
	items, err := scanItems(rows)
	if err != nil {
		return nil, fmt.Errorf("read author posts from PostgreSQL: %w", err)
	}
	return items, nil
}

// pgPost is a post row read by id for hydration.
type pgPost struct {
	item    item
	author  int64
	version int64
	deleted bool
}

func (f *Feed) pgPostsByID(ctx context.Context, ids []int64) (map[int64]pgPost, error) {
	rows, err := f.db.Query(ctx, postsByIDSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("hydrate posts from PostgreSQL: %w", err)
	}
	defer rows.Close()
	out := make(map[int64]pgPost, len(ids))
	for rows.Next() {
		var id, author, version int64
		var content string
		var at time.Time
		var deleted bool
		if err := rows.Scan(&id, &author, &content, &at, &deleted, &version); err != nil {
			return nil, fmt.Errorf("hydrate posts from PostgreSQL: %w", err)
		}
		out[id] = pgPost{item: newItem(id, author, content, at.UnixMilli()), author: author, version: version, deleted: deleted}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("hydrate posts from PostgreSQL: %w", err)
	}
	return out, nil
}
