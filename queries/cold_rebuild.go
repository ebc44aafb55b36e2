package queries

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/feedco/feed/readmodel"
)

// rebuildFlights makes inbox rebuilds single-flight per user in a process.
type rebuildFlights struct {
	mu      sync.Mutex
	running map[int64]bool
}

// startRebuild rebuilds user's cold inbox in the background, unless this
// process is already doing it. The page that found the inbox cold is served
// from PostgreSQL meanwhile.
func (f *Feed) startRebuild(user int64) {
	r := &f.flights
	r.mu.Lock()
	if r.running[user] {
		r.mu.Unlock()
		return
	}
	if r.running == nil {
		r.running = make(map[int64]bool)
	}
	r.running[user] = true
	r.mu.Unlock()
	f.bg.Add(1)
	go func() {
		defer f.bg.Done()
		defer func() {
			r.mu.Lock()
			delete(r.running, user)
			r.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), f.cfg.RebuildTimeout)
		defer cancel()
		if err := f.rebuildInbox(ctx, user); err != nil {
			f.metrics.Rebuilds.WithLabelValues("error").Inc()
			f.log.Warn("queries: inbox rebuild failed", "user", user, "err", err)
			return
		}
		f.metrics.Rebuilds.WithLabelValues("ok").Inc()
	}()
}

// rebuildInbox writes the newest InboxMax posts of user's followees and of
// user into the inbox, then ~floor (when cut) and ~built.
//
// ORDER MATTERS. The user is marked active (committed) BEFORE the snapshot
// is read. A post committed after the snapshot is then pushed by the inbox
// projector, because the projector checks activity after that post's
// commit, which is after our activity write. Had we read first and marked
// later, a post committing in between would be missed by both: not in our
// snapshot, and skipped by fan-out as addressed to an inactive user.
//
// The write (readmodel.Inboxes.WriteRebuilt) only adds, never deletes: a
// push that landed between the snapshot and this write must survive.
// Entries already in the set (stale pushes) are either real posts of the
// user's followees, or hidden at read (deleted, unfollowed), or at or
// below the floor. It is one MULTI that also sets the inbox TTL, so no
// built inbox lives longer than that after the activity write above (see
// recordActivity).
func (f *Feed) rebuildInbox(ctx context.Context, user int64) error {
	if err := f.markActive(ctx, user); err != nil {
		return err
	}
	f.activity.mark(user, f.now())
	rows, err := f.db.Query(ctx, pullKeysSQL, user, f.cfg.InboxMax)
	if err != nil {
		return fmt.Errorf("read inbox snapshot of %d: %w", user, err)
	}
	var posts []readmodel.Entry
	for rows.Next() {
		var id int64
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			rows.Close()
			return fmt.Errorf("read inbox snapshot of %d: %w", user, err)
		}
		posts = append(posts, readmodel.Entry{ID: id, Ms: at.UnixMilli()})
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read inbox snapshot of %d: %w", user, err)
	}
	err = f.inbox.WriteRebuilt(ctx, f.rdb, user, posts)
	f.cache.invalidate(f.inbox.Key(user)) // written here: the next read sees it without waiting for Redis's invalidation
	if err != nil {
		return fmt.Errorf("write rebuilt inbox of %d: %w", user, err)
	}
	return nil
}
