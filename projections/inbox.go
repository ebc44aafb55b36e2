package projections

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
)

// Inbox applies the events to the home feed, whose owner (homefeed.Manager)
// holds every rule of what an inbox holds: it has the posts of
// non-celebrity authors pushed to their active followers, a follow and a
// downward celebrity crossing backfilled, an author's posts removed on
// unfollow and mute, and deleted posts cleaned out of inboxes. What stays
// here is the delivery: the follower cache and the activity index that
// find a post's push targets without a query per post (followercache.go,
// activity.go), and the bound on fan-out pipelines in flight.
type Inbox struct {
	cfg   Config
	pol   readmodel.Policy
	feed  *homefeed.Manager
	pg    Querier
	rdb   redis.UniversalClient
	m     *Metrics
	cache *followerCache // nil when FollowerCacheRows < 0
	// activity is who of the cached followers is active (activity.go);
	// nil with the cache.
	activity *activityIndex
	// inflight holds a slot per fan-out pipeline in flight (FanoutInflight).
	inflight chan struct{}
	// wakes publishes the live streams' wake-ups (live.go).
	wakes *liveWakes
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
	feed := homefeed.New(homefeed.Config{Keys: cfg.Keys, Policy: cfg.Policy(), BackfillPosts: cfg.BackfillPosts, FollowerPage: cfg.FanoutBatch}, pg, rdb)
	p := &Inbox{cfg: cfg, pol: cfg.Policy(), feed: feed, pg: pg, rdb: rdb, m: m, cache: cache, inflight: make(chan struct{}, cfg.FanoutInflight),
		wakes: newLiveWakes(cfg.Keys, rdb, cfg.OnlineRefresh)}
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
		return p.push(ctx, e.PostID, e.AuthorID)
	case events.PostDeleted:
		return p.feed.EachFollowerPage(ctx, e.AuthorID, false, func(ids []int64, _ []bool) error {
			return p.feed.RemoveDeleted(ctx, e.PostID, ids)
		})
	case events.PostReposted:
		// A repost fans out as a post by the reposter would, decided by
		// the reposter's celebrity status (a celebrity's is pulled from
		// their timeline at read time).
		celeb, err := p.celebrityAt(ctx, e.ReposterID, e.ReposterFollowers, env.Position)
		if err != nil || celeb {
			return err
		}
		return p.push(ctx, e.RepostID, e.ReposterID)
	case events.PostUnreposted:
		// As a deletion of the repost's entry: hidden at read at once by
		// its tombstone, reclaimed from the inboxes here.
		return p.feed.EachFollowerPage(ctx, e.ReposterID, false, func(ids []int64, _ []bool) error {
			return p.feed.RemoveDeleted(ctx, e.RepostID, ids)
		})
	case events.Followed:
		return p.followed(ctx, e.FollowerID, e.FolloweeID, e.FolloweeFollowers, env.Position)
	case events.Unfollowed:
		if err := p.feed.Unfollowed(ctx, e.FollowerID, e.FolloweeID); err != nil {
			return err
		}
		down, err := p.feed.CrossedDown(ctx, e.FolloweeID, e.FolloweeFollowers, env.Position)
		if err != nil || !down {
			return err
		}
		p.m.crossedDown(NameInbox)
		n, err := p.feed.CrossDown(ctx, e.FolloweeID, readmodel.OrderOf(env.CommitLSN, env.Position))
		p.m.entries(NameInbox, n)
		return err
	case events.Muted:
		// The read hides the muted author at once (following:{u}); this
		// only reclaims the entries, as an unfollow does.
		if e.Following {
			return p.feed.RemoveAuthor(ctx, e.MuterID, e.MutedID)
		}
	case events.Unmuted:
		// The author's posts of the mute's time were not pushed to the
		// muter (the fan-out skips muters): bring the recent ones back as
		// a follow does.
		if e.Following {
			return p.followed(ctx, e.MuterID, e.MutedID, e.MutedFollowers, env.Position)
		}
	}
	return nil
}

// followed backfills the author's posts into the follower's inbox, unless
// the author is a celebrity at the event (their posts are pulled).
func (p *Inbox) followed(ctx context.Context, follower, author, followers, position int64) error {
	celeb, err := p.celebrityAt(ctx, author, followers, position)
	if err != nil || celeb {
		return err
	}
	n, err := p.feed.Followed(ctx, follower, author)
	p.m.entries(NameInbox, n)
	if err != nil || n == 0 {
		return err
	}
	return p.wakes.wakeUsers(ctx, []int64{follower})
}

// celebrityAt is the home feed's push decision (homefeed.Manager.CelebrityAt),
// counting its reads of the log.
func (p *Inbox) celebrityAt(ctx context.Context, author, followers, position int64) (bool, error) {
	celeb, logRead, err := p.feed.CelebrityAt(ctx, author, followers, position)
	if logRead {
		p.m.bandRead(NameInbox)
	}
	return celeb, err
}

// The follower cache's queries: the conditions of the home feed's active
// followers (homefeed.Manager.EachFollowerPage), as the cache needs them.
const (
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
	// whether their inbox is past its TTL: the conditions of the home
	// feed's active followers, evaluated now.
	recheckSQL = `SELECT t.i, a.last_seen_at, a.last_seen_at <= now() - $3::interval
FROM unnest($1::bigint[]) WITH ORDINALITY t(id, i) JOIN user_activity a ON a.user_id = t.id
WHERE a.last_seen_at > now() - $2::interval`
)

// push fans one post out to the author's active followers: pages of
// FanoutBatch followers, up to FanoutParallel pages in flight at once (so
// Redis stays busy while this handler builds the next pipeline or reads
// PostgreSQL), each page one pipeline of the home feed's push
// (homefeed.Manager.Push: an APPEND per inbox, with the follow-ups of
// earlier pushes). The entries metric counts the APPENDs, redeliveries
// included (the reply does not tell a duplicate, which the merge and the
// readers drop).
//
// Pages write disjoint inboxes, so their order does not matter; the message
// is acknowledged only after every page succeeded (a failed page fails the
// message, which is retried: every command here is idempotent).
//
// A reply or a repost is pushed to every active follower of its author
// like any post: whether it shows is the read's decision (homefeed's
// rules), since a follower's relations may change after the push (see
// homefeed/rules.go).
func (p *Inbox) push(ctx context.Context, entry, author int64) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(p.cfg.FanoutParallel)
	err := p.eachPushPage(gctx, author, func(ids []int64, expiring []bool) error {
		g.Go(func() error { return p.pushPage(gctx, entry, ids, expiring) })
		return nil
	})
	if werr := g.Wait(); werr != nil {
		return werr
	}
	return err
}

// pushPage writes one page of a post's fan-out (see push), holding one of
// the FanoutInflight slots.
func (p *Inbox) pushPage(ctx context.Context, entry int64, ids []int64, expiring []bool) error {
	select {
	case p.inflight <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	err := p.feed.Push(ctx, entry, ids, expiring)
	<-p.inflight
	if err != nil {
		return err
	}
	p.m.entries(NameInbox, len(ids))
	return p.wakes.wakeUsers(ctx, ids)
}

// eachPushPage calls fn with the author's active followers, FanoutBatch at
// a time, and per follower whether their inbox is past its TTL. With a
// delivery in ctx (the runner's) it uses the follower cache; otherwise, or
// for an author with too many followers to cache, it pages through the
// home feed's follower query (homefeed.Manager.EachFollowerPage).
func (p *Inbox) eachPushPage(ctx context.Context, author int64, fn func(ids []int64, expiring []bool) error) error {
	d, ok := deliveryFrom(ctx)
	if !ok || p.cache == nil {
		p.m.followerList("uncached")
		return p.feed.EachFollowerPage(ctx, author, true, fn)
	}
	ids, expiring, ok, err := p.cachedTargets(ctx, d, author)
	if err != nil {
		return err
	}
	if !ok {
		p.m.followerList("uncached")
		return p.feed.EachFollowerPage(ctx, author, true, fn)
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
// whether their inbox is past its TTL: the answer of the home feed's
// follower query (homefeed.Manager.EachFollowerPage),
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

// BuildInboxes writes the inbox of every user whose inbox lives, for
// `feed rebuild inbox`: the home feed's bulk build (homefeed.Manager.Build),
// BuildWorkers chunks at once. It returns the number of active users.
func (p *Inbox) BuildInboxes(ctx context.Context, db Beginner, progress BuildProgress) (int64, error) {
	if progress == nil {
		progress = noProgress{}
	}
	return p.feed.Build(ctx, db, progress, BuildWorkers)
}
