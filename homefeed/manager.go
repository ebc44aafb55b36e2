package homefeed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/readmodel"
)

// DB is what the home feed needs from PostgreSQL; *pgxpool.Pool has it.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Config is one inbox version's: its keys, the feed policy it is built
// by, and the sizes of the owner's PostgreSQL reads. Zero fields take
// their defaults.
type Config struct {
	// Keys names the inboxes (their version: Keys.Versions).
	Keys readmodel.Keys
	// Policy is the feed policy of the version (defaulted here).
	Policy readmodel.Policy
	// BackfillPosts is how many of a followee's newest posts a follow
	// copies (default 20).
	BackfillPosts int
	// FollowerPage is the page size of the follower queries (default
	// 1000).
	FollowerPage int
}

// Manager owns the home feed: every rule that decides what an inbox holds
// (who is pushed a post, what a follow copies and an unfollow removes,
// what a deletion reclaims, how a cold inbox is rebuilt and a reader
// marked active) and every write of it, by the projectors, the query side
// and `feed rebuild` alike. Safe for concurrent use.
type Manager struct {
	keys  readmodel.Keys
	pol   readmodel.Policy
	cfg   Config
	inbox Inboxes
	pg    DB
	rdb   redis.UniversalClient
	// followUps carries the pushes' follow-ups to the next push's
	// pipeline (FollowUps).
	followUps *FollowUps
}

// New returns the home feed of cfg's inbox version over PostgreSQL (the
// source of truth) and Redis.
func New(cfg Config, pg DB, rdb redis.UniversalClient) *Manager {
	cfg.Policy = cfg.Policy.WithDefaults()
	cfg.BackfillPosts = cmp.Or(cfg.BackfillPosts, 20)
	cfg.FollowerPage = cmp.Or(cfg.FollowerPage, 1000)
	return &Manager{keys: cfg.Keys, pol: cfg.Policy, cfg: cfg, inbox: NewInboxes(cfg.Keys, cfg.Policy), pg: pg, rdb: rdb,
		followUps: NewFollowUps()}
}

// Inboxes is the inboxes' Redis operations, for the reads the query side
// queues on its own pipelines (QueueRead; its read cache names the keys:
// Keys, AppendBufferKey).
func (m *Manager) Inboxes() Inboxes { return m.inbox }

// Policy is the feed policy the manager applies (defaulted).
func (m *Manager) Policy() readmodel.Policy { return m.pol }

// The rules in PostgreSQL.
const (
	// activeFollowersSQL pages through an author's followers who read
	// their feed within InactiveAfter ($3), never one who mutes the author
	// (mutes are keyed by the muted account, so they sit in the author's
	// partition in commit order with its posts and follows). The second
	// column says whether the follower was last seen longer ago than the
	// inbox TTL ($5): that follower's inbox has expired, and a push would
	// recreate it, so its buffer gets the TTL in the push's pipeline.
	activeFollowersSQL = `SELECT f.follower_id, a.last_seen_at <= now() - $5::interval FROM follows f
JOIN user_activity a ON a.user_id = f.follower_id
WHERE f.followee_id = $1 AND f.follower_id > $2 AND a.last_seen_at > now() - $3::interval
  AND NOT EXISTS (SELECT 1 FROM mutes m WHERE m.muted_id = f.followee_id AND m.muter_id = f.follower_id)
ORDER BY f.follower_id LIMIT $4`
	allFollowersSQL = `SELECT follower_id, false FROM follows
WHERE followee_id = $1 AND follower_id > $2 AND $3::interval IS NOT NULL AND $5::interval IS NOT NULL
ORDER BY follower_id LIMIT $4`
	followsNowSQL = `SELECT EXISTS (SELECT 1 FROM follows WHERE follower_id = $1 AND followee_id = $2)`
	isActiveSQL   = `SELECT EXISTS (SELECT 1 FROM user_activity WHERE user_id = $1 AND last_seen_at > now() - $2::interval)`
	// newestPostsSQL reads one more than a backfill copies, to know
	// whether more posts exist below the copied ones.
	// The author's live reposts are entries of theirs as posts are (each
	// with its own id and time), so a backfill copies both.
	newestPostsSQL = `SELECT id, created_at FROM (
  (SELECT id, created_at FROM posts WHERE author_id = $1 AND NOT deleted ORDER BY created_at DESC, id DESC LIMIT $2)
  UNION ALL
  (SELECT id, created_at FROM reposts WHERE user_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2)) e
ORDER BY created_at DESC, id DESC LIMIT $2`
	// reposterRepostsAmongSQL picks the reposter's live reposts out of an
	// inbox's members (RemoveAuthor; undone ones are reclaimed by their
	// unrepost).
	reposterRepostsAmongSQL = `SELECT id FROM reposts WHERE user_id = $1 AND id = ANY($2::bigint[])`
	// authorPostsAmongSQL picks the author's posts out of an inbox's
	// members, deleted ones included: they may still sit in inboxes. It
	// scans the author's range of posts_author_time_idx (index-only) and
	// filters by the members: `id + 0` keeps posts_pkey out of the plan.
	// Its cost is the author's post count in index entries (a few hundred
	// per leaf page), below the members' probes for any author under
	// about 100,000 posts.
	// The generic plan a prepared statement settles on estimates a few
	// elements for the array and would probe posts_pkey once per member
	// instead, up to 500 descents (about 2,000 buffer hits and 1.8 ms
	// against 20-50 hits and 0.2-0.6 ms, EXPLAIN under
	// plan_cache_mode = force_generic_plan; TestAuthorPostsAmongPlan).
	authorPostsAmongSQL = `SELECT id FROM posts WHERE author_id = $1 AND id + 0 = ANY($2::bigint[])`
	// rebuildSQL is a cold rebuild's snapshot: the newest $2 entries
	// (non-deleted posts and live reposts) of the user's followees (less
	// those the user mutes) and of the user.
	rebuildSQL = `
SELECT p.id, p.created_at
FROM (SELECT f.followee_id AS author_id FROM follows f WHERE f.follower_id = $1
        AND NOT EXISTS (SELECT 1 FROM mutes m WHERE m.muter_id = $1 AND m.muted_id = f.followee_id)
      UNION ALL SELECT $1::bigint) a
CROSS JOIN LATERAL (
    (SELECT id, created_at FROM posts
     WHERE posts.author_id = a.author_id AND NOT deleted
     ORDER BY created_at DESC, id DESC
     LIMIT $2)
    UNION ALL
    (SELECT id, created_at FROM reposts
     WHERE reposts.user_id = a.author_id
     ORDER BY created_at DESC, id DESC
     LIMIT $2)) p
ORDER BY p.created_at DESC, p.id DESC
LIMIT $2`
	markActiveSQL = `INSERT INTO user_activity (user_id, last_seen_at) VALUES ($1, now())
ON CONFLICT (user_id) DO UPDATE SET last_seen_at = GREATEST(user_activity.last_seen_at, excluded.last_seen_at)`
)

// AuthorPostsAmongSQL is RemoveAuthor's query, for its plan's test.
const AuthorPostsAmongSQL = authorPostsAmongSQL

// CelebrityAt reports whether author is a celebrity at the event at
// position carrying their follower count followers, the push decision: a
// celebrity's posts are not pushed (readers pull their timeline), anyone
// else's are pushed to their active followers. Outside the celebrity band
// the count decides alone; inside it the log does (readmodel.CelebrityBefore,
// one indexed read; logRead says it was made). The followers projector
// keeps the celebrity set by the same rule.
func (m *Manager) CelebrityAt(ctx context.Context, author, followers, position int64) (celebrity, logRead bool, err error) {
	if celeb, ok := m.pol.Decided(followers); ok {
		return celeb, false, nil
	}
	celeb, err := readmodel.CelebrityBefore(ctx, m.pg, m.pol, author, position)
	return celeb, true, err
}

// CrossedDown reports whether an Unfollowed at position, which leaves the
// author followers followers, took them out of the celebrities: their
// recent posts were never pushed, so their active followers get a
// backfill (CrossDown). Without a band the count alone says it (the count
// before was the threshold); with one, only when the author was a
// celebrity before the event, as the log says (an author that came up
// into the band from below and went back never was).
func (m *Manager) CrossedDown(ctx context.Context, author, followers, position int64) (bool, error) {
	if !m.pol.CrossedDown(followers) {
		return false, nil
	}
	if m.pol.CelebrityBand == 0 {
		return true, nil
	}
	return readmodel.CelebrityBefore(ctx, m.pg, m.pol, author, position)
}

// EachFollowerPage calls fn with keyset-paged batches of the author's
// followers, FollowerPage at a time: the active ones who do not mute the
// author (those a post is pushed to) when active is true, else all of
// them; and, per follower, whether their inbox is past its TTL (see
// activeFollowersSQL).
func (m *Manager) EachFollowerPage(ctx context.Context, author int64, active bool, fn func(ids []int64, expiring []bool) error) error {
	q := allFollowersSQL
	if active {
		q = activeFollowersSQL
	}
	var last int64
	for {
		rows, err := m.pg.Query(ctx, q, author, last, m.pol.InactiveAfter, m.cfg.FollowerPage, m.pol.InboxTTL())
		if err != nil {
			return fmt.Errorf("query followers of %d: %w", author, err)
		}
		ids := make([]int64, 0, m.cfg.FollowerPage)
		expiring := make([]bool, 0, m.cfg.FollowerPage)
		for rows.Next() {
			var id int64
			var exp bool
			if err := rows.Scan(&id, &exp); err != nil {
				rows.Close()
				return fmt.Errorf("scan follower: %w", err)
			}
			ids = append(ids, id)
			expiring = append(expiring, exp)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("query followers of %d: %w", author, err)
		}
		if len(ids) > 0 {
			if err := fn(ids, expiring); err != nil {
				return err
			}
			last = ids[len(ids)-1]
		}
		if len(ids) < m.cfg.FollowerPage {
			return nil
		}
	}
}

// Push writes post into the inboxes of users (a page of the author's
// active followers), in one pipeline that also runs the follow-ups of
// earlier pushes (Inboxes.PushCarried). The buffer of a user whose
// expiring[i] is set (the inbox is past its TTL: the buffer may be all of
// it) gets its TTL in the same pipeline. A failed call can be retried
// whole.
func (m *Manager) Push(ctx context.Context, post int64, users []int64, expiring []bool) error {
	if err := m.inbox.PushCarried(ctx, m.rdb, users, expiring, m.inbox.NewPush(post), m.followUps); err != nil {
		return fmt.Errorf("push post %d: %w", post, err)
	}
	return nil
}

// Reach is what the fan-out filters need to know of an entry pushed to
// an author's followers: its author (the reposter of a repost), the
// author of the post it replies to (0: no reply) and, for a repost, the
// original's author (0: a post).
type Reach struct {
	Author, ReplyToAuthor, RepostOfAuthor int64
}

// filtered reports whether a push of the entry needs to know which
// followers follow another account: a reply to someone else's post, or
// a repost.
func (r Reach) filtered() (other int64, ok bool) {
	switch {
	case r.RepostOfAuthor != 0:
		return r.RepostOfAuthor, true
	case r.ReplyToAuthor != 0 && r.ReplyToAuthor != r.Author:
		return r.ReplyToAuthor, true
	}
	return 0, false
}

// followersAmongSQL picks, of the users $2, those who follow $1 (the
// follows primary key, one probe each).
const followersAmongSQL = `SELECT follower_id FROM follows WHERE followee_id = $1 AND follower_id = ANY($2::bigint[])`

// Filter keeps, of users (a page of the author's active followers) and
// their expiring flags, those the entry can ever show to: a reply only to
// followers who pass the reply rule (ReplyReaches), a repost only to
// followers who are not the original's author and do not follow them
// (RepostReaches: else the original shows as itself). Whom a follower
// follows is PostgreSQL's answer now, one query per page. The filters are
// optimisations: the read applies the rules in full.
func (m *Manager) Filter(ctx context.Context, r Reach, users []int64, expiring []bool) ([]int64, []bool, error) {
	other, ok := r.filtered()
	if !ok || len(users) == 0 {
		return users, expiring, nil
	}
	rows, err := m.pg.Query(ctx, followersAmongSQL, other, users)
	if err != nil {
		return nil, nil, fmt.Errorf("query followers of %d among a page: %w", other, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, nil, fmt.Errorf("query followers of %d among a page: %w", other, err)
	}
	follows := make(map[int64]bool, len(ids))
	for _, id := range ids {
		follows[id] = true
	}
	keep := make([]int64, 0, len(users))
	keepExp := make([]bool, 0, len(users))
	for i, u := range users {
		var reaches bool
		if r.RepostOfAuthor != 0 {
			reaches = RepostReaches(u, r.RepostOfAuthor, follows[u])
		} else {
			reaches = ReplyReaches(u, r.Author, r.ReplyToAuthor, follows[u])
		}
		if reaches {
			keep = append(keep, u)
			keepExp = append(keepExp, expiring[i])
		}
	}
	return keep, keepExp, nil
}

// PushEntry is Push of an entry (a post or a repost's own id) after
// Filter: it writes entry into the inboxes of those of users it can show
// to, and returns how many.
func (m *Manager) PushEntry(ctx context.Context, entry int64, r Reach, users []int64, expiring []bool) (int, error) {
	users, expiring, err := m.Filter(ctx, r, users, expiring)
	if err != nil || len(users) == 0 {
		return 0, err
	}
	return len(users), m.Push(ctx, entry, users, expiring)
}

// Backfill is what a follow copies: the followee's newest posts, and the
// floor to raise to when the followee has more posts than were copied.
type Backfill struct {
	posts []readmodel.Entry
	floor int64 // oldest copied score, when raise
	raise bool  // more posts exist than were copied
}

// LoadBackfill reads the author's BackfillPosts newest non-deleted posts
// from PostgreSQL, the source of truth (not the timelines read model: that
// is another consumer group and may lag behind this one).
func (m *Manager) LoadBackfill(ctx context.Context, author int64) (Backfill, error) {
	rows, err := m.pg.Query(ctx, newestPostsSQL, author, m.cfg.BackfillPosts+1)
	if err != nil {
		return Backfill{}, fmt.Errorf("query posts of %d: %w", author, err)
	}
	defer rows.Close()
	var bf Backfill
	var scores []int64
	for rows.Next() {
		var id int64
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			return Backfill{}, fmt.Errorf("scan post: %w", err)
		}
		scores = append(scores, at.UnixMilli())
		if len(scores) <= m.cfg.BackfillPosts {
			bf.posts = append(bf.posts, readmodel.Entry{ID: id, Ms: at.UnixMilli()})
		}
	}
	if err := rows.Err(); err != nil {
		return Backfill{}, fmt.Errorf("query posts of %d: %w", author, err)
	}
	if len(scores) > m.cfg.BackfillPosts {
		bf.floor, bf.raise = scores[m.cfg.BackfillPosts-1], true
	}
	return bf, nil
}

// WriteBackfill copies bf into the inboxes of users, in one pipeline: the
// merge with the posts and the floor raise, which also folds in the buffer
// and trims. With checkActive, inactive users are skipped (no inbox is
// created for them). It returns the ids added. The floor is raised
// whenever the author has more posts than were copied: that only claims
// less completeness (readers continue in PostgreSQL), and makes the result
// a function of the events alone.
func (m *Manager) WriteBackfill(ctx context.Context, users []int64, bf Backfill, checkActive bool) (int, error) {
	if len(bf.posts) == 0 {
		return 0, nil
	}
	targets := make([]int64, 0, len(users))
	for _, u := range users {
		if checkActive {
			var ok bool
			if err := m.pg.QueryRow(ctx, isActiveSQL, u, m.pol.InactiveAfter).Scan(&ok); err != nil {
				return 0, fmt.Errorf("query activity of %d: %w", u, err)
			}
			if !ok {
				continue
			}
		}
		targets = append(targets, u)
	}
	if len(targets) == 0 {
		return 0, nil
	}
	cmds := make([]*redis.Cmd, len(targets))
	err := exec(ctx, m.rdb, func(pipe redis.Pipeliner) {
		for i, u := range targets {
			cmds[i] = m.inbox.QueueBackfill(ctx, pipe, u, bf.posts, bf.floor, bf.raise)
		}
	})
	if err != nil {
		return 0, fmt.Errorf("backfill inboxes: %w", err)
	}
	added := 0
	for _, c := range cmds {
		if r, err := c.Int64Slice(); err == nil && len(r) > 0 {
			added += int(r[0])
		}
	}
	return added, nil
}

// Followed backfills the author's newest posts into the follower's inbox
// (a follow, or an unmute of a followed account: the fan-out skipped the
// muter meanwhile), unless the follower is inactive. The caller has
// decided the author is pushed (CelebrityAt). It returns the ids added.
func (m *Manager) Followed(ctx context.Context, follower, author int64) (int, error) {
	bf, err := m.LoadBackfill(ctx, author)
	if err != nil {
		return 0, err
	}
	return m.WriteBackfill(ctx, []int64{follower}, bf, true)
}

// CrossDown handles an author falling out of the celebrities: their recent
// posts were never pushed, so every active follower gets a backfill,
// exactly as on a follow. Once the last follower has it, the crossing
// (order, the event's place in the log) is recorded as backfilled: until
// then the query side pulls the author as a celebrity, so the posts are
// never in neither place. A crash before the record leaves the pull on;
// the redelivery backfills again (a merge of present ids changes nothing)
// and records it. It returns the ids added.
func (m *Manager) CrossDown(ctx context.Context, author int64, order readmodel.Order) (int, error) {
	bf, err := m.LoadBackfill(ctx, author)
	if err != nil {
		return 0, err
	}
	added := 0
	err = m.EachFollowerPage(ctx, author, true, func(ids []int64, _ []bool) error {
		n, err := m.WriteBackfill(ctx, ids, bf, false)
		added += n
		return err
	})
	if err != nil {
		return added, err
	}
	return added, readmodel.NewBackfilled(m.keys).Record(ctx, m.rdb, map[string]string{strconv.FormatInt(author, 10): string(order)})
}

// Unfollowed removes the author's posts from the follower's inbox, unless
// the follower follows the author again in PostgreSQL now: an unfollow
// that a newer follow has undone removes nothing, since the follow's
// backfill put (or will put) the posts back and removing them after it
// would lose them. In order this changes nothing (the follow comes later
// and backfills); it matters when a projector instance applies the
// unfollow late, after its partition moved to another that applied the
// follow already.
func (m *Manager) Unfollowed(ctx context.Context, follower, author int64) error {
	var again bool
	if err := m.pg.QueryRow(ctx, followsNowSQL, follower, author).Scan(&again); err != nil {
		return fmt.Errorf("query follow %d -> %d: %w", follower, author, err)
	}
	if again {
		return nil
	}
	return m.RemoveAuthor(ctx, follower, author)
}

// RemoveAuthor removes the author's posts and live reposts from the
// follower's inbox (an unfollow, a mute): the members PostgreSQL says are
// the author's (deleted ones included), whatever their score. It asks about the inbox's own
// members rather than the author's newest posts: an author who posted more
// as a celebrity (pulled, never pushed) than the inbox holds would
// otherwise crowd the pushed ones out, and they would stay. The floor is
// left alone (what is removed must not be shown anyway); reads hide the
// author at once through the following set.
func (m *Manager) RemoveAuthor(ctx context.Context, follower, author int64) error {
	ids, err := m.inbox.Posts(ctx, m.rdb, follower)
	if err != nil {
		return fmt.Errorf("read inbox of %d: %w", follower, err)
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := m.pg.Query(ctx, authorPostsAmongSQL, author, ids)
	if err != nil {
		return fmt.Errorf("query posts of %d: %w", author, err)
	}
	members, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("query posts of %d: %w", author, err)
	}
	rows, err = m.pg.Query(ctx, reposterRepostsAmongSQL, author, ids)
	if err != nil {
		return fmt.Errorf("query reposts of %d: %w", author, err)
	}
	reposts, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("query reposts of %d: %w", author, err)
	}
	members = append(members, reposts...)
	if err := m.inbox.Remove(ctx, m.rdb, follower, members); err != nil {
		return fmt.Errorf("remove posts of %d from inbox of %d: %w", author, follower, err)
	}
	return nil
}

// RemoveDeleted removes a deleted post from the inboxes of users (a page
// of the author's followers, active or not: a removal never creates a
// key), in one pipeline. Readers already hide it at once through the post
// cache; this only reclaims the entries.
func (m *Manager) RemoveDeleted(ctx context.Context, post int64, users []int64) error {
	err := exec(ctx, m.rdb, func(pipe redis.Pipeliner) {
		for _, u := range users {
			m.inbox.QueueRemove(ctx, pipe, u, []int64{post})
		}
	})
	if err != nil {
		return fmt.Errorf("remove deleted post %d from inboxes: %w", post, err)
	}
	return nil
}

// RebuildUser writes the newest InboxMax posts of user's followees and of
// user into user's inbox, then ~floor (when cut) and ~built: the cold
// path, for an inbox a read found not built (Inboxes.WriteRebuilt).
//
// ORDER MATTERS. The user is marked active (committed) BEFORE the snapshot
// is read. A post committed after the snapshot is then pushed by the inbox
// projector, because the projector checks activity after that post's
// commit, which is after our activity write. Had we read first and marked
// later, a post committing in between would be missed by both: not in our
// snapshot, and skipped by fan-out as addressed to an inactive user.
//
// The write only adds, never deletes: a push that landed between the
// snapshot and this write must survive. Entries already there (stale
// pushes) are either real posts of the user's followees, or hidden at read
// (deleted, unfollowed), or at or below the floor. It also sets the inbox
// TTL, so no built inbox lives longer than that after the activity write
// (MarkActive).
func (m *Manager) RebuildUser(ctx context.Context, user int64) error {
	if err := m.markActive(ctx, user); err != nil {
		return err
	}
	rows, err := m.pg.Query(ctx, rebuildSQL, user, m.pol.InboxMax)
	if err != nil {
		return fmt.Errorf("read inbox snapshot of %d: %w", user, err)
	}
	posts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (readmodel.Entry, error) {
		var e readmodel.Entry
		var at time.Time
		err := r.Scan(&e.ID, &at)
		e.Ms = at.UnixMilli()
		return e, err
	})
	if err != nil {
		return fmt.Errorf("read inbox snapshot of %d: %w", user, err)
	}
	if err := m.inbox.WriteRebuilt(ctx, m.rdb, user, posts); err != nil {
		return fmt.Errorf("write rebuilt inbox of %d: %w", user, err)
	}
	return nil
}

// ErrExpiryNotMoved is MarkActive's error when the activity was written
// but the inbox's expiry was not moved: the inbox keeps its earlier,
// sooner expiry, which is safe (it is only rebuilt earlier).
var ErrExpiryNotMoved = errors.New("inbox expiry not moved")

// MarkActive records that user read their feed now, THEN moves their
// inbox's expiry to the inbox TTL from now (Policy.InboxTTL). In that
// order: an expiry moved without the activity write (which may fail)
// could outlive the projectors' pushes, which stop InactiveAfter after the
// last activity. An expiry on a missing inbox does nothing: the cold read
// that follows rebuilds it with the TTL.
func (m *Manager) MarkActive(ctx context.Context, user int64) error {
	if err := m.markActive(ctx, user); err != nil {
		return err
	}
	if err := m.inbox.Touch(ctx, m.rdb, user); err != nil {
		return fmt.Errorf("%w: %w", ErrExpiryNotMoved, err)
	}
	return nil
}

// markActive writes user's activity row.
func (m *Manager) markActive(ctx context.Context, user int64) error {
	if _, err := m.pg.Exec(ctx, markActiveSQL, user); err != nil {
		return fmt.Errorf("mark user %d active: %w", user, err)
	}
	return nil
}

// ErrRemovedLayout means the active inbox version was built in the
// sorted-set layout (`feed:{u}`) of earlier releases, which this one
// neither reads nor writes.
var ErrRemovedLayout = errors.New("inbox version in the removed sorted-set layout")

// Layout is what the inbox version's record says of this layout
// (readmodel.VersionRecord.InboxLayout; a switch records it).
const Layout = "packed"

// CheckVersion reports an inbox version record that an earlier release
// built in the removed sorted-set layout: the error says to run `feed
// rebuild inbox`, which builds the next version from the log in this
// layout (docs/rebuild.md, "Upgrading from sorted-set inboxes"). Any
// other record is nil.
func CheckVersion(r readmodel.VersionRecord) error {
	if r.Projection != readmodel.ProjectionInbox || r.InboxLayout == "" || r.InboxLayout == Layout {
		return nil
	}
	return fmt.Errorf("the active inbox version %d was built in inbox layout %q, which this release no longer reads or writes: "+
		"run `feed rebuild inbox` (it builds version %d from the log in the packed layout while the running release keeps serving): %w",
		r.Version, r.InboxLayout, r.Version+1, ErrRemovedLayout)
}

// CheckVersions is CheckVersion of the active inbox version's record in
// PostgreSQL.
func CheckVersions(ctx context.Context, db readmodel.VersionQuerier) error {
	recs, err := readmodel.LoadVersionRecords(ctx, db)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if err := CheckVersion(r); err != nil {
			return err
		}
	}
	return nil
}
