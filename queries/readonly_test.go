package queries

import (
	"testing"
	"time"

	"github.com/feedco/feed/testkit/testenv"
)

// A ReadOnly Feed changes nothing: a cold reader's page comes from
// PostgreSQL, equal to the truth and marked Cold, with no activity written
// and no read model rebuilt (the inbox stays missing); the same read on a
// normal Feed is Cold too, writes the activity and rebuilds the inbox, and
// its next page is not Cold.
func TestReadOnlyWritesNothing(t *testing.T) {
	t.Parallel()
	func() {
		b := setup(t, Config{})
		ro, err := New(Config{Keys: b.keys, ReadOnly: true}, b.db.Pool, b.rdb)
		if err != nil {
			t.Fatal(err)
		}
		runFeed(t, ro)
		r, a := b.user(), b.user()
		b.follow(r, a)
		for i := range 3 {
			b.cachePost(b.post(a, base+int64(i)))
		}
		p, err := ro.Home(b.ctx, r, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		if !p.Cold || len(p.Items) != 3 {
			t.Fatalf("read-only read of a cold reader: cold %v, %d items; want cold, 3", p.Cold, len(p.Items))
		}
		sameFeed(t, "read-only", b.readAll(func(c string) (Page, error) { return ro.Home(b.ctx, r, c, 2) }, 2), b.truth(r))
		waitIdle(ro) // every background write the reads queued is done (a read-only Feed queues none)
		var n int
		if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM user_activity WHERE user_id = $1`, r).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("a read-only read wrote the reader's activity")
		}
		if ex := b.rdb.Exists(b.ctx, b.inboxKey(r)).Val(); ex != 0 {
			t.Errorf("a read-only read rebuilt the inbox")
		}
		if p, err := ro.Home(b.ctx, r, "", 10); err != nil || !p.Cold {
			t.Errorf("the second read-only read: cold %v, err %v; want still cold", p.Cold, err)
		}

		// The normal Feed: the same read rebuilds, and then reads warm.
		if p, err := b.feed.Home(b.ctx, r, "", 10); err != nil || !p.Cold {
			t.Fatalf("first read of a cold reader: cold %v, err %v", p.Cold, err)
		}
		testenv.Eventually(t, 10*time.Second, "the inbox is rebuilt and the reader's activity written", func() bool {
			p, err := b.feed.Home(b.ctx, r, "", 10)
			var n int
			_ = b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM user_activity WHERE user_id = $1`, r).Scan(&n)
			return err == nil && !p.Cold && n == 1
		})
	}()
}
