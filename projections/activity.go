package projections

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// The activity index saves the push path its per-follower look at
// user_activity: the inbox projector keeps, per user, a lower bound of
// their last_seen_at, and reads only the rows written since its last look
// (by user_activity_last_seen_idx), at most once a second. A cached
// follower list (followercache.go) is then the follower ids alone, an
// index-only scan of follows_followee_idx, and deciding who of them gets
// the push costs a map lookup per follower instead of an index probe into
// user_activity (BenchmarkFollowerTargets measures both).
//
// Why a lower bound is enough: last_seen_at only grows (the query side
// writes GREATEST), so a follower whose held value already makes them
// active and not past the inbox TTL is so now, and is pushed to as the
// uncached query would. Every other follower (not held, inactive or near
// the TTL by the held value) is asked again from PostgreSQL (recheckSQL),
// whose answer raises the held value. A row the refresh misses (a
// transaction that commits more than activityMargin after its stamp)
// therefore only costs a recheck, never a push.
type activityIndex struct {
	mu       sync.RWMutex
	seen     map[int64]int64 // user -> last_seen_at lower bound, Unix µs
	maxUsers int

	refreshMu sync.Mutex // held by the one refresh in progress
	next      time.Time  // our clock: no refresh before this
	high      time.Time  // the greatest last_seen_at read so far
	read      time.Time  // PostgreSQL's now() at the last refresh's first query
	refreshes atomic.Int64
	rechecked atomic.Int64 // followers asked about again (recheckSQL)
	rowsRead  atomic.Int64 // user_activity rows read by refreshes
}

const (
	// activityRefreshEvery is the least time between two reads of
	// user_activity.
	activityRefreshEvery = time.Second
	// activityMargin re-reads the rows stamped this long before the
	// later of the newest one read and the last read's now(), for
	// transactions that commit after their stamp (an activity write is one
	// statement: milliseconds). A row is read up to
	// activityMargin/activityRefreshEvery + 1 times; one missed costs
	// rechecks until the user's next activity write.
	activityMargin = 2 * time.Second
	// activityPage bounds the rows of one query of a refresh.
	activityPage = 10000
)

// activitySinceSQL reads the activity written since $1 (and within
// InactiveAfter, $3: the first refresh reads every active user), oldest
// first, a page at a time, with PostgreSQL's now() (the statement's
// snapshot sees every transaction committed before it).
const activitySinceSQL = `SELECT user_id, last_seen_at, now() FROM user_activity
WHERE last_seen_at > greatest($1::timestamptz, now() - $3::interval)
ORDER BY last_seen_at LIMIT $2`

// newActivityIndex holds at most maxUsers users (the rest are asked about
// on every push, as when the index lacks them).
func newActivityIndex(maxUsers int) *activityIndex {
	return &activityIndex{seen: map[int64]int64{}, maxUsers: maxUsers}
}

// refresh reads the activity written since the last refresh, unless one
// ran within activityRefreshEvery or another goroutine is running one (the
// caller then goes on with what is held: it is a lower bound either way).
func (a *activityIndex) refresh(ctx context.Context, pg Querier, inactiveAfter time.Duration) error {
	if !a.refreshMu.TryLock() {
		return nil
	}
	defer a.refreshMu.Unlock()
	now := time.Now()
	if now.Before(a.next) {
		return nil
	}
	// The margin is taken from the later of the newest stamp read and the
	// last read's now(): a row stamped before that now() minus the margin
	// and not seen then belongs to a transaction that committed more than
	// the margin after its stamp, the case the margin already leaves to
	// rechecks. Counting from the stamp alone would read the rows of the
	// last margin again on every refresh while no newer activity comes
	// (every user stamped at once: all of them, once a second).
	var since any // nil: every active user (greatest ignores a NULL)
	if from := later(a.high, a.read); !from.IsZero() {
		since = from.Add(-activityMargin)
	}
	var read time.Time
	for {
		rows, err := pg.Query(ctx, activitySinceSQL, since, activityPage, inactiveAfter)
		if err != nil {
			return fmt.Errorf("read user activity: %w", err)
		}
		var ids, seen []int64
		var last, pgNow time.Time
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id, &last, &pgNow); err != nil {
				rows.Close()
				return fmt.Errorf("scan user activity: %w", err)
			}
			ids = append(ids, id)
			seen = append(seen, last.UnixMicro())
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read user activity: %w", err)
		}
		a.raise(ids, seen)
		a.rowsRead.Add(int64(len(ids)))
		if read.IsZero() {
			read = pgNow // zero when the page is empty: the next refresh counts from high
		}
		if last.After(a.high) {
			a.high = last
		}
		if len(ids) < activityPage {
			break
		}
		if prev, ok := since.(time.Time); ok && !last.After(prev) {
			break // a whole page of one stamp: the rest is rechecked
		}
		// The next page starts after this one's newest stamp: rows sharing
		// it beyond the page are read by the next refresh's margin, or
		// rechecked until then.
		since = last
	}
	a.refreshes.Add(1)
	a.read = later(a.read, read)
	a.next = now.Add(activityRefreshEvery)
	return nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// lookup fills seen[i] with the held lower bound of ids[i]'s last_seen_at
// in Unix µs, noActivity when none is held.
func (a *activityIndex) lookup(ids []int64, seen []int64) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	for i, id := range ids {
		if s, ok := a.seen[id]; ok {
			seen[i] = s
		} else {
			seen[i] = noActivity
		}
	}
}

// raise records that ids[i] was seen at seen[i] (Unix µs): held values
// only grow, and a user not held yet is added while fewer than maxUsers
// are held.
func (a *activityIndex) raise(ids []int64, seen []int64) {
	if len(ids) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, id := range ids {
		old, ok := a.seen[id]
		if !ok && len(a.seen) >= a.maxUsers {
			continue
		}
		if !ok || seen[i] > old {
			a.seen[id] = seen[i]
		}
	}
}

// users is the number of users held (tests and metrics).
func (a *activityIndex) users() int {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return len(a.seen)
}
