package homefeed

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/readmodel"
)

// The inbox bulk build (`feed rebuild inbox`, docs/rebuild.md) in Go memory,
// from one snapshot of the inline tables.
//
// What it writes is what the SQL build before it wrote (one LATERAL query
// per batch of users, the query side's cold rebuild): for every user seen
// within the inbox TTL, the newest InboxMax+1 entries (non-deleted posts
// and live reposts) of their followees and themselves, newest first by (created_at, id); the first
// InboxMax are kept, the floor is the score of the one after them when
// there is one (entries at or below it are left out, the bounded-add rule),
// then ~built; the TTL is the user's last activity plus the inbox TTL (an
// inbox that would expire before it is written is not written).
// build_inbox_test.go checks it inbox by inbox against a replay of the
// events through the projector.
//
// How, with the cost and the memory of each step:
//
//  1. One REPEATABLE READ, read-only transaction: every read below sees the
//     same snapshot, taken after the rebuild's T0 (docs/rebuild.md).
//  2. The active users with their expiry: 16 bytes each.
//  3. One sequential scan of the non-deleted posts, keeping per author the
//     newest InboxMax+1 (no user's inbox can take more of one author):
//     16 bytes a post kept, up to twice that while an author's list waits
//     to be cut, plus ~50 bytes an author.
//  4. The follow edges by follower, one keyset range of at most
//     inboxChunkUsers active users per query (the primary key's order), so
//     only the edges of the chunks in flight are in memory; workers merge,
//     per user, the newest posts of the followees and the user (a k-way
//     merge that stops at InboxMax+1) and write the chunk in one pipeline,
//     workers chunks at once.
//
// Each inbox is written by Inboxes.WriteChunk: one SET of
// the finished sealed string, with its TTL.

// Beginner starts the snapshot transaction of the inbox build;
// *pgxpool.Pool implements it.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// BuildProgress follows a build made of stages: Stage starts one (total 0
// when unknown), Add counts units done in it. Add is called from several
// goroutines.
type BuildProgress interface {
	Stage(name, unit string, total int64)
	Add(n int)
}

// inboxChunkUsers is the number of active users per follows query and per
// write pipeline of the inbox build.
const inboxChunkUsers = 256

const (
	inboxNowSQL   = `SELECT (extract(epoch FROM now()) * 1000)::bigint`
	inboxUsersSQL = `SELECT user_id, (extract(epoch FROM last_seen_at + $1::interval) * 1000)::bigint
FROM user_activity WHERE last_seen_at > now() - $1::interval + interval '1 second'
ORDER BY user_id`
	// inboxPostsSQL is every author's entries: non-deleted posts and live
	// reposts (a repost is its reposter's entry, with its own id and time).
	inboxPostsSQL = `SELECT author_id, id, created_at FROM posts WHERE NOT deleted
UNION ALL SELECT user_id, id, created_at FROM reposts`
	// inboxEdgesSQL leaves out the follows whose follower mutes the
	// followee: the fan-out does not push those, and an unmute backfills.
	inboxEdgesSQL = `SELECT follower_id, followee_id FROM follows f
WHERE follower_id >= $1 AND follower_id <= $2
  AND NOT EXISTS (SELECT 1 FROM mutes m WHERE m.muter_id = f.follower_id AND m.muted_id = f.followee_id)
ORDER BY follower_id`
)

// inboxPost is a post as the inbox build orders it: the feed's order,
// created_at in milliseconds (the inbox score) then id. The SQL build
// ordered by the column's microseconds instead; both agree on every entry
// above the floor, which is all an inbox keeps.
type inboxPost struct{ events.FeedKey }

func (a inboxPost) newer(b inboxPost) bool { return a.Newer(b.FeedKey) }

// ms is the inbox score, created_at's millisecond (UnixMilli).
func (a inboxPost) ms() int64 { return a.Ms }

func newestFirst(a, b inboxPost) int { return events.NewestFirst(a.FeedKey, b.FeedKey) }

// authorPosts holds each author's newest bound posts, newest first once
// finish ran.
type authorPosts struct {
	bound int
	index map[int64]int32
	lists [][]inboxPost
}

func newAuthorPosts(bound int) *authorPosts {
	return &authorPosts{bound: bound, index: make(map[int64]int32)}
}

func (a *authorPosts) add(author int64, p inboxPost) {
	i, ok := a.index[author]
	if !ok {
		i = int32(len(a.lists))
		a.index[author] = i
		a.lists = append(a.lists, nil)
	}
	l := append(a.lists[i], p)
	if len(l) >= 2*a.bound {
		slices.SortFunc(l, newestFirst)
		l = l[:a.bound]
	}
	a.lists[i] = l
}

func (a *authorPosts) finish() {
	for i, l := range a.lists {
		slices.SortFunc(l, newestFirst)
		if len(l) > a.bound {
			l = slices.Clip(l[:a.bound])
		}
		a.lists[i] = l
	}
}

func (a *authorPosts) of(author int64) []inboxPost {
	if i, ok := a.index[author]; ok {
		return a.lists[i]
	}
	return nil
}

// inboxUser is an active user and their inbox's expiry (epoch ms,
// PostgreSQL's clock).
type inboxUser struct{ id, expireMs int64 }

// inboxChunk is a run of active users and their followees: user i follows
// followees[offs[i]:offs[i+1]].
type inboxChunk struct {
	users     []inboxUser
	offs      []int
	followees []int64
}

// Build writes the inbox of every user whose inbox lives (seen within
// the inbox TTL), as described at the top of this file. Others get none, as
// in the live version, where theirs expired. A post committed after the
// snapshot is pushed by the projector's catch-up, which the rebuild starts
// at offsets taken before it. It returns the number of active users.
func (m *Manager) Build(ctx context.Context, db Beginner, progress BuildProgress, workers int) (int64, error) {
	workers = max(workers, 1)
	if progress == nil {
		progress = noProgress{}
	}
	// The downward crossings the followers version has recorded before the
	// snapshot: their events are visible to it (CDC publishes an event only
	// once it is), so these inboxes hold their authors' posts, and the
	// version starts with them backfilled (readmodel.Backfilled). One the
	// followers projector records later is pulled until that author's next
	// crossing: a pull the inbox duplicates, never a missing post.
	leaving, err := readmodel.NewCelebrities(m.keys).Leaving(ctx, m.rdb)
	if err != nil {
		return 0, fmt.Errorf("build inboxes: %w", err)
	}
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, fmt.Errorf("build inboxes: begin snapshot: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	// The snapshot's now() and the moment we read it: a TTL written later
	// is the expiry minus the time since (PostgreSQL's clock, as before).
	var pgNow int64
	if err := tx.QueryRow(ctx, inboxNowSQL).Scan(&pgNow); err != nil {
		return 0, fmt.Errorf("build inboxes: read snapshot time: %w", err)
	}
	ref := time.Now()
	nowMs := func() int64 { return pgNow + time.Since(ref).Milliseconds() }

	rows, err := tx.Query(ctx, inboxUsersSQL, m.pol.InboxTTL())
	if err != nil {
		return 0, fmt.Errorf("build inboxes: read active users: %w", err)
	}
	users, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (inboxUser, error) {
		var u inboxUser
		return u, r.Scan(&u.id, &u.expireMs)
	})
	if err != nil {
		return 0, fmt.Errorf("build inboxes: read active users: %w", err)
	}

	keep := m.pol.InboxMax
	progress.Stage("read posts", "posts", 0)
	posts, err := readAuthorPosts(ctx, tx, keep+1, progress)
	if err != nil {
		return 0, fmt.Errorf("build inboxes: %w", err)
	}

	progress.Stage("write inboxes", "active users", int64(len(users)))
	w := &inboxWriter{posts: posts, keep: keep, nowMs: nowMs, rdb: m.rdb, out: m.inbox}
	chunks := make(chan inboxChunk, workers)
	g, gctx := errgroup.WithContext(ctx)
	for range workers {
		g.Go(func() error {
			var b inboxBuffers
			for c := range chunks {
				if err := w.write(gctx, c, &b); err != nil {
					return err
				}
				progress.Add(len(c.users))
			}
			return nil
		})
	}
	readErr := func() error {
		defer close(chunks)
		for i := 0; i < len(users); i += inboxChunkUsers {
			c, err := readChunk(gctx, tx, users[i:min(i+inboxChunkUsers, len(users))])
			if err != nil {
				return err
			}
			select {
			case chunks <- c:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	}()
	if err := g.Wait(); err != nil {
		return 0, fmt.Errorf("build inboxes: %w", err)
	}
	if readErr != nil {
		return 0, fmt.Errorf("build inboxes: %w", readErr)
	}
	if err := readmodel.NewBackfilled(m.keys).Record(ctx, m.rdb, leaving); err != nil {
		return 0, fmt.Errorf("build inboxes: %w", err)
	}
	return int64(len(users)), ctx.Err()
}

type noProgress struct{}

func (noProgress) Stage(string, string, int64) {}
func (noProgress) Add(int)                     {}

// readAuthorPosts reads every non-deleted post and live repost, keeping
// each author's (reposter's) newest bound.
func readAuthorPosts(ctx context.Context, tx pgx.Tx, bound int, progress BuildProgress) (*authorPosts, error) {
	rows, err := tx.Query(ctx, inboxPostsSQL)
	if err != nil {
		return nil, fmt.Errorf("read posts: %w", err)
	}
	defer rows.Close()
	out := newAuthorPosts(bound)
	n := 0
	for rows.Next() {
		var author, id int64
		var at time.Time
		if err := rows.Scan(&author, &id, &at); err != nil {
			return nil, fmt.Errorf("read posts: %w", err)
		}
		out.add(author, inboxPost{events.KeyOf(at, id)})
		if n++; n == 10_000 {
			progress.Add(n)
			n = 0
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read posts: %w", err)
	}
	progress.Add(n)
	out.finish()
	return out, nil
}

// readChunk reads the followees of users (sorted by id): the follow rows of
// the id range they span, in primary key order, skipping inactive
// followers.
func readChunk(ctx context.Context, tx pgx.Tx, users []inboxUser) (inboxChunk, error) {
	c := inboxChunk{users: users, offs: make([]int, 1, len(users)+1)}
	rows, err := tx.Query(ctx, inboxEdgesSQL, users[0].id, users[len(users)-1].id)
	if err != nil {
		return c, fmt.Errorf("read follows: %w", err)
	}
	defer rows.Close()
	i := 0 // the user whose followees are being read
	var follower, followee int64
	for rows.Next() {
		if err := rows.Scan(&follower, &followee); err != nil {
			return c, fmt.Errorf("read follows: %w", err)
		}
		for i < len(users) && users[i].id < follower {
			c.offs = append(c.offs, len(c.followees))
			i++
		}
		if i < len(users) && users[i].id == follower {
			c.followees = append(c.followees, followee)
		}
	}
	if err := rows.Err(); err != nil {
		return c, fmt.Errorf("read follows: %w", err)
	}
	for i < len(users) {
		c.offs = append(c.offs, len(c.followees))
		i++
	}
	return c, nil
}

// inboxWriter merges chunks and hands them to out; shared by the workers.
type inboxWriter struct {
	posts *authorPosts
	keep  int
	nowMs func() int64
	rdb   redis.UniversalClient
	out   Inboxes
}

// inboxBuffers are one worker's reusable buffers.
type inboxBuffers struct {
	heap   []inboxCursor
	merged []inboxPost
	out    BuildBuffers
}

// inboxCursor is the unread rest of one author's posts in a merge.
type inboxCursor []inboxPost

// merge returns the newest limit posts of the user's followees and the user,
// newest first, in b.merged.
func (w *inboxWriter) merge(user int64, followees []int64, limit int, b *inboxBuffers) []inboxPost {
	h := b.heap[:0]
	if l := w.posts.of(user); len(l) > 0 {
		h = append(h, l)
	}
	for _, f := range followees {
		if l := w.posts.of(f); len(l) > 0 {
			h = append(h, l)
		}
	}
	out := b.merged[:0]
	if len(h) == 1 {
		out = append(out, h[0][:min(limit, len(h[0]))]...)
	} else if len(h) > 1 {
		for i := len(h)/2 - 1; i >= 0; i-- {
			siftDown(h, i)
		}
		for len(out) < limit && len(h) > 0 {
			out = append(out, h[0][0])
			if h[0] = h[0][1:]; len(h[0]) == 0 {
				h[0] = h[len(h)-1]
				h = h[:len(h)-1]
			}
			siftDown(h, 0)
		}
	}
	b.heap, b.merged = h[:0], out
	return out
}

// siftDown restores the max-heap (newest head first) below i.
func siftDown(h []inboxCursor, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r][0].newer(h[l][0]) {
			m = r
		}
		if !h[m][0].newer(h[i][0]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// set computes the user's inbox into s (reusing s.Kept); ok is false when
// there is nothing to write. The newest keep are kept; the floor is the
// score of the one after them when there is one, and entries sharing its
// millisecond are left out too (the bounded-add rule).
func (w *inboxWriter) set(user int64, followees []int64, b *inboxBuffers, s *BuiltInbox) bool {
	es := w.merge(user, followees, w.keep+1, b)
	if len(es) == 0 {
		return false
	}
	s.Floor, s.HasFloor = 0, false
	if len(es) > w.keep {
		s.Floor, s.HasFloor = es[w.keep].ms(), true
		es = es[:w.keep]
		for len(es) > 0 && es[len(es)-1].ms() <= s.Floor {
			es = es[:len(es)-1]
		}
	}
	s.Kept = s.Kept[:0]
	for _, e := range es {
		s.Kept = append(s.Kept, readmodel.Entry{ID: e.ID, Ms: e.ms()})
	}
	return true
}

// chunkInboxes is one chunk as a Chunk.
type chunkInboxes struct {
	w *inboxWriter
	c inboxChunk
	b *inboxBuffers
}

func (x chunkInboxes) Len() int { return len(x.c.users) }

func (x chunkInboxes) Inbox(i int, s *BuiltInbox) (user, expireMs int64, ok bool) {
	u := x.c.users[i]
	return u.id, u.expireMs, x.w.set(u.id, x.c.followees[x.c.offs[i]:x.c.offs[i+1]], x.b, s)
}

// write writes one chunk's inboxes in one pipeline.
func (w *inboxWriter) write(ctx context.Context, c inboxChunk, b *inboxBuffers) error {
	return w.out.WriteChunk(ctx, w.rdb, chunkInboxes{w, c, b}, w.nowMs, &b.out)
}
