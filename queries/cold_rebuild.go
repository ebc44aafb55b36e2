package queries

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/feedco/feed/readmodel"
)

// A read model the query side finds incomplete (an inbox, a following
// state or a timeline without ~built, the celebrity set without its
// marker) is rebuilt here from PostgreSQL, the source of truth, while the
// read that found it is served from PostgreSQL. So a Redis that lost
// everything (a restart without persistence, a FLUSHDB, evictions) heals
// by itself as readers come back, with bounded load on PostgreSQL: one
// rebuild per key at a time in a process (rebuildFlights), at most
// Config.RebuildConcurrency at once; a rebuild that finds no slot is not
// started (counted "deferred"), and the next read of that key asks again.

// rebuildKind names a rebuilt read model (the metric's model label).
type rebuildKind string

const (
	rebuildInboxKind     rebuildKind = "inbox"
	rebuildFollowingKind rebuildKind = "following"
	rebuildTimelineKind  rebuildKind = "timeline"
)

// rebuildKey is one key's rebuild: its model and user (or author).
type rebuildKey struct {
	kind rebuildKind
	id   int64
}

// rebuildFlights makes rebuilds single-flight per key in a process.
type rebuildFlights struct {
	mu      sync.Mutex
	running map[rebuildKey]bool
}

// coldParts says which of a reader's read models a home read found
// incomplete.
type coldParts struct {
	inbox, following, own bool
}

func (c coldParts) any() bool { return c.inbox || c.following || c.own }

// startRebuilds starts the rebuilds of the parts of user's read models
// that c names.
func (f *Feed) startRebuilds(user int64, c coldParts) {
	if c.following {
		f.startRebuild(rebuildKey{rebuildFollowingKind, user})
	}
	if c.inbox {
		f.startRebuild(rebuildKey{rebuildInboxKind, user})
	}
	if c.own {
		f.startRebuild(rebuildKey{rebuildTimelineKind, user})
	}
}

// startRebuild rebuilds k in the background, unless this process is
// already doing it or is at its limit of rebuilds. The read that found
// the key incomplete is served from PostgreSQL meanwhile.
func (f *Feed) startRebuild(k rebuildKey) {
	if f.cfg.ReadOnly {
		return
	}
	r := &f.flights
	r.mu.Lock()
	if r.running[k] {
		r.mu.Unlock()
		return
	}
	if !f.rebuildSlots.TryAcquire(1) {
		r.mu.Unlock()
		f.metrics.Rebuilds.WithLabelValues(string(k.kind), "deferred").Inc()
		return
	}
	if r.running == nil {
		r.running = make(map[rebuildKey]bool)
	}
	r.running[k] = true
	r.mu.Unlock()
	f.bg.Add(1)
	go func() {
		defer f.bg.Done()
		defer func() {
			r.mu.Lock()
			delete(r.running, k)
			r.mu.Unlock()
			f.rebuildSlots.Release(1)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), f.cfg.RebuildTimeout)
		defer cancel()
		var err error
		switch k.kind {
		case rebuildInboxKind:
			err = f.rebuildInbox(ctx, k.id)
		case rebuildFollowingKind:
			err = f.rebuildFollowing(ctx, k.id)
		case rebuildTimelineKind:
			err = f.rebuildTimeline(ctx, k.id)
		}
		if err != nil {
			f.metrics.Rebuilds.WithLabelValues(string(k.kind), "error").Inc()
			f.log.Warn("queries: rebuild failed", "model", string(k.kind), "id", k.id, "err", err)
			return
		}
		f.metrics.Rebuilds.WithLabelValues(string(k.kind), "ok").Inc()
	}()
}

// followingSnapshotSQL is user's followees and muted accounts now, each
// with its pair stream's version and whether it is a mute pair (one
// statement: one snapshot; the version is read by the events table's
// (stream_id, stream_version) key). A follows or mutes row without its
// event (a database filled by other means than the commands) counts as the
// pair's first Followed or Muted.
const followingSnapshotSQL = `
SELECT f.followee_id,
       coalesce((SELECT max(e.stream_version) FROM events e
                 WHERE e.stream_id = 'follow-' || $1::bigint || '-' || f.followee_id), 1), false
FROM follows f WHERE f.follower_id = $1
UNION ALL
SELECT m.muted_id,
       coalesce((SELECT max(e.stream_version) FROM events e
                 WHERE e.stream_id = 'mute-' || $1::bigint || '-' || m.muted_id), 1), true
FROM mutes m WHERE m.muter_id = $1`

// rebuildFollowing merges user's followees and mutes as PostgreSQL has them into
// following:{u} and following_v:{u}, then marks them built
// (readmodel.Follows.WriteRebuiltFollowing says why this is right whatever
// the projector applies meanwhile).
func (f *Feed) rebuildFollowing(ctx context.Context, user int64) error {
	rows, err := f.db.Query(ctx, followingSnapshotSQL, user)
	if err != nil {
		return fmt.Errorf("read following of %d: %w", user, err)
	}
	var pairs []readmodel.FollowPair
	for rows.Next() {
		var p readmodel.FollowPair
		if err := rows.Scan(&p.Followee, &p.Version, &p.Mute); err != nil {
			rows.Close()
			return fmt.Errorf("read following of %d: %w", user, err)
		}
		pairs = append(pairs, p)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read following of %d: %w", user, err)
	}
	err = f.follows.WriteRebuiltFollowing(ctx, f.rdb, user, pairs)
	kF, kFV := f.follows.FollowingKeys(user)
	f.cache.invalidate(kF)
	f.cache.invalidate(kFV)
	if err != nil {
		return fmt.Errorf("write rebuilt following of %d: %w", user, err)
	}
	return nil
}

// timelineSnapshotSQL is an author's newest non-deleted posts.
const timelineSnapshotSQL = `
SELECT id, created_at FROM posts WHERE author_id = $1 AND NOT deleted
ORDER BY created_at DESC, id DESC LIMIT $2`

// rebuildTimeline writes author's newest posts as PostgreSQL has them into
// their timeline, then ~built (readmodel.Timelines.WriteRebuilt).
func (f *Feed) rebuildTimeline(ctx context.Context, author int64) error {
	posts, err := f.entries(ctx, timelineSnapshotSQL, author, f.tl.Max())
	if err != nil {
		return fmt.Errorf("read timeline snapshot of %d: %w", author, err)
	}
	err = f.tl.WriteRebuilt(ctx, f.rdb, author, posts)
	f.cache.invalidate(f.tl.Key(author))
	if err != nil {
		return fmt.Errorf("write rebuilt timeline of %d: %w", author, err)
	}
	return nil
}

// entries runs a query of (id, created_at) rows.
func (f *Feed) entries(ctx context.Context, sql string, args ...any) ([]readmodel.Entry, error) {
	rows, err := f.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []readmodel.Entry
	for rows.Next() {
		var id int64
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			return nil, err
		}
		out = append(out, readmodel.Entry{ID: id, Ms: at.UnixMilli()})
	}
	return out, rows.Err()
}

// rebuildInbox rebuilds user's inbox from PostgreSQL through its owner
// (homefeed.Manager.RebuildUser: the activity mark first, then the
// snapshot, written only by adding), at the active inbox version's keys
// and bound.
func (f *Feed) rebuildInbox(ctx context.Context, user int64) error {
	iv := f.inboxes() // one version for the whole rebuild
	err := iv.feed.RebuildUser(ctx, user)
	if err == nil {
		f.activity.mark(user, f.now())
	}
	// written here: the next read sees it without waiting for Redis's invalidation
	sk, bk := iv.inbox.Keys(user)
	f.cache.invalidate(sk)
	f.cache.invalidate(bk)
	return err
}
