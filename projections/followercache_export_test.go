package projections

import (
	"context"
	"time"
)

// WithDelivery gives ctx the place of a message in its partition, as the
// runner does, so tests can drive Apply through the follower cache.
func WithDelivery(ctx context.Context, topic string, partition int32, offset int64) context.Context {
	return withDelivery(ctx, delivery{topic: topic, partition: partition, offset: offset})
}

// FollowerLoads is how many follower lists the inbox projector read from
// PostgreSQL for its cache; FollowerRows how many rows it holds.
func (p *Inbox) FollowerLoads() int64 {
	if p.cache == nil {
		return 0
	}
	return p.cache.loads.Load()
}
func (p *Inbox) FollowerRows() int { return p.cache.rowsHeld() }

// ActivityRechecked is how many followers the inbox projector asked
// PostgreSQL about again because its activity index could not decide them.
func (p *Inbox) ActivityRechecked() int64 { return p.activity.rechecked.Load() }

// ActivityRowsRead is how many user_activity rows the activity index's
// refreshes read.
func (p *Inbox) ActivityRowsRead() int64 { return p.activity.rowsRead.Load() }

// RefreshActivityNow lets the next push read user_activity again at once
// (refreshes otherwise wait activityRefreshEvery).
func (p *Inbox) RefreshActivityNow() {
	p.activity.refreshMu.Lock()
	p.activity.next = time.Time{}
	p.activity.refreshMu.Unlock()
}

// followersSeenSQL is the list load the activity index replaced: the
// follower ids joined with user_activity (an index probe per follower).
// BenchmarkFollowerTargets measures it beside the load that replaced it.
const followersSeenSQL = `SELECT f.follower_id, a.last_seen_at, now()
FROM follows f LEFT JOIN user_activity a ON a.user_id = f.follower_id
WHERE f.followee_id = $1 ORDER BY f.follower_id LIMIT $2`

// ColdTargets is the author's push targets as a post whose follower list
// is not cached finds them: the list loaded (follower ids), the activity
// index asked. It returns how many followers get the push.
func (p *Inbox) ColdTargets(ctx context.Context, author int64) (int, error) {
	p.cache.drop(author)
	ids, _, _, err := p.cachedTargets(ctx, delivery{topic: "bench"}, author)
	return len(ids), err
}

// JoinTargets is the same answer from the replaced load, which read each
// follower's last_seen_at with the list.
func (p *Inbox) JoinTargets(ctx context.Context, author int64) (int, error) {
	rows, err := p.pg.Query(ctx, followersSeenSQL, author, p.cache.maxList+1)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	fresh := time.Now().Add(clockMargin - p.cfg.inboxTTL())
	n := 0
	for rows.Next() {
		var id int64
		var s *time.Time
		var now time.Time
		if err := rows.Scan(&id, &s, &now); err != nil {
			return 0, err
		}
		if s != nil && s.After(fresh) {
			n++
		}
	}
	return n, rows.Err()
}

// followerRowsSQL is the list load the one-row array replaced: a row per
// follower. BenchmarkFollowerTargets measures it beside followerIDsSQL.
const followerRowsSQL = `SELECT f.follower_id, now() FROM follows f
WHERE f.followee_id = $1
  AND NOT EXISTS (SELECT 1 FROM mutes m WHERE m.muted_id = f.followee_id AND m.muter_id = f.follower_id)
ORDER BY f.follower_id LIMIT $2`

// RowTargets is ColdTargets with the list read a row per follower
// (followerRowsSQL), the activity index asked the same way.
func (p *Inbox) RowTargets(ctx context.Context, author int64) (int, error) {
	rows, err := p.pg.Query(ctx, followerRowsSQL, author, p.cache.maxList+1)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var ids []int64
	var now time.Time
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id, &now); err != nil {
			return 0, err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	return p.targetsOf(ctx, author, ids, now)
}

// followerAntiJoinSQL is the one-array load before the lists kept the
// muters apart: the followers anti-joined with mutes (an index probe per
// follower). BenchmarkFollowerTargets measures it beside followerIDsSQL.
const followerAntiJoinSQL = `SELECT ARRAY(SELECT f.follower_id FROM follows f
WHERE f.followee_id = $1
  AND NOT EXISTS (SELECT 1 FROM mutes m WHERE m.muted_id = f.followee_id AND m.muter_id = f.follower_id)
ORDER BY f.follower_id LIMIT $2), now()`

// AntiJoinTargets is ColdTargets with the list read by followerAntiJoinSQL.
func (p *Inbox) AntiJoinTargets(ctx context.Context, author int64) (int, error) {
	var ids []int64
	var now time.Time
	if err := p.pg.QueryRow(ctx, followerAntiJoinSQL, author, p.cache.maxList+1).Scan(&ids, &now); err != nil {
		return 0, err
	}
	return p.targetsOf(ctx, author, ids, now)
}

// targetsOf puts ids, read at PostgreSQL's time now, in the cache as the
// author's list and returns how many of them the push would go to.
func (p *Inbox) targetsOf(ctx context.Context, author int64, ids []int64, now time.Time) (int, error) {
	before := time.Now()
	d := delivery{topic: "bench"}
	p.cache.drop(author)
	p.cache.put(d, author, &followerList{ids: ids, loaded: before, skew: now.Sub(before)})
	targets, _, _, err := p.cachedTargets(ctx, d, author)
	return len(targets), err
}

// drop forgets the author's list, in whichever partition holds it (the
// projector changes lists in place; the benchmarks start from none).
func (c *followerCache) drop(author int64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, pf := range c.parts {
		if l := pf.lists[author]; l != nil {
			c.rows -= l.rows()
			delete(pf.lists, author)
		}
	}
}
