package projections_test

import (
	"context"
	"testing"

	"github.com/feedco/feed/projections"
)

// The activity index (activity.go) decides who of a cached follower list
// gets a push from a lower bound of each follower's last_seen_at. Held
// active followers are pushed to without asking PostgreSQL; a follower the
// index misses (here a row stamped long before the newest one read, as a
// transaction that commits late would leave it) is asked about again and
// still pushed to, and the answer is held, so the next post asks nothing;
// a follower who stopped reading long ago is asked about on every post and
// never pushed to.
func TestActivityIndexDecidesWhoGetsThePush(t *testing.T) {
	t.Parallel()
	h := newCacheHarness(t, 0, projections.Config{CelebrityThreshold: 100})
	w, inbox, apply, has := h.w, h.inbox, h.apply, h.has
	rechecked := func(want int64, when string) {
		t.Helper()
		if got := inbox.ActivityRechecked(); got != want {
			t.Fatalf("%s: %d followers asked about again, want %d", when, got, want)
		}
	}

	author, a, gone := w.user(true), w.user(true), w.user(false)
	late := w.user(true)
	w.exec(`DELETE FROM user_activity WHERE user_id = $1`, late) // no activity yet
	w.follow(a, author)
	w.follow(gone, author)
	w.follow(late, author)
	apply()

	p1 := w.post(author)
	apply()
	if !has(a, p1) || has(gone, p1) || has(late, p1) {
		t.Fatalf("first post: a %v (want true), gone %v, late %v (want false)", has(a, p1), has(gone, p1), has(late, p1))
	}
	// gone (inactive) and late (no row) are not decided by the index.
	rechecked(2, "first post")

	// late reads now, but its row is stamped an hour before the newest
	// activity the index has read, beyond the refresh's margin: the
	// incremental read never sees it.
	w.exec(`UPDATE user_activity SET last_seen_at = now() WHERE user_id = $1`, a)
	w.exec(`INSERT INTO user_activity (user_id, last_seen_at) VALUES ($1, now() - interval '1 hour')`, late)
	inbox.RefreshActivityNow()
	p2 := w.post(author)
	apply()
	if !has(a, p2) || !has(late, p2) || has(gone, p2) {
		t.Fatalf("second post: a %v, late %v (want true), gone %v (want false)", has(a, p2), has(late, p2), has(gone, p2))
	}
	rechecked(4, "second post: gone and the missed late asked again")

	// The recheck's answer is held: only gone is asked about now.
	p3 := w.post(author)
	apply()
	if !has(late, p3) || has(gone, p3) {
		t.Fatalf("third post: late %v (want true), gone %v (want false)", has(late, p3), has(gone, p3))
	}
	rechecked(5, "third post")
	if got := inbox.FollowerLoads(); got != 1 {
		t.Fatalf("%d follower lists read, want 1 (the activity changes are no events)", got)
	}
}

// A refresh reads only the activity written since the last one (with the
// margin for late commits), also when no newer activity came meanwhile:
// every user stamped at once (a bulk activation) is read once, not on
// every refresh within the margin of that stamp. What the index decides
// stays the same: both followers get every post, nobody is asked again.
func TestActivityRefreshReadsEachRowOnce(t *testing.T) {
	t.Parallel()
	h := newCacheHarness(t, 0, projections.Config{CelebrityThreshold: 100})
	w, inbox, apply, has := h.w, h.inbox, h.apply, h.has
	author, a, b := w.user(true), w.user(true), w.user(true)
	w.follow(a, author)
	w.follow(b, author)
	apply()
	w.exec(`UPDATE user_activity SET last_seen_at = now() - interval '10 seconds'`)
	var users int64
	if err := w.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM user_activity`).Scan(&users); err != nil {
		t.Fatal(err)
	}

	post := func(when string, wantRows int64) {
		t.Helper()
		before := inbox.ActivityRowsRead()
		inbox.RefreshActivityNow()
		p := w.post(author)
		apply()
		if !has(a, p) || !has(b, p) {
			t.Fatalf("%s: a %v, b %v, want both", when, has(a, p), has(b, p))
		}
		if got := inbox.ActivityRowsRead() - before; got != wantRows {
			t.Fatalf("%s: the refresh read %d activity rows, want %d", when, got, wantRows)
		}
	}
	post("first post: every active user", users)
	post("second post: nothing written since", 0)
	post("third post: nothing written since", 0)
	w.exec(`UPDATE user_activity SET last_seen_at = now() WHERE user_id = $1`, a)
	post("after a's read: a's row", 1)
	if got := inbox.ActivityRechecked(); got != 0 {
		t.Fatalf("%d followers asked about again, want 0", got)
	}
}
