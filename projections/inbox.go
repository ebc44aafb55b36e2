package projections

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/readmodel"
)

// Inbox projects home feeds (packed inboxes, readmodel.PackedInboxes): it pushes the posts of
// non-celebrity authors to their active followers, backfills on follow and
// on the downward celebrity crossing, removes an author's posts on unfollow,
// and cleans deleted posts out of inboxes. Who is a celebrity at an event
// is celebrityAt's answer: the count the event carries, or inside the
// celebrity band the state the log decided before it.
type Inbox struct {
	cfg   Config
	pol   readmodel.Policy
	inbox readmodel.PackedInboxes
	// followUps carries the pushes' follow-ups to the next push's
	// pipeline (readmodel.PackedFollowUps).
	followUps *readmodel.PackedFollowUps
	pg        Querier
	rdb       redis.UniversalClient
	m         *Metrics
	cache     *followerCache // nil when FollowerCacheRows < 0
	// activity is who of the cached followers is active (activity.go);
	// nil with the cache.
	activity *activityIndex
	// inflight holds a slot per fan-out pipeline in flight (FanoutInflight).
	inflight chan struct{}
}

// NewInbox returns the inbox projector. m may be nil.
func NewInbox(cfg Config, pg Querier, rdb redis.UniversalClient, m *Metrics) (*Inbox, error) {
	if pg == nil || rdb == nil {
		return nil, errors.New("new inbox projector: nil PostgreSQL or Redis")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new inbox projector: %w", err)
	}
	// Lists longer than twice the celebrity threshold only come from
	// replays of posts by authors who are celebrities now: not kept.
	cache := newFollowerCache(cfg.FollowerCacheRows, int(min(2*cfg.CelebrityThreshold, math.MaxInt32)))
	p := &Inbox{cfg: cfg, pol: cfg.Policy(), inbox: readmodel.NewPackedInboxes(cfg.Keys, cfg.Policy()), followUps: readmodel.NewPackedFollowUps(),
		pg: pg, rdb: rdb, m: m, cache: cache, inflight: make(chan struct{}, cfg.FanoutInflight)}
	if cache != nil {
		p.activity = newActivityIndex(cfg.FollowerCacheRows)
	}
	return p, nil
}

// Name implements Projector.
func (*Inbox) Name() string { return NameInbox }

// Group implements Projector.
func (p *Inbox) Group() string { return GroupFor(NameInbox, p.cfg.Keys.Version(NameInbox)) }

// Apply implements Projector.
func (p *Inbox) Apply(ctx context.Context, env events.Envelope, ev events.Event) error {
	if d, ok := deliveryFrom(ctx); ok {
		p.cache.observe(d)
	}
	// First, before anything can fail: a poisoned follow event changes
	// the cached list too (followercache.go).
	switch e := ev.(type) {
	case events.Followed:
		p.cache.change(e.FolloweeID, e.FollowerID, false, true)
	case events.Unfollowed:
		p.cache.change(e.FolloweeID, e.FollowerID, false, false)
	case events.Muted:
		p.cache.change(e.MutedID, e.MuterID, true, true)
	case events.Unmuted:
		p.cache.change(e.MutedID, e.MuterID, true, false)
	}
	switch e := ev.(type) {
	case events.PostCreated:
		celeb, err := p.celebrityAt(ctx, e.AuthorID, e.AuthorFollowers, env.Position)
		if err != nil || celeb {
			return err // a celebrity's post is pulled at read time from the author's timeline
		}
		return p.push(ctx, e)
	case events.PostDeleted:
		return p.cleanDeleted(ctx, e)
	case events.Followed:
		celeb, err := p.celebrityAt(ctx, e.FolloweeID, e.FolloweeFollowers, env.Position)
		if err != nil || celeb {
			return err // a celebrity's posts are pulled, not pushed
		}
		bf, err := p.loadBackfill(ctx, e.FolloweeID)
		if err != nil {
			return err
		}
		return p.backfill(ctx, []int64{e.FollowerID}, bf, true)
	case events.Unfollowed:
		// An unfollow that a newer follow has undone removes nothing: the
		// follow's backfill put (or will put) the author's posts back, and
		// removing them after it would lose them. In order this changes
		// nothing (the follow comes later and backfills); it matters when
		// a projector instance applies the unfollow late, after its
		// partition moved to another that applied the follow already.
		again, err := p.followsNow(ctx, e.FollowerID, e.FolloweeID)
		if err != nil {
			return err
		}
		if !again {
			if err := p.removeAuthor(ctx, e.FollowerID, e.FolloweeID); err != nil {
				return err
			}
		}
		if p.pol.CrossedDown(e.FolloweeFollowers) {
			was := true // without a band, the count before was the threshold
			if p.pol.CelebrityBand > 0 {
				var err error
				if was, err = readmodel.CelebrityBefore(ctx, p.pg, p.pol, e.FolloweeID, env.Position); err != nil {
					return err
				}
			}
			if was {
				return p.crossDown(ctx, e.FolloweeID, readmodel.OrderOf(env.CommitLSN, env.Position))
			}
		}
	case events.Muted:
		// The read hides the muted author at once (following:{u}); this
		// only reclaims the entries, as an unfollow does.
		if e.Following {
			return p.removeAuthor(ctx, e.MuterID, e.MutedID)
		}
	case events.Unmuted:
		// The author's posts of the mute's time were not pushed to the
		// muter (the fan-out skips muters): bring the recent ones back as
		// a follow does.
		if !e.Following {
			return nil
		}
		celeb, err := p.celebrityAt(ctx, e.MutedID, e.MutedFollowers, env.Position)
		if err != nil || celeb {
			return err
		}
		bf, err := p.loadBackfill(ctx, e.MutedID)
		if err != nil {
			return err
		}
		return p.backfill(ctx, []int64{e.MuterID}, bf, true)
	}
	return nil
}

// celebrityAt reports whether author is a celebrity at the event at
// position carrying their follower count followers: by the count alone
// outside the celebrity band, by the log inside it (readmodel.CelebrityAt,
// one indexed read; the followers projector's set follows the same rule).
func (p *Inbox) celebrityAt(ctx context.Context, author, followers, position int64) (bool, error) {
	if celeb, ok := p.pol.Decided(followers); ok {
		return celeb, nil
	}
	p.m.bandRead(NameInbox)
	return readmodel.CelebrityBefore(ctx, p.pg, p.pol, author, position)
}

// Follower queries. The active one is a keyset-paged query: only
// users who read their feed within InactiveAfter get pushes, and never a
// follower who mutes the author (mutes are keyed by the muted account, so
// they sit in the author's partition in commit order with its posts and
// follows, as the follower cache needs). Its second
// column says whether the follower was last seen longer ago than the inbox
// TTL (InactiveAfter minus InboxTTLMargin): that follower's inbox has
// expired, and a push would recreate it, so its buffer gets the TTL in the
// push's pipeline.
const (
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
	// newestPostsSQL reads one more than it copies, to know whether more
	// posts exist below the copied ones.
	newestPostsSQL = `SELECT id, created_at FROM posts WHERE author_id = $1 AND NOT deleted
ORDER BY created_at DESC, id DESC LIMIT $2`
	// followerIDsSQL loads an author's list for the cache: the ids of
	// every follower (an index-only scan of follows_followee_idx) and of
	// every account that mutes the author (of mutes_muted_idx), each one
	// more than kept, as two int8[] in id order, and PostgreSQL's clock.
	// One row instead of a row per follower: PostgreSQL sends and pgx
	// decodes one message (BenchmarkFollowerTargets, "rows" against
	// "index"). The muters are kept apart, not anti-joined, so that the
	// author's follow and mute events can be applied to the list as they
	// come (followercache.go). Who of the followers is active comes from
	// the activity index (activity.go).
	followerIDsSQL = `SELECT ARRAY(SELECT follower_id FROM follows WHERE followee_id = $1 ORDER BY follower_id LIMIT $2),
  ARRAY(SELECT muter_id FROM mutes WHERE muted_id = $1 ORDER BY muter_id LIMIT $2), now()`
	// recheckSQL asks about the cached followers the cache cannot decide:
	// which of them ($1, by ordinal) are active, their last_seen_at, and
	// whether their inbox is past its TTL: the conditions of
	// activeFollowersSQL, evaluated now.
	recheckSQL = `SELECT t.i, a.last_seen_at, a.last_seen_at <= now() - $3::interval
FROM unnest($1::bigint[]) WITH ORDINALITY t(id, i) JOIN user_activity a ON a.user_id = t.id
WHERE a.last_seen_at > now() - $2::interval`
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
)

// eachFollowerPage calls fn with keyset-paged batches of the author's
// followers (active ones only when active is true) and, per follower,
// whether their inbox is past its TTL (see activeFollowersSQL).
func (p *Inbox) eachFollowerPage(ctx context.Context, author int64, active bool, fn func(ids []int64, expiring []bool) error) error {
	q := allFollowersSQL
	if active {
		q = activeFollowersSQL
	}
	var last int64
	for {
		rows, err := p.pg.Query(ctx, q, author, last, p.cfg.InactiveAfter, p.cfg.FanoutBatch, p.cfg.inboxTTL())
		if err != nil {
			return fmt.Errorf("query followers of %d: %w", author, err)
		}
		ids := make([]int64, 0, p.cfg.FanoutBatch)
		expiring := make([]bool, 0, p.cfg.FanoutBatch)
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
		if len(ids) < p.cfg.FanoutBatch {
			return nil
		}
	}
}

// push fans one post out to the author's active followers: pages of
// FanoutBatch followers, up to FanoutParallel pages in flight at once (so
// Redis stays busy while this handler builds the next pipeline or reads
// PostgreSQL), each page one pipeline: an APPEND per inbox, with the
// follow-ups earlier pushes' replies asked for (a buffer's fallback TTL,
// the merge with its trim), leaving those of this push's replies to the
// next push (readmodel.PackedInboxes.PushCarried). An expiring follower's
// buffer (the inbox may be gone: the buffer is then all of it) gets its
// TTL in the same pipeline, and the merge gives the sealed string the TTL
// when it has none. The entries metric counts the APPENDs, redeliveries
// included (the reply does not tell a duplicate, which the merge and the
// readers drop).
//
// Pages write disjoint inboxes, so their order does not matter; the message
// is acknowledged only after every page succeeded (a failed page fails the
// message, which is retried: every command here is idempotent).
func (p *Inbox) push(ctx context.Context, e events.PostCreated) error {
	pp := p.inbox.NewPush(e.PostID)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(p.cfg.FanoutParallel)
	err := p.eachPushPage(gctx, e.AuthorID, func(ids []int64, expiring []bool) error {
		g.Go(func() error { return p.pushPage(gctx, e.PostID, pp, ids, expiring) })
		return nil
	})
	if werr := g.Wait(); werr != nil {
		return werr
	}
	return err
}

// pushPage writes one page of a post's fan-out (see push).
func (p *Inbox) pushPage(ctx context.Context, post int64, pp readmodel.PackedPush, ids []int64, expiring []bool) error {
	select {
	case p.inflight <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	err := p.inbox.PushCarried(ctx, p.rdb, ids, expiring, pp, p.followUps)
	<-p.inflight
	if err != nil {
		return fmt.Errorf("push post %d: %w", post, err)
	}
	p.m.entries(NameInbox, len(ids))
	return nil
}

// eachPushPage calls fn with the author's active followers, FanoutBatch at
// a time, and per follower whether their inbox is past its TTL. With a
// delivery in ctx (the runner's) it uses the follower cache; otherwise, or
// for an author with too many followers to cache, it pages through
// activeFollowersSQL.
func (p *Inbox) eachPushPage(ctx context.Context, author int64, fn func(ids []int64, expiring []bool) error) error {
	d, ok := deliveryFrom(ctx)
	if !ok || p.cache == nil {
		p.m.followerList("uncached")
		return p.eachFollowerPage(ctx, author, true, fn)
	}
	ids, expiring, ok, err := p.cachedTargets(ctx, d, author)
	if err != nil {
		return err
	}
	if !ok {
		p.m.followerList("uncached")
		return p.eachFollowerPage(ctx, author, true, fn)
	}
	for lo := 0; lo < len(ids); lo += p.cfg.FanoutBatch {
		hi := min(lo+p.cfg.FanoutBatch, len(ids))
		if err := fn(ids[lo:hi], expiring[lo:hi]); err != nil {
			return err
		}
	}
	return nil
}

// cachedTargets returns the author's active followers and, per follower,
// whether their inbox is past its TTL: the answer of activeFollowersSQL,
// from the follower cache and the activity index (see followercache.go and
// activity.go for why it is the same). Followers whose held last_seen_at
// makes them active and not past the TTL (with clockMargin to spare) are
// taken as they are; the others are asked again (recheckSQL). ok is false
// when the author has too many followers to cache.
func (p *Inbox) cachedTargets(ctx context.Context, d delivery, author int64) (ids []int64, expiring []bool, ok bool, err error) {
	l := p.cache.get(d, author)
	if l == nil {
		if l, err = p.loadFollowers(ctx, author); err != nil || l == nil {
			return nil, nil, false, err
		}
		p.cache.put(d, author, l)
		p.m.followerList("database")
	} else {
		p.m.followerList("cache")
	}
	if err := p.activity.refresh(ctx, p.pg, p.cfg.InactiveAfter); err != nil {
		return nil, nil, false, err
	}
	ttl := p.cfg.inboxTTL()
	fresh := time.Now().Add(l.skew - ttl + clockMargin).UnixMicro()
	targets := l.targets()
	seen := make([]int64, len(targets))
	p.activity.lookup(targets, seen)
	ids = make([]int64, 0, len(targets))
	expiring = make([]bool, 0, len(targets))
	var unsure []int64
	for i, id := range targets {
		if seen[i] > fresh {
			ids = append(ids, id)
			expiring = append(expiring, false)
			continue
		}
		unsure = append(unsure, id)
	}
	if len(unsure) == 0 {
		return ids, expiring, true, nil
	}
	p.activity.rechecked.Add(int64(len(unsure)))
	rows, err := p.pg.Query(ctx, recheckSQL, unsure, p.cfg.InactiveAfter, ttl)
	if err != nil {
		return nil, nil, false, fmt.Errorf("query activity of followers of %d: %w", author, err)
	}
	defer rows.Close()
	var back, backSeen []int64
	for rows.Next() {
		var ord int64
		var at time.Time
		var exp bool
		if err := rows.Scan(&ord, &at, &exp); err != nil {
			return nil, nil, false, fmt.Errorf("scan follower activity: %w", err)
		}
		id := unsure[ord-1]
		// last_seen_at only grows: remember it, so a follower who came
		// back is not asked about again.
		back, backSeen = append(back, id), append(backSeen, at.UnixMicro())
		ids = append(ids, id)
		expiring = append(expiring, exp)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, false, fmt.Errorf("query activity of followers of %d: %w", author, err)
	}
	p.activity.raise(back, backSeen)
	return ids, expiring, true, nil
}

// loadFollowers reads the author's whole follower list for the cache, or
// nil when it is longer than the cache keeps.
func (p *Inbox) loadFollowers(ctx context.Context, author int64) (*followerList, error) {
	before := time.Now()
	p.cache.loads.Add(1)
	var ids, muters []int64
	var pgNow time.Time
	if err := p.pg.QueryRow(ctx, followerIDsSQL, author, p.cache.maxList+1).Scan(&ids, &muters, &pgNow); err != nil {
		return nil, fmt.Errorf("query followers of %d: %w", author, err)
	}
	l := &followerList{ids: ids, muters: muters, loaded: before, skew: pgNow.Sub(before)}
	if l.rows() > p.cache.maxList {
		return nil, nil
	}
	// now() is the query's start, after `before`: the estimate runs
	// ahead, which only sends more followers to recheckSQL.
	return l, nil
}

// backfillSet is what a follow copies: the followee's newest posts, and the
// floor to raise to when the followee has more posts than were copied.
type backfillSet struct {
	posts []readmodel.Entry
	floor int64 // oldest copied score, when raise
	raise bool  // more posts exist than were copied
}

// loadBackfill reads the author's newest non-deleted posts from PostgreSQL,
// the source of truth (not the timelines read model: that is another
// consumer group and may lag behind this one).
func (p *Inbox) loadBackfill(ctx context.Context, author int64) (backfillSet, error) {
	rows, err := p.pg.Query(ctx, newestPostsSQL, author, p.cfg.BackfillPosts+1)
	if err != nil {
		return backfillSet{}, fmt.Errorf("query posts of %d: %w", author, err)
	}
	defer rows.Close()
	var bf backfillSet
	var scores []int64
	for rows.Next() {
		var id int64
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			return backfillSet{}, fmt.Errorf("scan post: %w", err)
		}
		scores = append(scores, millis(at))
		if len(scores) <= p.cfg.BackfillPosts {
			bf.posts = append(bf.posts, readmodel.Entry{ID: id, Ms: millis(at)})
		}
	}
	if err := rows.Err(); err != nil {
		return backfillSet{}, fmt.Errorf("query posts of %d: %w", author, err)
	}
	if len(scores) > p.cfg.BackfillPosts {
		bf.floor, bf.raise = scores[p.cfg.BackfillPosts-1], true
	}
	return bf, nil
}

// backfill copies bf into the inboxes of users; with checkActive, inactive
// users are skipped (no inbox is created for them).
func (p *Inbox) backfill(ctx context.Context, users []int64, bf backfillSet, checkActive bool) error {
	if len(bf.posts) == 0 {
		return nil
	}
	targets := make([]int64, 0, len(users))
	for _, u := range users {
		if checkActive {
			var ok bool
			if err := p.pg.QueryRow(ctx, isActiveSQL, u, p.cfg.InactiveAfter).Scan(&ok); err != nil {
				return fmt.Errorf("query activity of %d: %w", u, err)
			}
			if !ok {
				continue
			}
		}
		targets = append(targets, u)
	}
	// The floor is raised whenever the author has more posts than were
	// copied (readmodel.PackedInboxes.QueueBackfill): that only claims less
	// completeness (readers continue in PostgreSQL), and makes the result
	// a function of the events alone.
	if err := p.backfillInboxes(ctx, targets, bf); err != nil {
		return fmt.Errorf("backfill inboxes: %w", err)
	}
	return nil
}

// backfillInboxes copies bf into every user's inbox, in one pipeline: the
// merge script with the posts and the floor raise, which also folds in the
// buffer and trims.
func (p *Inbox) backfillInboxes(ctx context.Context, users []int64, bf backfillSet) error {
	if len(users) == 0 {
		return nil
	}
	cmds := make([]*redis.Cmd, len(users))
	err := readmodel.Exec(ctx, p.rdb, func(pipe redis.Pipeliner) {
		for i, u := range users {
			cmds[i] = p.inbox.QueueBackfill(ctx, pipe, u, bf.posts, bf.floor, bf.raise)
		}
	})
	if err != nil {
		return err
	}
	added := 0
	for _, c := range cmds {
		if r, err := c.Int64Slice(); err == nil && len(r) > 0 {
			added += int(r[0])
		}
	}
	p.m.entries(NameInbox, added)
	return nil
}

// crossDown handles an author falling out of the celebrities (below the
// threshold, or with a band below threshold - band): their recent posts
// were never pushed, so every active follower gets a backfill, exactly as
// on a follow. Once the last follower has it, the crossing (order, the
// event's place in the log) is recorded as backfilled: until then the
// query side pulls the author as a celebrity (readmodel.Celebrities), so
// the posts are never in neither place. A crash before the record leaves
// the pull on; the redelivery backfills again (a merge of present ids
// changes nothing) and records it.
func (p *Inbox) crossDown(ctx context.Context, author int64, order readmodel.Order) error {
	p.m.crossedDown(NameInbox)
	bf, err := p.loadBackfill(ctx, author)
	if err != nil {
		return err
	}
	err = p.eachFollowerPage(ctx, author, true, func(ids []int64, _ []bool) error {
		return p.backfill(ctx, ids, bf, false)
	})
	if err != nil {
		return err
	}
	return readmodel.NewBackfilled(p.cfg.Keys).Record(ctx, p.rdb, map[string]string{strconv.FormatInt(author, 10): string(order)})
}

// followsNow reports whether follower follows author in PostgreSQL now.
func (p *Inbox) followsNow(ctx context.Context, follower, author int64) (bool, error) {
	var ok bool
	if err := p.pg.QueryRow(ctx, followsNowSQL, follower, author).Scan(&ok); err != nil {
		return false, fmt.Errorf("query follow %d -> %d: %w", follower, author, err)
	}
	return ok, nil
}

// removeAuthor removes the author's posts from the follower's inbox: the
// members PostgreSQL says are the author's (deleted ones included), whatever
// their score. It asks about the inbox's own members rather than the
// author's newest posts: an author who posted more as a celebrity (pulled,
// never pushed) than the inbox holds would otherwise crowd the pushed ones
// out, and they would stay. The floor is left alone.
func (p *Inbox) removeAuthor(ctx context.Context, follower, author int64) error {
	ids, err := p.inbox.Posts(ctx, p.rdb, follower)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := p.pg.Query(ctx, authorPostsAmongSQL, author, ids)
	if err != nil {
		return fmt.Errorf("query posts of %d: %w", author, err)
	}
	var members []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("scan post: %w", err)
		}
		members = append(members, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("query posts of %d: %w", author, err)
	}
	if len(members) == 0 {
		return nil
	}
	if err := p.inbox.Remove(ctx, p.rdb, follower, members); err != nil {
		return fmt.Errorf("remove posts of %d from inbox of %d: %w", author, follower, err)
	}
	return nil
}

// cleanDeleted removes a deleted post from every follower's inbox (active or
// not: a removal never creates a key). Readers already hide it at once through
// the post cache; this only reclaims the entries.
func (p *Inbox) cleanDeleted(ctx context.Context, e events.PostDeleted) error {
	return p.eachFollowerPage(ctx, e.AuthorID, false, func(ids []int64, _ []bool) error {
		err := readmodel.Exec(ctx, p.rdb, func(pipe redis.Pipeliner) {
			for _, u := range ids {
				p.inbox.QueueRemove(ctx, pipe, u, []int64{e.PostID})
			}
		})
		if err != nil {
			return fmt.Errorf("remove deleted post %d from inboxes: %w", e.PostID, err)
		}
		return nil
	})
}
