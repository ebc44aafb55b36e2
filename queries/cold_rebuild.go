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
// Config.RebuildConcurrency at once (Feed.Run's workers); a rebuild that
// finds no slot, or no Run to take it, is not queued (counted
// "deferred"), and the next read of that key asks again.

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

// workQueues carry the background work reads ask for to Feed.Run's
// workers: activity writes and rebuilds. They take work only while Run
// runs (open), and close when it ends; the workers then finish what is
// queued.
type workQueues struct {
	mu       sync.RWMutex
	running  bool
	activity chan int64
	rebuilds chan rebuildKey

	pmu     sync.Mutex
	pending int           // work queued and not done
	idle    chan struct{} // closed while pending is 0
}

// newWorkQueues returns closed queues; rebuilds holds every rebuild the
// slots admit (rebuildSlots: a queued rebuild holds its slot until done),
// so queueing one never blocks.
func newWorkQueues(rebuildSlots int) *workQueues {
	idle := make(chan struct{})
	close(idle)
	return &workQueues{activity: make(chan int64, activityQueue), rebuilds: make(chan rebuildKey, rebuildSlots), idle: idle}
}

// add counts a piece of work queued, done one done.
func (q *workQueues) add() {
	q.pmu.Lock()
	defer q.pmu.Unlock()
	if q.pending == 0 {
		q.idle = make(chan struct{})
	}
	q.pending++
}

func (q *workQueues) done() {
	q.pmu.Lock()
	defer q.pmu.Unlock()
	q.pending--
	if q.pending == 0 {
		close(q.idle)
	}
}

// idleCh is closed once no work queued before the call is left (tests
// wait on it).
func (q *workQueues) idleCh() <-chan struct{} {
	q.pmu.Lock()
	defer q.pmu.Unlock()
	return q.idle
}

func (q *workQueues) open() {
	q.mu.Lock()
	q.running = true
	q.mu.Unlock()
}

// close stops taking work and closes the channels, so that the workers
// end once they are empty. A Feed runs once: the queues never reopen.
func (q *workQueues) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.running {
		q.running = false
		close(q.activity)
		close(q.rebuilds)
	}
}

// queueActivity queues an activity write of user, and reports whether it
// did (not when Run does not run or the queue is full).
func (q *workQueues) queueActivity(user int64) bool {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if !q.running {
		return false
	}
	select {
	case q.activity <- user:
		q.add()
		return true
	default:
		return false
	}
}

// queueRebuild queues k's rebuild, whose slot the caller holds, and
// reports whether it did (not when Run does not run).
func (q *workQueues) queueRebuild(k rebuildKey) bool {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if !q.running {
		return false
	}
	q.add()
	q.rebuilds <- k // never blocks: as many places as slots
	return true
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

// startRebuild queues k's rebuild for Run's workers, unless this process
// is already doing it, is at its limit of rebuilds, or Run does not run.
// The read that found the key incomplete is served from PostgreSQL
// meanwhile.
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
	if !f.work.queueRebuild(k) {
		f.doneRebuild(k)
		f.metrics.Rebuilds.WithLabelValues(string(k.kind), "deferred").Inc()
	}
}

// doneRebuild ends k's flight and frees its slot.
func (f *Feed) doneRebuild(k rebuildKey) {
	r := &f.flights
	r.mu.Lock()
	delete(r.running, k)
	r.mu.Unlock()
	f.rebuildSlots.Release(1)
}

// runRebuildWorker runs the queued rebuilds, each bounded by
// RebuildTimeout under ctx, until the queue closes and is empty.
func (f *Feed) runRebuildWorker(ctx context.Context) {
	for k := range f.work.rebuilds {
		f.rebuild(ctx, k)
		f.doneRebuild(k)
		f.work.done()
	}
}

// rebuild rebuilds k, counted by its result.
func (f *Feed) rebuild(ctx context.Context, k rebuildKey) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.RebuildTimeout)
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
