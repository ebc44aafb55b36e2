package queries

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/feedco/feed/events"
)

// The deletion feed (a change feed of post bodies) lets the process keep
// post bodies for minutes instead of PostCacheTTL: a post's body changes
// only by an edit (post.edited.v1, with the whole new content and the
// post's version) or its deletion (post.deleted.v1; for a repost's own
// entry, post.unreposted.v1), all events in the event log. So each process polls the log for them (one small indexed
// query per DeletionPollInterval, only while it serves reads, from Feed.Run), applies
// them to its post cache, and knows "every deletion and edit committed
// before T is applied"; while T is fresh (now - T < PostCacheTTL) a cached
// live body needs no confirmation from Redis. See docs/queries.md "Post
// body cache".

const (
	// deletionMemory is how long learnt deletions are remembered beside the
	// post cache (so an evicted post re-read from a Redis post cache that
	// has not got its tombstone yet is still known deleted) and how far back
	// a (re)start of the feed reads deletions. It must exceed the posts
	// projector's lag.
	deletionMemory = 10 * time.Minute
	// feedTrustMaxAge bounds how long the feed alone vouches for a cached
	// live body: past it the body's deletion flag is confirmed from Redis
	// again (the fallback rule for a projector lagging more than
	// deletionMemory).
	feedTrustMaxAge = time.Minute
	// deletionScanLimit bounds the events one incremental poll reads
	// (deletionFeed.scanLimit); a longer backlog (the process was idle, or
	// a long transaction held the xid horizon) restarts the feed from
	// deletionMemory instead.
	deletionScanLimit = 10_000
)

// deletedIDSQL is the id whose body an event ends: a deleted post's, or
// an undone repost's own entry (its post:{r} becomes a tombstone, as a
// deleted post's does).
const deletedIDSQL = `CASE WHEN type = 'post.deleted.v1' THEN (payload->>'postId')::bigint ELSE (payload->>'repostId')::bigint END`

// deletionStartSQL (re)starts the feed: the deletions and edits (their
// payloads, in log order) recorded in the last $1 and the snapshot's xmin. Every transaction below xmin has finished, so
// its events are visible here if it committed; the next poll continues
// from xmin. recorded_at is the transaction's start, so a deleting
// transaction longer than deletionMemory would be missed (commands take
// milliseconds).
const deletionStartSQL = `
SELECT pg_snapshot_xmin(pg_current_snapshot())::text,
       ARRAY(SELECT ` + deletedIDSQL + ` FROM events
             WHERE recorded_at > now() - $1::int * interval '1 second' AND type IN ('post.deleted.v1', 'post.unreposted.v1')),
       ARRAY(SELECT payload::text FROM events
             WHERE recorded_at > now() - $1::int * interval '1 second' AND type = 'post.edited.v1' ORDER BY position)`

// deletionPollSQL is one incremental poll: the events of transactions
// from $1 on (the previous poll's xmin), in one snapshot with its xmin.
// Every event visible now was either below $1 (seen by an earlier poll:
// those transactions had all finished before it) or is read here; rows of
// transactions still running are read again by the next poll (xmin does
// not pass them). The scan is bounded: count = $2 means it was cut.
const deletionPollSQL = `
WITH r AS MATERIALIZED (
    SELECT type, payload FROM events WHERE tx_id >= $1::text::xid8 ORDER BY tx_id LIMIT $2)
SELECT pg_snapshot_xmin(pg_current_snapshot())::text,
       (SELECT count(*) FROM r),
       ARRAY(SELECT ` + deletedIDSQL + ` FROM r WHERE type IN ('post.deleted.v1', 'post.unreposted.v1')),
       ARRAY(SELECT payload::text FROM r WHERE type = 'post.edited.v1')`

// deletionFeed is the poller's state.
type deletionFeed struct {
	interval  time.Duration
	scanLimit int64
	wake      chan struct{}

	horizon string       // xid8 of the previous poll's xmin; "" = (re)start
	pruned  time.Time    // last forgetDeletionsBefore
	through atomic.Int64 // unix nanos: deletions committed before it are applied (0: none yet)
	wanted  atomic.Int64 // unix nanos of the last read that used the cache
}

// fresh reports whether the feed vouches for cached live bodies at now.
func (d *deletionFeed) fresh(now time.Time, ttl time.Duration) bool {
	t := d.through.Load()
	return t != 0 && now.UnixNano()-t < int64(ttl)
}

// touch records that a read wants the feed, and wakes the poller when the
// feed is stale (after an idle period it skips polls).
func (d *deletionFeed) touch(now time.Time, ttl time.Duration) {
	d.wanted.Store(now.UnixNano())
	if !d.fresh(now, ttl) {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// runDeletionFeed polls until ctx ends. It skips polls while no read used
// the cache for a few TTLs (an idle process costs PostgreSQL nothing); a
// read finding the feed stale wakes it.
func (f *Feed) runDeletionFeed(ctx context.Context) {
	d := &f.deletions
	t := time.NewTicker(d.interval)
	defer t.Stop()
	backoff := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.wake:
		}
		now := f.now()
		if now.UnixNano()-d.wanted.Load() > int64(4*f.cfg.PostCacheTTL) {
			continue // idle: let the feed go stale, reads fall back to the TTL
		}
		if backoff > 0 {
			backoff--
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, max(2*d.interval, time.Second))
		err := f.pollDeletions(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			f.log.Warn("queries: deletion feed poll failed (cached bodies fall back to PostCacheTTL)", "err", err)
			backoff = 10 // a failing database is not asked every interval
		}
	}
}

// pollDeletions runs one poll and applies what it learnt.
func (f *Feed) pollDeletions(ctx context.Context) error {
	d := &f.deletions
	start := f.now() // the snapshot is taken after this: it sees every commit before it
	var xmin string
	var ids []int64
	var edits []string
	if d.horizon == "" {
		if err := f.queryRow(ctx, deletionStartSQL, []any{int(deletionMemory / time.Second)}, &xmin, &ids, &edits); err != nil {
			return fmt.Errorf("start deletion feed: %w", err)
		}
	} else {
		var n int64
		if err := f.queryRow(ctx, deletionPollSQL, []any{d.horizon, d.scanLimit}, &xmin, &n, &ids, &edits); err != nil {
			return fmt.Errorf("poll deletions: %w", err)
		}
		if n >= d.scanLimit {
			// Cut: apply what was read (always safe), then restart from
			// the recent window instead of paging through the backlog.
			f.applyChanges(ids, edits, start)
			d.horizon = ""
			return f.pollDeletions(ctx)
		}
	}
	if _, err := strconv.ParseUint(xmin, 10, 64); err != nil {
		return fmt.Errorf("poll deletions: xmin %q: %w", xmin, err)
	}
	f.applyChanges(ids, edits, start)
	if start.Sub(d.pruned) > deletionMemory/10 {
		f.posts.forgetDeletionsBefore(start.Add(-deletionMemory))
		d.pruned = start
	}
	d.horizon = xmin
	d.through.Store(start.UnixNano())
	return nil
}

// applyChanges applies the deletions (post ids) and edits (post.edited.v1
// payloads) a poll read, at now. The edits' order does not matter: the
// cache keeps the highest version of each post. An edit it cannot read
// (the write side never appends one) is logged and its post's body
// dropped, so that the body is read again instead of trusted.
func (f *Feed) applyChanges(deleted []int64, edits []string, now time.Time) {
	f.posts.markDeleted(deleted, now)
	for _, raw := range edits {
		var e events.PostEdited
		if err := json.Unmarshal([]byte(raw), &e); err != nil || e.PostID <= 0 || e.Version < 2 {
			f.log.Error("queries: unreadable post.edited.v1 payload in the event log", "payload", raw, "err", err)
			if e.PostID > 0 {
				f.posts.evict(e.PostID)
			}
			continue
		}
		f.posts.markEdited(e.PostID, e.Version, e.Content, e.EditedAt, now)
	}
}

// queryRow runs a one-row query through the DB interface (which has no
// QueryRow).
func (f *Feed) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	rows, err := f.db.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return fmt.Errorf("no row")
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}
