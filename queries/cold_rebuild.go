package queries

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

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
// Writes only add (ZADD, floor with GT), never DEL: a push that landed
// between the snapshot and this write must survive. Entries already in the
// set (stale pushes) are either real posts of the user's followees, or
// hidden at read (deleted, unfollowed), or at or below the floor. The
// members, ~built and the expiry go in one MULTI (one key, one slot) so no
// reader sees ~built over a half-written inbox, and no built inbox lives
// longer than inboxTTL after the activity write above (see recordActivity).
func (f *Feed) rebuildInbox(ctx context.Context, user int64) error {
	if err := f.markActive(ctx, user); err != nil {
		return err
	}
	f.activity.mark(user, f.now())
	rows, err := f.db.Query(ctx, pullKeysSQL, user, f.cfg.InboxMax)
	if err != nil {
		return fmt.Errorf("read inbox snapshot of %d: %w", user, err)
	}
	var zs []redis.Z
	for rows.Next() {
		var id int64
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			rows.Close()
			return fmt.Errorf("read inbox snapshot of %d: %w", user, err)
		}
		zs = append(zs, redis.Z{Score: float64(at.UnixMilli()), Member: strconv.FormatInt(id, 10)})
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read inbox snapshot of %d: %w", user, err)
	}
	k := f.keys.Inbox(user)
	pipe := f.rdb.TxPipeline()
	if len(zs) > 0 {
		pipe.ZAdd(ctx, k, zs...)
	}
	if len(zs) >= f.cfg.InboxMax {
		// Cut at the bound: complete only above the oldest score kept (its
		// own millisecond may have lost same-ms posts to the cut).
		pipe.ZAddGT(ctx, k, redis.Z{Score: zs[len(zs)-1].Score, Member: readmodel.SentinelFloor})
	}
	pipe.ZAdd(ctx, k, redis.Z{Score: math.Inf(1), Member: readmodel.SentinelBuilt})
	pipe.Expire(ctx, k, f.cfg.inboxTTL())
	_, err = pipe.Exec(ctx)
	f.cache.invalidate(k) // written here: the next read sees it without waiting for Redis's invalidation
	if err != nil {
		return fmt.Errorf("write rebuilt inbox of %d: %w", user, err)
	}
	return nil
}
