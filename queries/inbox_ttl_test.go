package queries

import (
	"testing"
	"time"

	"github.com/feedco/feed/testkit/testenv"
)

// A read writes the user's activity and moves their inbox's expiry to
// InactiveAfter minus the margin: below InactiveAfter, so the inbox is gone
// before fan-out stops pushing to the user.
func TestReadSetsInboxTTL(t *testing.T) {
	t.Parallel()
	testReadSetsInboxTTL(t)
}

func testReadSetsInboxTTL(t *testing.T) {
	const inactive = 48 * time.Hour
	b := setup(t, Config{InactiveAfter: inactive}) // margin: max(1h, 2×5 min)
	u, a := b.user(), b.user()
	b.follow(u, a)
	p := b.post(a, base)
	b.cachePost(p)
	b.setInbox(u, []key{p}, true, -1) // warm, no TTL
	sameFeed(t, "warm read", b.readHome(u, 5), []key{p})
	testenv.Eventually(t, 10*time.Second, "inbox TTL set", func() bool { return b.rdb.TTL(b.ctx, b.inboxKey(u)).Val() > 0 })
	if ttl := b.rdb.TTL(b.ctx, b.inboxKey(u)).Val(); ttl > inactive-time.Hour || ttl < inactive-time.Hour-time.Minute {
		t.Errorf("inbox TTL %v, want about %v (InactiveAfter minus the 1h margin)", ttl, inactive-time.Hour)
	}
	var n int
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM user_activity WHERE user_id = $1`, u).Scan(&n); err != nil || n != 1 {
		t.Errorf("activity row: %d %v", n, err)
	}
}

// A cold rebuild writes the inbox with the same TTL, in its MULTI.
func TestColdRebuildSetsInboxTTL(t *testing.T) {
	t.Parallel()
	testColdRebuildSetsInboxTTL(t)
}

func testColdRebuildSetsInboxTTL(t *testing.T) {
	const inactive, margin = 10 * 24 * time.Hour, 3 * time.Hour
	b := setup(t, Config{InactiveAfter: inactive, InboxTTLMargin: margin})
	u, a := b.user(), b.user()
	b.follow(u, a)
	b.cachePost(b.post(a, base))
	b.readHome(u, 5) // cold: served from PostgreSQL, rebuilt in the background
	testenv.Eventually(t, 10*time.Second, "inbox rebuilt", func() bool {
		_, _, built := b.inboxState(u)
		return built
	})
	if ttl := b.rdb.TTL(b.ctx, b.inboxKey(u)).Val(); ttl > inactive-margin || ttl < inactive-margin-time.Minute {
		t.Errorf("rebuilt inbox TTL %v, want about %v", ttl, inactive-margin)
	}
}

// The gap the TTL closes, with a short InactiveAfter: a user away longer
// than the inbox TTL finds no stale ~built inbox (posts made meanwhile were
// not pushed to them), but a cold read that shows the new post and rebuilds.
func TestReturningUserIsNotServedStaleInbox(t *testing.T) {
	testReturningUserIsNotServedStaleInbox(t)
}

func testReturningUserIsNotServedStaleInbox(t *testing.T) {
	b := setup(t, Config{InactiveAfter: 3 * time.Second, InboxTTLMargin: time.Second, ActivityWriteInterval: 500 * time.Millisecond})
	u, a := b.user(), b.user()
	b.follow(u, a)
	p1 := b.post(a, base)
	b.cachePost(p1)
	b.setInbox(u, []key{p1}, true, -1)
	sameFeed(t, "first visit", b.readHome(u, 5), []key{p1})
	testenv.Eventually(t, 10*time.Second, "inbox TTL set", func() bool { return b.rdb.TTL(b.ctx, b.inboxKey(u)).Val() > 0 })
	// Away: a posts; fan-out (not running here) would have skipped u.
	p2 := b.post(a, base+1)
	b.cachePost(p2)
	testenv.Eventually(t, 10*time.Second, "inbox expired", func() bool { return b.rdb.Exists(b.ctx, b.inboxKey(u)).Val() == 0 })
	sameFeed(t, "after the absence", b.readHome(u, 5), []key{p2, p1})
}
