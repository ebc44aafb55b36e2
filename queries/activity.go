package queries

import (
	"context"
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

// recordActivity writes user's activity, THEN moves their inbox's expiry to
// the inbox TTL from now (readmodel.PackedInboxes.Touch, readmodel.Policy.InboxTTL). In that order: an expiry moved without the activity
// write (which may fail) could outlive the projectors' pushes; an activity
// write whose EXPIRE fails leaves the earlier, sooner expiry, which is safe
// (the inbox is only rebuilt earlier). EXPIRE on a missing inbox does
// nothing: the cold read that follows rebuilds it with the TTL.
func (f *Feed) recordActivity(ctx context.Context, user int64) error {
	if err := f.markActive(ctx, user); err != nil {
		return err
	}
	if err := f.inboxes().inbox.Touch(ctx, f.rdb, user); err != nil {
		f.log.Warn("queries: inbox expiry not moved (it keeps the earlier one)", "user", user, "err", err)
	}
	return nil
}
