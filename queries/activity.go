package queries

import (
	"context"
	"errors"
	"time"

	"github.com/feedco/feed/homefeed"
)

const (
	// activityWorkers is how many activity writes Run's workers make at
	// once.
	activityWorkers = 4
	// activityQueue bounds the activity writes waiting for a worker; a
	// mark that finds the queue full is not written (the next read of
	// that user asks again).
	activityQueue = 1024
	// activityTimeout bounds one activity write.
	activityTimeout = 5 * time.Second
)

// touch marks user active in the background, at most once per
// ActivityWriteInterval per process (f.activity remembers the writes), so a
// busy reader costs PostgreSQL one write per interval, not one per page.
// Fan-out skips users not seen for weeks, so minutes of slack are harmless.
// The write is queued for Run's workers; when Run does not run or the
// queue is full it is not, and the next read tries again.
func (f *Feed) touch(user int64) {
	if f.cfg.ReadOnly {
		return
	}
	if !f.activity.markUnlessRecent(user, f.now()) {
		return
	}
	if !f.work.queueActivity(user) {
		f.activity.forget(user)
	}
}

// runActivityWorker writes the queued activity marks, each bounded by
// activityTimeout under ctx, until the queue closes and is empty.
func (f *Feed) runActivityWorker(ctx context.Context) {
	for user := range f.work.activity {
		wctx, cancel := context.WithTimeout(ctx, activityTimeout)
		if err := f.recordActivity(wctx, user); err != nil {
			f.log.Warn("queries: activity write failed", "user", user, "err", err)
			f.activity.forget(user) // the next read tries again
		}
		cancel()
		f.work.done()
	}
}

// recordActivity marks user active through the home feed's owner
// (homefeed.Manager.MarkActive: the activity row, then the inbox's
// expiry). An expiry not moved leaves the earlier, sooner one, which is
// safe: it is logged, and the activity counts as written.
func (f *Feed) recordActivity(ctx context.Context, user int64) error {
	err := f.inboxes().feed.MarkActive(ctx, user)
	if errors.Is(err, homefeed.ErrExpiryNotMoved) {
		f.log.Warn("queries: inbox expiry not moved (it keeps the earlier one)", "user", user, "err", err)
		return nil
	}
	return err
}
