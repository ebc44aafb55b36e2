package verify

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/feedco/feed/events"
)

// The truth: what PostgreSQL, the source of truth, says a feed is, and the
// comparison of a list the query side served with it. The convergence
// oracles (e2e in process, faults with the roles as processes) and `feed
// verify` (verify.go) share this one definition.

// APIPost is a feed entry as the API returns it: a post, or a repost
// (RepostOf set, no content of its own), or, inside an item, a quoted
// post (Unavailable when it cannot be shown).
type APIPost struct {
	ID        string     `json:"id"`
	AuthorID  string     `json:"authorId"`
	Author    *APIAuthor `json:"author,omitempty"`
	Content   string     `json:"content"`
	CreatedAt string     `json:"createdAt"`
	// EditedAt is in an edit's answer (PATCH /api/posts/{id}); feed pages
	// show the current content without it.
	EditedAt    string            `json:"editedAt,omitempty"`
	Media       []json.RawMessage `json:"media,omitempty"`
	ReplyTo     *APIRef           `json:"replyTo,omitempty"`
	Quote       *APIPost          `json:"quote,omitempty"`
	Unavailable bool              `json:"unavailable,omitempty"`
	Counts      *APICounts        `json:"counts,omitempty"`
	Viewer      *APIViewer        `json:"viewer,omitempty"`
	RepostOf    *APIPost          `json:"repostOf,omitempty"`
}

// APIAuthor is an item's author.
type APIAuthor struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// APIRef is a reply's parent.
type APIRef struct {
	ID       string `json:"id"`
	AuthorID string `json:"authorId"`
}

// APICounts are an item's counts.
type APICounts struct {
	Likes   int64 `json:"likes"`
	Reposts int64 `json:"reposts"`
	Replies int64 `json:"replies"`
}

// APIViewer is the reader's own state of an item.
type APIViewer struct {
	Liked    bool `json:"liked"`
	Reposted bool `json:"reposted"`
}

// APIPage is a feed or author-posts page.
type APIPage struct {
	Items      []APIPost `json:"items"`
	NextCursor *string   `json:"nextCursor"`
	PrevCursor *string   `json:"prevCursor"`
}

// TruePost is a post row of the source of truth. Content is the post's
// latest content: an edit replaces it in the row (posts.content), so a
// feed that shows an older version differs in "fields". The counts are
// the row's (kept in the transactions that change them).
type TruePost struct {
	ID, Author, Ms int64
	Content        string
	Deleted        bool
	ReplyTo        int64 // 0: no reply
	ReplyToAuthor  int64
	QuoteOf        int64 // 0: no quote
	QuoteAuthor    int64
	Media          int // attachments
	Likes          int64
	Reposts        int64
	Replies        int64
}

// TrueRepost is a live repost (a row of reposts: undoing one deletes it).
type TrueRepost struct {
	ID, Reposter, Post, Ms int64
}

// pair is an ordered pair of accounts, or an account and a post.
type pair [2]int64

// Truth is the posts, reposts, likes, follows, mutes and blocks of the
// source of truth, read at one time.
type Truth struct {
	Posts     map[int64]TruePost
	Reposts   map[int64]TrueRepost // by repost id
	Following map[int64][]int64    // follower -> followees, ascending
	Followers map[int64]int64      // followee -> count
	// ByAuthor is each author's entries: their non-deleted posts and their
	// live reposts of non-deleted posts, newest first. AuthorPage is what
	// a viewer's page of them shows.
	ByAuthor map[int64][]int64
	Muting   map[int64][]int64 // muter -> muted accounts, ascending
	Blocks   int               // blocks standing
	Names    map[int64]string  // user -> name
	blocked  map[pair]bool     // (blocker, blocked)
	liked    map[pair]bool     // (user, post)
	reposted map[pair]bool     // (user, original)
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

// AuthorPage is author's page (GET /api/users/{id}/posts) as viewer reads
// it: ByAuthor less the reposts of originals whose author viewer mutes or
// is in a block with (the viewer's own posts reposted always show).
func (t *Truth) AuthorPage(viewer, author int64) []int64 {
	var out []int64
	for _, id := range t.ByAuthor[author] {
		if r, ok := t.Reposts[id]; ok {
			if a := t.Posts[r.Post].Author; a != viewer && t.hidden(viewer, a) {
				continue
			}
		}
		out = append(out, id)
	}
	return out
}

// hidden reports whether viewer mutes a or a block stands between them.
func (t *Truth) hidden(viewer, a int64) bool {
	return slices.Contains(t.Muting[viewer], a) || t.blocked[pair{viewer, a}] || t.blocked[pair{a, viewer}]
}

// Liked and Reposted report the viewer's own state of a post.
func (t *Truth) Liked(u, post int64) bool    { return t.liked[pair{u, post}] }
func (t *Truth) Reposted(u, post int64) bool { return t.reposted[pair{u, post}] }

// postsSQL reads the post rows the truth compares items with.
const postsSQL = `SELECT id, author_id, (extract(epoch FROM created_at) * 1000)::bigint, content, deleted,
	coalesce(reply_to, 0), coalesce(reply_to_author, 0), coalesce(quote_of, 0), coalesce(quote_author, 0),
	coalesce(jsonb_array_length(media), 0), like_count, repost_count, reply_count
	FROM posts`

func scanPost(rows pgx.Rows) (TruePost, error) {
	var p TruePost
	err := rows.Scan(&p.ID, &p.Author, &p.Ms, &p.Content, &p.Deleted, &p.ReplyTo, &p.ReplyToAuthor, &p.QuoteOf, &p.QuoteAuthor,
		&p.Media, &p.Likes, &p.Reposts, &p.Replies)
	return p, err
}

// LoadTruth reads posts, reposts, likes, follows, mutes, blocks and names
// from PostgreSQL.
func LoadTruth(ctx context.Context, pool *pgxpool.Pool) (*Truth, error) {
	t := newTruth()
	each := func(what, sql string, scan func(pgx.Rows) error) error {
		rows, err := pool.Query(ctx, sql)
		if err != nil {
			return fmt.Errorf("read %s: %w", what, err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				return fmt.Errorf("scan %s: %w", what, err)
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read %s: %w", what, err)
		}
		return nil
	}
	type entry struct{ id, ms int64 }
	pages := map[int64][]entry{}
	err := each("posts", postsSQL, func(rows pgx.Rows) error {
		p, err := scanPost(rows)
		if err != nil {
			return err
		}
		t.Posts[p.ID] = p
		if !p.Deleted {
			pages[p.Author] = append(pages[p.Author], entry{p.ID, p.Ms})
		}
		return nil
	})
	if err == nil {
		err = each("reposts", `SELECT id, user_id, post_id, (extract(epoch FROM created_at) * 1000)::bigint FROM reposts`, func(rows pgx.Rows) error {
			var r TrueRepost
			if err := rows.Scan(&r.ID, &r.Reposter, &r.Post, &r.Ms); err != nil {
				return err
			}
			t.Reposts[r.ID] = r
			t.reposted[pair{r.Reposter, r.Post}] = true
			return nil
		})
	}
	if err == nil {
		err = each("likes", `SELECT user_id, post_id FROM likes`, func(rows pgx.Rows) error {
			var u, p int64
			if err := rows.Scan(&u, &p); err != nil {
				return err
			}
			t.liked[pair{u, p}] = true
			return nil
		})
	}
	if err == nil {
		err = each("follows", `SELECT follower_id, followee_id FROM follows ORDER BY 1, 2`, func(rows pgx.Rows) error {
			var f, e int64
			if err := rows.Scan(&f, &e); err != nil {
				return err
			}
			t.Following[f] = append(t.Following[f], e)
			t.Followers[e]++
			return nil
		})
	}
	if err == nil {
		err = each("mutes", `SELECT muter_id, muted_id FROM mutes ORDER BY 1, 2`, func(rows pgx.Rows) error {
			var m, a int64
			if err := rows.Scan(&m, &a); err != nil {
				return err
			}
			t.Muting[m] = append(t.Muting[m], a)
			return nil
		})
	}
	if err == nil {
		err = each("blocks", `SELECT blocker_id, blocked_id FROM blocks`, func(rows pgx.Rows) error {
			var b, v int64
			if err := rows.Scan(&b, &v); err != nil {
				return err
			}
			t.blocked[pair{b, v}] = true
			t.Blocks++
			return nil
		})
	}
	if err == nil {
		err = each("users", `SELECT id, name FROM users`, func(rows pgx.Rows) error {
			var u int64
			var n string
			if err := rows.Scan(&u, &n); err != nil {
				return err
			}
			t.Names[u] = n
			return nil
		})
	}
	if err != nil {
		return nil, err
	}
	for _, r := range t.Reposts {
		if o, ok := t.Posts[r.Post]; ok && !o.Deleted {
			pages[r.Reposter] = append(pages[r.Reposter], entry{r.ID, r.Ms})
		}
	}
	for a, es := range pages {
		slices.SortFunc(es, func(x, y entry) int { return cmp.Or(cmp.Compare(y.ms, x.ms), cmp.Compare(y.id, x.id)) })
		ids := make([]int64, len(es))
		for i, e := range es {
			ids[i] = e.id
		}
		t.ByAuthor[a] = ids
	}
	return t, nil
}

// truthFeedSQL is the home feed's definition, by SQL, independent of the
// query side's code (homefeed's rules): the entries of u and of the
// accounts u follows and does not mute (shown), newest first, where
//   - a post is non-deleted, and a reply only when it is u's own, or its
//     parent's author is u, or is the reply's own author or an account u
//     shows, and is not hidden from u (muted, or a block either way);
//   - a repost is live, of a non-deleted original whose author u neither
//     shows nor hides (an original u's feed shows as itself is not shown
//     again), whose parent's author (a reply's) is not hidden from u, and
//     the earliest live repost of its original by u or an account u shows.
//
// $2 bounds the result (NULL: all).
const truthFeedSQL = `
WITH shown AS (
    SELECT $1::bigint AS a
    UNION SELECT followee_id FROM follows WHERE follower_id = $1
        AND followee_id NOT IN (SELECT muted_id FROM mutes WHERE muter_id = $1)),
hidden AS (
    SELECT muted_id AS a FROM mutes WHERE muter_id = $1
    UNION SELECT blocked_id FROM blocks WHERE blocker_id = $1
    UNION SELECT blocker_id FROM blocks WHERE blocked_id = $1),
entries AS (
    SELECT p.id, p.created_at FROM posts p
    WHERE NOT p.deleted AND p.author_id IN (SELECT a FROM shown)
      AND (p.reply_to_author IS NULL OR p.reply_to_author = $1 OR p.author_id = $1
           OR (p.reply_to_author NOT IN (SELECT a FROM hidden)
               AND (p.reply_to_author = p.author_id OR p.reply_to_author IN (SELECT a FROM shown))))
    UNION ALL
    SELECT r.id, r.created_at FROM reposts r JOIN posts o ON o.id = r.post_id
    WHERE r.user_id IN (SELECT a FROM shown) AND NOT o.deleted
      AND o.author_id NOT IN (SELECT a FROM shown) AND o.author_id NOT IN (SELECT a FROM hidden)
      AND (o.reply_to_author IS NULL OR o.reply_to_author IN ($1, o.author_id)
           OR o.reply_to_author NOT IN (SELECT a FROM hidden))
      AND NOT EXISTS (SELECT 1 FROM reposts e WHERE e.post_id = r.post_id AND e.id < r.id
                      AND e.user_id IN (SELECT a FROM shown)))
SELECT id FROM entries ORDER BY created_at DESC, id DESC LIMIT $2`

// TruthFeed is the feed definition (truthFeedSQL): u's whole home feed,
// entry ids newest first.
func TruthFeed(ctx context.Context, pool *pgxpool.Pool, u int64) ([]int64, error) {
	return truthHead(ctx, pool, u, nil)
}

// truthHead is TruthFeed cut at limit entries (nil: all).
func truthHead(ctx context.Context, pool *pgxpool.Pool, u int64, limit *int) ([]int64, error) {
	rows, err := pool.Query(ctx, truthFeedSQL, u, limit)
	if err != nil {
		return nil, fmt.Errorf("truth feed of %d: %w", u, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("truth feed of %d: %w", u, err)
	}
	return ids, nil
}

// Diff compares a list viewer read through the API with the expected
// entry ids and returns the differences (nil when equal): duplicates,
// missing entries, foreign entries, order, and fields that disagree with
// the rows (content, author and name, counts, the viewer's own state, the
// reply's parent, the quote and its availability, a repost's original).
// A viewer of 0 skips the viewer's own state.
func (t *Truth) Diff(viewer int64, got []APIPost, want []int64) []string {
	var out []string
	for _, d := range t.DiffItems(viewer, got, want) {
		out = append(out, d.Text)
	}
	return out
}

// describe names an entry for a difference's text.
func (t *Truth) describe(id int64) string {
	if r, ok := t.Reposts[id]; ok {
		return fmt.Sprintf("repost %d (by %d of %d, %s)", id, r.Reposter, r.Post, FormatMillis(r.Ms))
	}
	if p, ok := t.Posts[id]; ok {
		return fmt.Sprintf("post %d (author %d, %s, deleted %v)", id, p.Author, FormatMillis(p.Ms), p.Deleted)
	}
	return fmt.Sprintf("entry %d (unknown: an undone repost, or no such post)", id)
}

// DiffItems is Diff with each difference's kind and entry (Text is Diff's
// line, which starts with the kind).
func (t *Truth) DiffItems(viewer int64, got []APIPost, want []int64) []Difference {
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
			add("duplicate", id, "entry %d at positions %d and %d", id, j, i)
			continue
		}
		seen[id] = i
		gotIDs = append(gotIDs, id)
		if d := t.entryDiff(viewer, p); d != "" {
			add("fields", id, "%s served %s", t.describe(id), d)
		}
	}
	wantSet := make(map[int64]int, len(want))
	for i, id := range want {
		wantSet[id] = i
	}
	for i, id := range want {
		if _, ok := seen[id]; !ok {
			add("missing", id, "%s at expected position %d", t.describe(id), i)
		}
	}
	for _, id := range gotIDs {
		if _, ok := wantSet[id]; !ok {
			add("foreign", id, "%s at position %d", t.describe(id), seen[id])
		}
	}
	if len(out) == 0 && !slices.Equal(gotIDs, want) {
		for i := range gotIDs {
			if gotIDs[i] != want[i] {
				add("order", gotIDs[i], "position %d is %s, want %s", i, t.describe(gotIDs[i]), t.describe(want[i]))
				break
			}
		}
	}
	return out
}

// entryDiff says how item p differs from its rows ("" when it does not, or
// when the truth does not know it: foreign entries are reported apart).
func (t *Truth) entryDiff(viewer int64, p APIPost) string {
	id, _ := strconv.ParseInt(p.ID, 10, 64)
	if r, ok := t.Reposts[id]; ok {
		switch {
		case p.AuthorID != itoa(r.Reposter) || p.CreatedAt != FormatMillis(r.Ms):
			return fmt.Sprintf("as by %s at %s, the repost is by %d at %s", p.AuthorID, p.CreatedAt, r.Reposter, FormatMillis(r.Ms))
		case p.Content != "":
			return fmt.Sprintf("with content %q: a repost has none", p.Content)
		case p.RepostOf == nil || p.RepostOf.ID != itoa(r.Post):
			return fmt.Sprintf("without its original %d (repostOf %v)", r.Post, p.RepostOf)
		}
		if d := t.authorDiff(p, r.Reposter); d != "" {
			return d
		}
		if d := t.postDiff(viewer, *p.RepostOf, true); d != "" {
			return "with its original " + d
		}
		return ""
	}
	if _, ok := t.Posts[id]; !ok {
		return ""
	}
	if p.RepostOf != nil {
		return fmt.Sprintf("as a repost of %s: it is a post", p.RepostOf.ID)
	}
	return t.postDiff(viewer, p, true)
}

// authorDiff checks an item's author object against the account's name.
// Items without one (answers of the write routes) are not checked.
func (t *Truth) authorDiff(p APIPost, author int64) string {
	if p.Author == nil {
		return ""
	}
	if name, known := t.Names[author]; known && (p.Author.ID != itoa(author) || p.Author.Name != name) {
		return fmt.Sprintf("with author %+v, the account is %d %q", *p.Author, author, name)
	}
	return ""
}

// postDiff compares a post item with its row; quote says whether to look
// into its quote (a quoted post's own quote is not hydrated).
func (t *Truth) postDiff(viewer int64, p APIPost, quote bool) string {
	id, _ := strconv.ParseInt(p.ID, 10, 64)
	tp, ok := t.Posts[id]
	if !ok {
		return fmt.Sprintf("post %s, which PostgreSQL does not hold", p.ID)
	}
	if p.AuthorID != itoa(tp.Author) || p.Content != tp.Content || p.CreatedAt != FormatMillis(tp.Ms) {
		return fmt.Sprintf("as author %s, createdAt %s, content %q; row says %d, %s, %q",
			p.AuthorID, p.CreatedAt, p.Content, tp.Author, FormatMillis(tp.Ms), tp.Content)
	}
	if d := t.authorDiff(p, tp.Author); d != "" {
		return d
	}
	if c := p.Counts; c != nil && (c.Likes != tp.Likes || c.Reposts != tp.Reposts || c.Replies != tp.Replies) {
		return fmt.Sprintf("with counts %+v, the row's are likes %d, reposts %d, replies %d", *c, tp.Likes, tp.Reposts, tp.Replies)
	}
	if v := p.Viewer; v != nil && viewer != 0 && (v.Liked != t.Liked(viewer, id) || v.Reposted != t.Reposted(viewer, id)) {
		return fmt.Sprintf("with viewer %+v for %d, who liked %v and reposted %v", *v, viewer, t.Liked(viewer, id), t.Reposted(viewer, id))
	}
	if len(p.Media) != tp.Media {
		return fmt.Sprintf("with %d media, the row has %d", len(p.Media), tp.Media)
	}
	switch {
	case tp.ReplyTo == 0 && p.ReplyTo != nil:
		return fmt.Sprintf("as a reply to %+v: it is no reply", *p.ReplyTo)
	case tp.ReplyTo != 0 && (p.ReplyTo == nil || p.ReplyTo.ID != itoa(tp.ReplyTo) || p.ReplyTo.AuthorID != itoa(tp.ReplyToAuthor)):
		return fmt.Sprintf("with replyTo %v, the row replies to %d by %d", p.ReplyTo, tp.ReplyTo, tp.ReplyToAuthor)
	}
	if !quote || (p.Counts == nil && p.Quote == nil) {
		// An answer of the write routes (no hydration) or a nested quote.
		return ""
	}
	switch {
	case tp.QuoteOf == 0 && p.Quote != nil:
		return fmt.Sprintf("with a quote of %s: it quotes nothing", p.Quote.ID)
	case tp.QuoteOf == 0:
		return ""
	case p.Quote == nil || p.Quote.ID != itoa(tp.QuoteOf):
		return fmt.Sprintf("without its quote of %d", tp.QuoteOf)
	}
	q, exists := t.Posts[tp.QuoteOf]
	available := exists && !q.Deleted && (q.Author == viewer || viewer == 0 || !t.hidden(viewer, q.Author))
	if p.Quote.Unavailable == available {
		return fmt.Sprintf("with its quote of %d unavailable %v (the quoted post exists %v, deleted %v, author %d)",
			tp.QuoteOf, p.Quote.Unavailable, exists, q.Deleted, q.Author)
	}
	if available {
		if d := t.postDiff(viewer, *p.Quote, false); d != "" {
			return "with its quote " + d
		}
	}
	return ""
}

// newTruth is an empty Truth.
func newTruth() *Truth {
	return &Truth{Posts: map[int64]TruePost{}, Reposts: map[int64]TrueRepost{}, Following: map[int64][]int64{}, Followers: map[int64]int64{},
		ByAuthor: map[int64][]int64{}, Muting: map[int64][]int64{}, Names: map[int64]string{},
		blocked: map[pair]bool{}, liked: map[pair]bool{}, reposted: map[pair]bool{}}
}

// ms is an entry's creation millisecond (0: unknown).
func (t *Truth) ms(id int64) int64 {
	if r, ok := t.Reposts[id]; ok {
		return r.Ms
	}
	return t.Posts[id].Ms
}

// loadFor adds to t what comparing viewer's items for the entries ids
// needs: the reposts among them, the posts (the entries, originals,
// quoted posts), their authors' names, viewer's likes and reposts of
// them, and viewer's mutes and blocks.
func (t *Truth) loadFor(ctx context.Context, pool *pgxpool.Pool, viewer int64, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	rows, err := pool.Query(ctx, `SELECT id, user_id, post_id, (extract(epoch FROM created_at) * 1000)::bigint FROM reposts WHERE id = ANY($1)`, ids)
	if err != nil {
		return fmt.Errorf("read reposts: %w", err)
	}
	var posts []int64
	for rows.Next() {
		var r TrueRepost
		if err := rows.Scan(&r.ID, &r.Reposter, &r.Post, &r.Ms); err != nil {
			rows.Close()
			return err
		}
		t.Reposts[r.ID] = r
		posts = append(posts, r.Post)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read reposts: %w", err)
	}
	posts = append(posts, ids...)
	for range 2 { // the entries and originals, then what they quote
		rows, err := pool.Query(ctx, postsSQL+` WHERE id = ANY($1)`, posts)
		if err != nil {
			return fmt.Errorf("read posts: %w", err)
		}
		posts = posts[:0]
		for rows.Next() {
			p, err := scanPost(rows)
			if err != nil {
				rows.Close()
				return err
			}
			t.Posts[p.ID] = p
			if p.QuoteOf != 0 {
				posts = append(posts, p.QuoteOf)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read posts: %w", err)
		}
	}
	var known []int64
	for id := range t.Posts {
		known = append(known, id)
	}
	queries := []struct {
		sql  string
		args []any
		scan func(a, b int64, name string)
	}{
		{`SELECT u.id, 0, u.name FROM users u WHERE u.id IN (SELECT author_id FROM posts WHERE id = ANY($1) UNION SELECT user_id FROM reposts WHERE id = ANY($2))`,
			[]any{known, ids}, func(a, _ int64, name string) { t.Names[a] = name }},
		{`SELECT post_id, 0, '' FROM likes WHERE user_id = $1 AND post_id = ANY($2)`, []any{viewer, known},
			func(p, _ int64, _ string) { t.liked[pair{viewer, p}] = true }},
		{`SELECT post_id, 0, '' FROM reposts WHERE user_id = $1 AND post_id = ANY($2)`, []any{viewer, known},
			func(p, _ int64, _ string) { t.reposted[pair{viewer, p}] = true }},
		{`SELECT muted_id, 0, '' FROM mutes WHERE muter_id = $1 ORDER BY 1`, []any{viewer},
			func(a, _ int64, _ string) { t.Muting[viewer] = append(t.Muting[viewer], a) }},
		{`SELECT blocker_id, blocked_id, '' FROM blocks WHERE blocker_id = $1 OR blocked_id = $1`, []any{viewer},
			func(a, b int64, _ string) { t.blocked[pair{a, b}] = true }},
	}
	for _, q := range queries {
		rows, err := pool.Query(ctx, q.sql, q.args...)
		if err != nil {
			return fmt.Errorf("read the truth of %d: %w", viewer, err)
		}
		for rows.Next() {
			var a, b int64
			var name string
			if err := rows.Scan(&a, &b, &name); err != nil {
				rows.Close()
				return err
			}
			q.scan(a, b, name)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read the truth of %d: %w", viewer, err)
		}
	}
	return nil
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

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
