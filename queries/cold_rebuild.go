package queries

import (
	"context"
	"sync"
)

// A read model the query side finds incomplete (an inbox, a following
// state or a timeline without ~built, the celebrity set without its
// marker) is rebuilt from PostgreSQL, the source of truth, by its owner
// (homefeed for the inbox, readmodel for the others), while the read that
// found it is served from PostgreSQL. This file decides when. So a Redis that lost
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

// rebuildFollowing rebuilds user's following state through its owner
// (readmodel.Follows.RebuildFollowing).
func (f *Feed) rebuildFollowing(ctx context.Context, user int64) error {
	err := f.follows.RebuildFollowing(ctx, f.db, f.rdb, user)
	kF, kFV := f.follows.FollowingKeys(user)
	f.cache.invalidate(kF)
	f.cache.invalidate(kFV)
	return err
}

// rebuildTimeline rebuilds author's timeline through its owner
// (readmodel.Timelines.Rebuild).
func (f *Feed) rebuildTimeline(ctx context.Context, author int64) error {
	err := f.tl.Rebuild(ctx, f.db, f.rdb, author)
	f.cache.invalidate(f.tl.Key(author))
	return err
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
