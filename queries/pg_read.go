package queries

import (
	"context"
	"encoding/json"
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

// postCols and repostCols are the columns of a feed entry read from
// PostgreSQL (scanCands): a post of posts p, or a repost of reposts r
// whose original is posts o.
const (
	postCols = `p.id, p.author_id, p.content, p.created_at, p.deleted, p.version, p.edited_at, p.media,
       p.reply_to, p.reply_to_author, p.quote_of, p.quote_author, NULL::bigint AS repost_of, NULL::bigint AS repost_of_author`
	repostCols = `r.id, r.user_id, '', r.created_at, false, 1, NULL::timestamptz, NULL::jsonb,
       NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, r.post_id, o.author_id`
)

// pullSQL is the feed's entries from the source of truth: the newest
// non-deleted posts and the live reposts of the accounts $1 follows and
// does not mute and of $1 itself, strictly older than ($2, $3). One
// LATERAL index range scan of posts_author_time_idx and one of
// reposts_user_time_idx per followed account, each stopped at $4 rows,
// then a top-$4 merge: the cost is followees x limit index entries,
// whatever the authors' post counts. The feed rules are applied to the
// rows afterwards (show), which may hide some: pgShown reads on.
const pullSQL = `
SELECT e.* FROM (SELECT f.followee_id AS author_id FROM follows f WHERE f.follower_id = $1
        AND NOT EXISTS (SELECT 1 FROM mutes m WHERE m.muter_id = $1 AND m.muted_id = f.followee_id)
      UNION ALL SELECT $1::bigint) a
CROSS JOIN LATERAL (
    (SELECT ` + postCols + ` FROM posts p
     WHERE p.author_id = a.author_id AND NOT p.deleted
       AND (p.created_at, p.id) < ($2::timestamptz, $3::bigint)
     ORDER BY p.created_at DESC, p.id DESC
     LIMIT $4)
    UNION ALL
    (SELECT ` + repostCols + ` FROM reposts r JOIN posts o ON o.id = r.post_id
     WHERE r.user_id = a.author_id
       AND (r.created_at, r.id) < ($2::timestamptz, $3::bigint)
     ORDER BY r.created_at DESC, r.id DESC
     LIMIT $4)) e
ORDER BY e.created_at DESC, e.id DESC
LIMIT $4`

// authorSQL is one author's non-deleted posts and live reposts strictly
// older than ($2, $3) and strictly newer than ($4, $5), newest first.
const authorSQL = `
SELECT e.* FROM (
    (SELECT ` + postCols + ` FROM posts p
     WHERE p.author_id = $1 AND NOT p.deleted
       AND (p.created_at, p.id) < ($2::timestamptz, $3::bigint)
       AND (p.created_at, p.id) > ($4::timestamptz, $5::bigint)
     ORDER BY p.created_at DESC, p.id DESC
     LIMIT $6)
    UNION ALL
    (SELECT ` + repostCols + ` FROM reposts r JOIN posts o ON o.id = r.post_id
     WHERE r.user_id = $1
       AND (r.created_at, r.id) < ($2::timestamptz, $3::bigint)
       AND (r.created_at, r.id) > ($4::timestamptz, $5::bigint)
     ORDER BY r.created_at DESC, r.id DESC
     LIMIT $6)) e
ORDER BY e.created_at DESC, e.id DESC
LIMIT $6`

// postsByIDSQL hydrates posts and reposts the Redis post cache does not
// have (yet). An undone repost has no row: the truth does not know it.
const postsByIDSQL = `
SELECT ` + postCols + ` FROM posts p WHERE p.id = ANY($1)
UNION ALL
SELECT ` + repostCols + ` FROM reposts r JOIN posts o ON o.id = r.post_id WHERE r.id = ANY($1)`

// pgEntry is one row of postCols/repostCols.
type pgEntry struct {
	facts   postFacts
	version int64
	deleted bool
}

// scanEntries reads rows of postCols/repostCols.
func scanEntries(rows pgx.Rows) ([]pgEntry, error) {
	defer rows.Close()
	var out []pgEntry
	for rows.Next() {
		var e pgEntry
		var at time.Time
		var edited *time.Time
		var media []byte
		var replyTo, replyToAuthor, quoteOf, quoteAuthor, repostOf, repostOfAuthor *int64
		fa := &e.facts
		if err := rows.Scan(&fa.id, &fa.author, &fa.content, &at, &e.deleted, &e.version, &edited, &media,
			&replyTo, &replyToAuthor, &quoteOf, &quoteAuthor, &repostOf, &repostOfAuthor); err != nil {
			return nil, err
		}
		fa.ms = at.UnixMilli()
		if edited != nil {
			fa.editedAt = formatTime(edited.UnixMilli())
		}
		if len(media) > 0 {
			if err := json.Unmarshal(media, &fa.media); err != nil {
				return nil, fmt.Errorf("decode media of post %d: %w", fa.id, err)
			}
		}
		fa.replyTo, fa.replyToAuthor, fa.quoteOf, fa.quoteAuthor = deref(replyTo), deref(replyToAuthor), deref(quoteOf), deref(quoteAuthor)
		fa.repostOf, fa.repostOfAuthor = deref(repostOf), deref(repostOfAuthor)
		fa.repost = fa.repostOf != 0
		out = append(out, e)
	}
	return out, rows.Err()
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// cands makes the candidates of entries (checked now).
func cands(es []pgEntry, now int64) []cand {
	out := make([]cand, len(es))
	for i, e := range es {
		cp := &cachedPost{it: itemOf(e.facts), facts: e.facts, author: e.facts.author, version: max(e.version, 1), deleted: e.deleted, checkedAt: now}
		out[i] = cand{k: cp.it.key, cp: cp}
	}
	return out
}

func newItem(id, author int64, content string, ms int64) item {
	return itemOf(postFacts{id: id, author: author, content: content, ms: ms})
}

// pgShown reads entries with read (at most m strictly older than cur,
// newest first, exact) until n of them are shown to vis.viewer under the
// feed rules or the entries end, and returns the shown items hydrated
// from PostgreSQL.
func (f *Feed) pgShown(ctx context.Context, vis visibility, cur key, n int, read func(cur key, m int) ([]cand, error)) ([]item, error) {
	var out []item
	for len(out) < n {
		m := n - len(out)
		m += m/4 + 2
		cs, err := read(cur, m)
		if err != nil {
			return nil, err
		}
		followed := map[int64]bool{}
		for _, c := range cs {
			followed[c.cp.author] = true // every entry is a followed account's, or the viewer's
		}
		known := func(a int64) (bool, bool) {
			if followed[a] {
				return true, true
			}
			return false, false
		}
		if out, err = f.show(ctx, fromPG, vis, known, cs, out, n); err != nil {
			return nil, err
		}
		if len(cs) < m {
			break
		}
		cur = cs[len(cs)-1].k
	}
	return out, nil
}

// pgPull reads up to n feed items of user strictly older than cur.
func (f *Feed) pgPull(ctx context.Context, user int64, cur key, n int) ([]item, error) {
	return f.pgShown(ctx, visibility{viewer: user, checkFollow: true}, cur, n, func(cur key, m int) ([]cand, error) {
		rows, err := f.db.Query(ctx, pullSQL, user, pgTime(cur), pgID(cur), m)
		if err != nil {
			return nil, fmt.Errorf("pull feed from PostgreSQL: %w", err)
		}
		es, err := scanEntries(rows)
		if err != nil {
			return nil, fmt.Errorf("pull feed from PostgreSQL: %w", err)
		}
		return cands(es, f.now().UnixNano()), nil
	})
}

// pgAuthor reads up to n items of author strictly between after and
// before, as viewer sees them.
func (f *Feed) pgAuthor(ctx context.Context, viewer, author int64, before, after key, n int) ([]item, error) {
	return f.pgShown(ctx, visibility{viewer: viewer, author: author}, before, n, func(cur key, m int) ([]cand, error) {
		return f.pgAuthorCands(ctx, author, cur, after, m)
	})
}

// pgAuthorCands reads up to n entries (posts and reposts) of author
// strictly between after and before, newest first.
func (f *Feed) pgAuthorCands(ctx context.Context, author int64, before, after key, n int) ([]cand, error) {
	afterT, afterID := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), int64(math.MinInt64)
	if after != minKey {
		afterT, afterID = time.UnixMilli(after.ms).UTC(), after.id
	}
	rows, err := f.db.Query(ctx, authorSQL, author, pgTime(before), pgID(before), afterT, afterID, n)
	if err != nil {
		return nil, fmt.Errorf("read author posts from PostgreSQL: %w", err)
	}
	es, err := scanEntries(rows)
	if err != nil {
		return nil, fmt.Errorf("read author posts from PostgreSQL: %w", err)
	}
	return cands(es, f.now().UnixNano()), nil
}

// pgPostsByID reads posts and reposts by id.
func (f *Feed) pgPostsByID(ctx context.Context, ids []int64) (map[int64]pgEntry, error) {
	rows, err := f.db.Query(ctx, postsByIDSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("hydrate posts from PostgreSQL: %w", err)
	}
	es, err := scanEntries(rows)
	if err != nil {
		return nil, fmt.Errorf("hydrate posts from PostgreSQL: %w", err)
	}
	out := make(map[int64]pgEntry, len(es))
	for _, e := range es {
		out[e.facts.id] = e
	}
	return out, nil
}
