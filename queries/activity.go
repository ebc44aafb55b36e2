package queries

import (
	"errors"

	"context"
	"github.com/feedco/feed/homefeed"
	"time"
)

// touch marks user active in the background, at most once per
// ActivityWriteInterval per process (f.activity remembers the writes), so a
// busy reader costs PostgreSQL one write per interval, not one per page.
// Fan-out skips users not seen for weeks, so minutes of slack are harmless.
func (f *Feed) touch(user int64) {
	if f.cfg.ReadOnly {
		return
	}
	if !f.activity.markUnlessRecent(user, f.now()) {
		return
	}
	f.bg.Add(1)
	go func() {
		defer f.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := f.recordActivity(ctx, user); err != nil {
			f.log.Warn("queries: activity write failed", "user", user, "err", err)
			f.activity.forget(user) // the next read tries again
		}
	}()
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
