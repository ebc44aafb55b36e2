package queries

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// ErrPostNotFound is returned by PostView and Replies for a post that does
// not exist, is deleted, or whose author blocks the viewer (the api
// answers 404).
var ErrPostNotFound = errors.New("post not found")

// PostViewPage is a page of PostViews, the shape of a feed page: NextCursor
// is nil when nothing follows, PrevCursor the cursor of the first item
// (nil on an empty page).
type PostViewPage struct {
	Items      []PostView `json:"items"`
	NextCursor *string    `json:"nextCursor"`
	PrevCursor *string    `json:"prevCursor"`
}

// visibleTo is the condition that neither the account a nor the viewer
// ($1) blocks the other.
func visibleTo(a string) string {
	return `NOT EXISTS (SELECT 1 FROM blocks b WHERE (b.blocker_id = ` + a + ` AND b.blocked_id = $1)
	   OR (b.blocker_id = $1 AND b.blocked_id = ` + a + `))`
}

// resolveSQL is the post $2 names: itself, or the original when $2 is a
// live repost's id.
const resolveSQL = `COALESCE((SELECT rp.post_id FROM reposts rp WHERE rp.id = $2), $2::bigint)`

// viewSQL selects the hydrated columns of the posts p for the viewer $1:
// the author's name, the viewer's like and repost, and the quoted post q
// (its columns null when there is none or the viewer may not see it: it
// is deleted, its author is muted by the viewer or in a block with them,
// as in feeds). Everything is joined in PostgreSQL, so
// a page is one round trip.
var viewSQL = `
SELECT p.id AS id, p.author_id AS author_id, u.name AS name, p.content AS content, p.created_at AS created_at,
       p.edited_at AS edited_at, p.media AS media, p.reply_to AS reply_to, p.reply_to_author AS reply_to_author,
       p.quote_of AS quote_of, p.like_count AS like_count, p.repost_count AS repost_count, p.reply_count AS reply_count,
       EXISTS (SELECT 1 FROM likes l WHERE l.user_id = $1 AND l.post_id = p.id) AS liked,
       EXISTS (SELECT 1 FROM reposts r WHERE r.user_id = $1 AND r.post_id = p.id) AS reposted,
       q.id AS q_id, q.author_id AS q_author_id, q.name AS q_name, q.content AS q_content, q.created_at AS q_created_at,
       q.edited_at AS q_edited_at, q.media AS q_media, q.reply_to AS q_reply_to, q.reply_to_author AS q_reply_to_author,
       q.quote_of AS q_quote_of, q.like_count AS q_like_count, q.repost_count AS q_repost_count,
       q.reply_count AS q_reply_count, q.liked AS q_liked, q.reposted AS q_reposted
FROM %s
JOIN users u ON u.id = p.author_id
LEFT JOIN LATERAL (
    SELECT q.id, q.author_id, qu.name, q.content, q.created_at, q.edited_at, q.media, q.reply_to, q.reply_to_author,
           q.quote_of, q.like_count, q.repost_count, q.reply_count,
           EXISTS (SELECT 1 FROM likes l WHERE l.user_id = $1 AND l.post_id = q.id) AS liked,
           EXISTS (SELECT 1 FROM reposts r WHERE r.user_id = $1 AND r.post_id = q.id) AS reposted
    FROM posts q JOIN users qu ON qu.id = q.author_id
    WHERE q.id = p.quote_of AND NOT q.deleted AND ` + visibleTo("q.author_id") + `
      AND NOT EXISTS (SELECT 1 FROM mutes m WHERE m.muter_id = $1 AND m.muted_id = q.author_id)
) q ON true`

// postViewSQL is the post $2 (or a repost's original) for the viewer $1:
// no row when it is missing, deleted, or its author blocks the viewer.
var postViewSQL = fmt.Sprintf(viewSQL, `(SELECT * FROM posts WHERE id = `+resolveSQL+` AND NOT deleted
      AND NOT EXISTS (SELECT 1 FROM blocks b WHERE b.blocker_id = posts.author_id AND b.blocked_id = $1)) p`)

// repliesSQL is a page of the direct replies of $2 (or of a repost's
// original) for the viewer $1, oldest first, strictly after ($3, $4), at
// most $5: one row per reply after the parent's id, or one row of nulls
// after it when there is none; no row when the parent is missing,
// deleted, or its author blocks the viewer. Deleted replies are left out,
// and those of authors who block the viewer or whom the viewer blocks or
// mutes. posts_reply_to_idx gives the order.
var repliesSQL = `
SELECT parent.id, v.* FROM (
    SELECT pp.id FROM posts pp WHERE pp.id = ` + resolveSQL + ` AND NOT pp.deleted
      AND NOT EXISTS (SELECT 1 FROM blocks b WHERE b.blocker_id = pp.author_id AND b.blocked_id = $1)) parent
LEFT JOIN LATERAL (` + fmt.Sprintf(viewSQL, `(SELECT * FROM posts r WHERE r.reply_to = parent.id AND NOT r.deleted
      AND (r.created_at, r.id) > ($3::timestamptz, $4::bigint)
      AND `+visibleTo("r.author_id")+`
      AND NOT EXISTS (SELECT 1 FROM mutes m WHERE m.muter_id = $1 AND m.muted_id = r.author_id)
    ORDER BY r.created_at, r.id
    LIMIT $5) p`) + `
) v ON true
ORDER BY v.created_at, v.id`

// viewRow is the columns of viewSQL; each may be null (a replies row of
// nulls, a post without a quote).
type viewRow struct {
	id, author                         *int64
	name, content                      *string
	createdAt, editedAt                *time.Time
	media                              []byte
	replyTo, replyToAuthor, quoteOf    *int64
	likes, reposts, replies            *int64
	liked, reposted                    *bool
	qID, qAuthor                       *int64
	qName, qContent                    *string
	qCreatedAt, qEditedAt              *time.Time
	qMedia                             []byte
	qReplyTo, qReplyToAuthor, qQuoteOf *int64
	qLikes, qReposts, qReplies         *int64
	qLiked, qReposted                  *bool
}

func (r *viewRow) dest() []any {
	return []any{&r.id, &r.author, &r.name, &r.content, &r.createdAt, &r.editedAt, &r.media,
		&r.replyTo, &r.replyToAuthor, &r.quoteOf, &r.likes, &r.reposts, &r.replies, &r.liked, &r.reposted,
		&r.qID, &r.qAuthor, &r.qName, &r.qContent, &r.qCreatedAt, &r.qEditedAt, &r.qMedia,
		&r.qReplyTo, &r.qReplyToAuthor, &r.qQuoteOf, &r.qLikes, &r.qReposts, &r.qReplies, &r.qLiked, &r.qReposted}
}

// view builds the PostView of the row (whose id is not null).
func (r *viewRow) view() (PostView, error) {
	v, err := makeView(*r.id, *r.author, *r.name, *r.content, *r.createdAt, r.editedAt, r.media,
		r.replyTo, r.replyToAuthor, Counts{*r.likes, *r.reposts, *r.replies}, ViewerState{*r.liked, *r.reposted})
	if err != nil {
		return PostView{}, err
	}
	if r.quoteOf == nil {
		return v, nil
	}
	v.Quote = &Quote{ID: strconv.FormatInt(*r.quoteOf, 10)}
	if r.qID == nil {
		v.Quote.Unavailable = true
		return v, nil
	}
	q, err := makeView(*r.qID, *r.qAuthor, *r.qName, *r.qContent, *r.qCreatedAt, r.qEditedAt, r.qMedia,
		r.qReplyTo, r.qReplyToAuthor, Counts{*r.qLikes, *r.qReposts, *r.qReplies}, ViewerState{*r.qLiked, *r.qReposted})
	if err != nil {
		return PostView{}, err
	}
	if r.qQuoteOf != nil {
		q.Quote = &Quote{ID: strconv.FormatInt(*r.qQuoteOf, 10)} // one level deep: the id alone, as in feeds
	}
	v.Quote.Post = &q
	return v, nil
}

func makeView(id, author int64, name, content string, at time.Time, edited *time.Time, media []byte,
	replyTo, replyToAuthor *int64, counts Counts, viewer ViewerState) (PostView, error) {
	fa := postFacts{id: id, author: author, content: content, ms: at.UnixMilli()}
	if edited != nil {
		fa.editedAt = formatTime(edited.UnixMilli())
	}
	if len(media) > 0 {
		if err := json.Unmarshal(media, &fa.media); err != nil {
			return PostView{}, fmt.Errorf("decode media of post %d: %w", id, err)
		}
	}
	if replyTo != nil && replyToAuthor != nil {
		fa.replyTo, fa.replyToAuthor = *replyTo, *replyToAuthor
	}
	v := encodePost(fa)
	v.Author.Name = name
	v.Counts, v.Viewer = &counts, &viewer
	return v, nil
}

// PostView returns the post id as viewer sees it, read from PostgreSQL in
// one query. A repost's id answers its original. ErrPostNotFound when the
// post does not exist, is deleted, or its author blocks the viewer.
func (f *Feed) PostView(ctx context.Context, viewer, id int64) (PostView, error) {
	if viewer <= 0 || id <= 0 {
		return PostView{}, ErrInvalidID
	}
	rows, err := f.db.Query(ctx, postViewSQL, viewer, id)
	if err != nil {
		return PostView{}, fmt.Errorf("read post %d: %w", id, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return PostView{}, fmt.Errorf("read post %d: %w", id, err)
		}
		return PostView{}, ErrPostNotFound
	}
	var r viewRow
	if err := rows.Scan(r.dest()...); err != nil {
		return PostView{}, fmt.Errorf("read post %d: %w", id, err)
	}
	return r.view()
}

// Replies returns a page of the direct replies of post id as viewer sees
// them, oldest first, strictly after the cursor ("" is the first page),
// read from PostgreSQL in one query. Deleted replies are left out, and
// those whose author blocks the viewer or is blocked or muted by the
// viewer. The cursor is the feed's (version 1), in ascending order here.
// A repost's id pages its original's replies. ErrPostNotFound as for
// PostView.
func (f *Feed) Replies(ctx context.Context, viewer, id int64, cursor string, limit int) (PostViewPage, error) {
	if viewer <= 0 {
		return PostViewPage{}, ErrInvalidID
	}
	if err := checkArgs(id, limit); err != nil {
		return PostViewPage{}, err
	}
	afterT, afterID := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), int64(math.MinInt64)
	if cursor != "" {
		k, err := parseCursor(cursor)
		if err != nil {
			return PostViewPage{}, err
		}
		afterT, afterID = time.UnixMilli(k.ms).UTC(), k.id
	}
	rows, err := f.db.Query(ctx, repliesSQL, viewer, id, afterT, afterID, limit+1)
	if err != nil {
		return PostViewPage{}, fmt.Errorf("read replies of %d: %w", id, err)
	}
	defer rows.Close()
	found := false
	var keys []key
	var views []PostView
	for rows.Next() {
		found = true
		var parent int64
		var r viewRow
		if err := rows.Scan(append([]any{&parent}, r.dest()...)...); err != nil {
			return PostViewPage{}, fmt.Errorf("read replies of %d: %w", id, err)
		}
		if r.id == nil {
			continue // the parent has no reply to show
		}
		v, err := r.view()
		if err != nil {
			return PostViewPage{}, err
		}
		keys = append(keys, key{ms: r.createdAt.UnixMilli(), id: *r.id})
		views = append(views, v)
	}
	if err := rows.Err(); err != nil {
		return PostViewPage{}, fmt.Errorf("read replies of %d: %w", id, err)
	}
	if !found {
		return PostViewPage{}, ErrPostNotFound
	}
	p := PostViewPage{Items: make([]PostView, 0, min(len(views), limit))}
	p.Items = append(p.Items, views[:min(len(views), limit)]...)
	if len(keys) > 0 {
		prev := encodeCursor(keys[0])
		p.PrevCursor = &prev
	}
	if len(keys) > limit {
		next := encodeCursor(keys[limit-1])
		p.NextCursor = &next
	}
	return p, nil
}
