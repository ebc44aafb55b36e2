package verify

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/feedco/feed/events"
)

// The truth: what PostgreSQL, the source of truth, says a feed is, and the
// comparison of a list the query side served with it. The convergence
// oracles (e2e in process, faults with the roles as processes) and `feed
// verify` (verify.go) share this one definition.

// APIPost is a post as the API returns it.
type APIPost struct {
	ID        string `json:"id"`
	AuthorID  string `json:"authorId"`
	Content   string `json:"content"`
	CreatedAt string `json:"createdAt"`
	// EditedAt is in an edit's answer (PATCH /api/posts/{id}); feed pages
	// show the current content without it.
	EditedAt string `json:"editedAt,omitempty"`
}

// APIPage is a feed or author-posts page.
type APIPage struct {
	Items      []APIPost `json:"items"`
	NextCursor *string   `json:"nextCursor"`
	PrevCursor *string   `json:"prevCursor"`
}

// TruePost is a post row of the source of truth. Content is the post's
// latest content: an edit replaces it in the row (posts.content), so a
// feed that shows an older version differs in "fields".
type TruePost struct {
	ID, Author, Ms int64
	Content        string
	Deleted        bool
}

// Truth is the posts, follows, mutes and blocks of the source of truth,
// read at one time.
type Truth struct {
	Posts     map[int64]TruePost
	Following map[int64][]int64 // follower -> followees, ascending
	Followers map[int64]int64   // followee -> count
	ByAuthor  map[int64][]int64 // author -> non-deleted post ids, newest first
	Muting    map[int64][]int64 // muter -> muted accounts, ascending
	Blocks    int               // blocks standing
}

// Shown is the accounts whose posts u's home feed shows besides u's own:
// those u follows and does not mute, ascending. The following:{u} read
// model holds exactly these.
func (t *Truth) Shown(u int64) []int64 {
	var out []int64
	for _, a := range t.Following[u] {
		if !slices.Contains(t.Muting[u], a) {
			out = append(out, a)
		}
	}
	return out
}

// LoadTruth reads posts and follows from PostgreSQL.
func LoadTruth(ctx context.Context, pool *pgxpool.Pool) (*Truth, error) {
	t := &Truth{Posts: map[int64]TruePost{}, Following: map[int64][]int64{}, Followers: map[int64]int64{}, ByAuthor: map[int64][]int64{},
		Muting: map[int64][]int64{}}
	rows, err := pool.Query(ctx, `SELECT id, author_id, (extract(epoch FROM created_at) * 1000)::bigint, content, deleted
		FROM posts ORDER BY author_id, created_at DESC, id DESC`)
	if err != nil {
		return nil, fmt.Errorf("read posts: %w", err)
	}
	for rows.Next() {
		var p TruePost
		if err := rows.Scan(&p.ID, &p.Author, &p.Ms, &p.Content, &p.Deleted); err != nil {
			rows.Close()
			return nil, fmt.Errorf("scan post: %w", err)
		}
		t.Posts[p.ID] = p
		if !p.Deleted {
			t.ByAuthor[p.Author] = append(t.ByAuthor[p.Author], p.ID)
		}
	}
	if rows.Err() != nil {
		return nil, fmt.Errorf("read posts: %w", rows.Err())
	}
	rows, err = pool.Query(ctx, `SELECT follower_id, followee_id FROM follows ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("read follows: %w", err)
	}
	for rows.Next() {
		var f, e int64
		if err := rows.Scan(&f, &e); err != nil {
			rows.Close()
			return nil, fmt.Errorf("scan follow: %w", err)
		}
		t.Following[f] = append(t.Following[f], e)
		t.Followers[e]++
	}
	if rows.Err() != nil {
		return nil, fmt.Errorf("read follows: %w", rows.Err())
	}
	rows, err = pool.Query(ctx, `SELECT muter_id, muted_id FROM mutes ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("read mutes: %w", err)
	}
	for rows.Next() {
		var m, a int64
		if err := rows.Scan(&m, &a); err != nil {
			rows.Close()
			return nil, fmt.Errorf("scan mute: %w", err)
		}
		t.Muting[m] = append(t.Muting[m], a)
	}
	if rows.Err() != nil {
		return nil, fmt.Errorf("read mutes: %w", rows.Err())
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM blocks`).Scan(&t.Blocks); err != nil {
		return nil, fmt.Errorf("read blocks: %w", err)
	}
	return t, nil
}

// TruthFeed is the feed definition, by SQL: the newest-first non-deleted
// posts of u and of the accounts u follows, less those u mutes, those u
// blocks and those that block u.
func TruthFeed(ctx context.Context, pool *pgxpool.Pool, u int64) ([]int64, error) {
	rows, err := pool.Query(ctx, `SELECT p.id FROM posts p
		WHERE NOT p.deleted AND (p.author_id = $1 OR (
		      p.author_id IN (SELECT followee_id FROM follows WHERE follower_id = $1)
		  AND p.author_id NOT IN (SELECT muted_id FROM mutes WHERE muter_id = $1)
		  AND p.author_id NOT IN (SELECT blocked_id FROM blocks WHERE blocker_id = $1)
		  AND p.author_id NOT IN (SELECT blocker_id FROM blocks WHERE blocked_id = $1)))
		ORDER BY p.created_at DESC, p.id DESC`, u)
	if err != nil {
		return nil, fmt.Errorf("truth feed of %d: %w", u, err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// Diff compares a list read through the API with the expected ids and
// returns the differences (nil when equal): duplicates, missing posts,
// foreign posts, order, and fields that disagree with the post's row.
func (t *Truth) Diff(got []APIPost, want []int64) []string {
	var out []string
	for _, d := range t.DiffItems(got, want) {
		out = append(out, d.Text)
	}
	return out
}

// DiffItems is Diff with each difference's kind and post (Text is Diff's
// line, which starts with the kind).
func (t *Truth) DiffItems(got []APIPost, want []int64) []Difference {
	var out []Difference
	add := func(kind string, post int64, format string, args ...any) {
		out = append(out, Difference{Kind: kind, Post: post, Text: kind + ": " + fmt.Sprintf(format, args...)})
	}
	seen := map[int64]int{}
	gotIDs := make([]int64, 0, len(got))
	for i, p := range got {
		id, err := strconv.ParseInt(p.ID, 10, 64)
		if err != nil {
			add("fields", 0, "item %d: bad id %q", i, p.ID)
			continue
		}
		if j, dup := seen[id]; dup {
			add("duplicate", id, "post %d at positions %d and %d", id, j, i)
			continue
		}
		seen[id] = i
		gotIDs = append(gotIDs, id)
		if tp, ok := t.Posts[id]; ok {
			if p.AuthorID != strconv.FormatInt(tp.Author, 10) || p.Content != tp.Content || p.CreatedAt != FormatMillis(tp.Ms) {
				add("fields", id, "post %d served as author %s, createdAt %s, content %q; row says %d, %s, %q",
					id, p.AuthorID, p.CreatedAt, p.Content, tp.Author, FormatMillis(tp.Ms), tp.Content)
			}
		}
	}
	wantSet := make(map[int64]int, len(want))
	for i, id := range want {
		wantSet[id] = i
	}
	for i, id := range want {
		if _, ok := seen[id]; !ok {
			tp := t.Posts[id]
			add("missing", id, "post %d (author %d, %s) at expected position %d", id, tp.Author, FormatMillis(tp.Ms), i)
		}
	}
	for _, id := range gotIDs {
		if _, ok := wantSet[id]; !ok {
			tp, known := t.Posts[id]
			why := "unknown post"
			if known {
				why = fmt.Sprintf("author %d, deleted %v", tp.Author, tp.Deleted)
			}
			add("foreign", id, "post %d at position %d (%s)", id, seen[id], why)
		}
	}
	if len(out) == 0 && !slices.Equal(gotIDs, want) {
		for i := range gotIDs {
			if gotIDs[i] != want[i] {
				add("order", gotIDs[i], "position %d is post %d (%s), want post %d (%s)",
					i, gotIDs[i], FormatMillis(t.Posts[gotIDs[i]].Ms), want[i], FormatMillis(t.Posts[want[i]].Ms))
				break
			}
		}
	}
	return out
}

// FormatMillis formats a post's creation time as the API does.
func FormatMillis(ms int64) string {
	return time.UnixMilli(ms).UTC().Format(events.CreatedAtLayout)
}

// ReadAll reads a paged endpoint (path without query) to its end with the
// given page size, each page through get. It stops with an error after
// maxPages pages, so a cursor that never ends cannot hang the test.
func ReadAll(ctx context.Context, get func(ctx context.Context, pathAndQuery string, page *APIPage) error, path string, limit, maxPages int) ([]APIPost, error) {
	var all []APIPost
	cursor := ""
	for page := 0; page < maxPages; page++ {
		q := url.Values{"limit": {strconv.Itoa(limit)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var p APIPage
		if err := get(ctx, path+"?"+q.Encode(), &p); err != nil {
			return all, err
		}
		if len(p.Items) > limit {
			return all, fmt.Errorf("%s page %d: %d items for limit %d", path, page, len(p.Items), limit)
		}
		all = append(all, p.Items...)
		if p.NextCursor == nil {
			return all, nil
		}
		if len(p.Items) == 0 {
			return all, fmt.Errorf("%s page %d: empty page with a next cursor", path, page)
		}
		cursor = *p.NextCursor
	}
	return all, fmt.Errorf("%s: still a next cursor after %d pages", path, maxPages)
}
