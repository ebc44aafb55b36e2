package readmodel

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/feedco/feed/testkit/testenv"
)

// keyBytesOver is how many bytes MEMORY USAGE counts for key beyond what
// the deployment's key (without the test's prefix) takes: the prefix's
// length, subtracted so that the figures are the deployment's.
func keyBytesOver(prefix string) int64 { return int64(len(prefix)) }

// TestNotificationMemoryAtHorizonSizes measures what a user's
// notifications cost at the sizes the horizon gives (docs/capacity.md:
// about 13 at 3.3 received a day over 4 days) and at the bound: MEMORY
// USAGE of `notif:{u}` (a listpack; members of 17 bytes, a follow's 9,
// one in 40 a follow; the floor sentinel), the test prefix's bytes taken
// off, plus the expires table's 32 bytes (TestEngagementMemory's
// figure); a set holding its floor alone; a guard hash of one undo. The
// figures of docs/benchmarks.md, Projections, "Notifications: bytes a
// notification".
func TestNotificationMemoryAtHorizonSizes(t *testing.T) {
	ctx := context.Background()
	rd := testenv.NewRedis(t)
	const expiry = 32 // the expires table's entry a key (benchmarks.md, "Engagement memory")
	m := NewNotifications(Keys{Prefix: rd.Prefix}, MaxNotificationsMax, 0).WithHorizon(DefaultPolicy().Horizon(nil))
	now := time.Now().UnixMilli()
	over := keyBytesOver(rd.Prefix)
	user := int64(412_345_678) // an id of a 300M-user deployment
	var lines []string
	for _, n := range []int{5, 10, 13, 30, 120} {
		ns := make([]Notification, n)
		step := DefaultPolicy().PostHorizon.Milliseconds() / int64(n+1) // spread over the horizon
		for i := range ns {
			ns[i] = Notification{Type: byte(1 + i%4), Actor: 300_000_000 + int64(i)*7_919, Post: 7<<58 + int64(i)<<22, MS: now - int64(i)*step - 1}
			if i%40 == 39 {
				ns[i] = Notification{Type: NotifyFollow, Actor: ns[i].Actor, MS: ns[i].MS}
			}
		}
		pipe := rd.Client.Pipeline()
		m.WriteRebuilt(ctx, pipe, user, ns)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := m.All(ctx, rd.Client, user)
		if err != nil || len(got.Items) != n {
			t.Fatalf("%d written, %d read: %v", n, len(got.Items), err)
		}
		enc := must(rd.Client.ObjectEncoding(ctx, m.Key(user)).Result())
		bytes := must(rd.Client.MemoryUsage(ctx, m.Key(user), 0).Result()) - over + expiry
		per := float64(bytes) / float64(n)
		lines = append(lines, fmt.Sprintf("%d a set: %d bytes with its expiry (%s), %.1f a notification", n, bytes, enc, per))
		if enc != "listpack" || per < 17 || per > 120 {
			t.Fatalf("%d a set: %s, %.1f bytes a notification: want a listpack of 17..120", n, enc, per)
		}
	}
	// A built set holding only its floor (a completion that found nothing
	// inside the horizon).
	if _, err := m.Complete(ctx, rd.Client, user+1, []Notification{{Type: NotifyFollow, Actor: 5, MS: now - 5*24*3_600_000}}); err != nil {
		t.Fatal(err)
	}
	floorOnly := must(rd.Client.MemoryUsage(ctx, m.Key(user+1), 0).Result()) - over + expiry
	// A guard hash of one undo (kept a day).
	if _, err := m.Remove(ctx, rd.Client, user+2, Notification{Type: NotifyLike, Actor: 300_000_001, Post: 7 << 58, MS: now}, 2); err != nil {
		t.Fatal(err)
	}
	guard := must(rd.Client.MemoryUsage(ctx, m.guardKey(user+2), 0).Result()) - over + expiry
	lines = append(lines, fmt.Sprintf("a set holding its floor alone: %d bytes; a guard hash of one undo: %d bytes (expiries included)", floorOnly, guard))
	t.Log("notifications, keys as deployed (the test prefix's bytes taken off):\n" + strings.Join(lines, "\n"))
}

// TestLiveStateMemory measures the live streams' Redis state: the
// `online` sorted set per online user (100,000 users with ids past 300M,
// a skiplist) and the changes stream per change (10,000 deletions;
// 10,000 edits of 100 characters), each change with its mark key and the
// mark's expiry (32 bytes). Wake-ups are sharded Pub/Sub: nothing stored.
// The figures of docs/benchmarks.md, Projections, "Live streams' Redis
// state".
func TestLiveStateMemory(t *testing.T) {
	ctx := context.Background()
	rd := testenv.NewRedis(t)
	l := NewLive(Keys{Prefix: rd.Prefix})
	over := keyBytesOver(rd.Prefix)
	const users = 100_000
	batch := make([]int64, 0, 1000)
	until := time.Now().Add(time.Minute)
	for u := int64(0); u < users; u++ {
		batch = append(batch, 300_000_000+u*2_999)
		if len(batch) == cap(batch) {
			if err := l.MarkOnline(ctx, rd.Client, batch, until); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	online := float64(must(rd.Client.MemoryUsage(ctx, l.onlineKey(), 0).Result())-over) / users
	if online < 16 || online > 200 {
		t.Fatalf("%.1f bytes an online user: outside 16..200", online)
	}
	perChange := func(name string, n int, mk func(i int) Change) float64 {
		t.Helper()
		if err := rd.Client.Del(ctx, l.changesKey()).Err(); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		for i := range n {
			if err := l.AppendChange(ctx, rd.Client, mk(i), now); err != nil {
				t.Fatal(err)
			}
		}
		stream := must(rd.Client.MemoryUsage(ctx, l.changesKey(), 0).Result()) - over
		mark := must(rd.Client.MemoryUsage(ctx, l.changeMark(mk(0)), 0).Result()) - over + 32
		if got := must(rd.Client.XLen(ctx, l.changesKey()).Result()); got != int64(n) {
			t.Fatalf("%s: %d entries, want %d", name, got, n)
		}
		per := float64(stream)/float64(n) + float64(mark)
		t.Logf("changes stream, %s: %.1f bytes an entry, a mark %d bytes with its expiry: %.1f a change", name, float64(stream)/float64(n), mark, per)
		return per
	}
	del := perChange("deletions", 10_000, func(i int) Change {
		return Change{Post: 7<<58 + int64(i)<<22, Author: 300_000_000 + int64(i), Deleted: true}
	})
	edit := perChange("edits of 100 characters", 10_000, func(i int) Change {
		return Change{Post: 8<<58 + int64(i)<<22, Author: 300_000_000 + int64(i), Version: 2, Content: strings.Repeat("x", 100), EditedAt: time.Now()}
	})
	t.Logf("live state: %.1f bytes an online user; a deletion %.1f, an edit %.1f bytes while the stream keeps it (%v)", online, del, edit, ChangesKept)
}
