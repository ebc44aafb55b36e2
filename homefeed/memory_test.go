package homefeed

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// TestInboxMemoryAtBounds measures what a packed inbox holds and costs
// in steady state at the default bound (500) and at 400, the bound
// docs/capacity.md takes at the seeds' scale: 400 built inboxes, each
// post pushed to 100 of them at random (PushAll, the projector's merges
// and trims), until they have received their bound and half as much
// again; then MEMORY USAGE of both keys of every inbox (the test prefix's
// bytes taken off) over their real entries, and the entries an inbox
// holds on average (inboxes at every phase of the trim cycle). The
// figures of docs/benchmarks.md, Projections, "Packed inboxes at a lower
// bound".
func TestInboxMemoryAtBounds(t *testing.T) {
	ctx := context.Background()
	rd := testenv.NewRedis(t)
	const inboxes, fanout = 400, 100
	for _, bound := range []int{500, 400} {
		pol := readmodel.Policy{InboxMax: bound}.WithDefaults()
		keys := readmodel.Keys{Prefix: rd.Prefix + "b" + string(rune('0'+bound/100)) + ":"}
		pk := NewInboxes(keys, pol)
		users := make([]int64, inboxes)
		for i := range users {
			users[i] = 300_000_000 + int64(i)*7_919 // ids of a 300M-user deployment
			if err := pk.WriteRebuilt(ctx, rd.Client, users[i], nil); err != nil {
				t.Fatal(err)
			}
		}
		rng := rand.New(rand.NewPCG(55, uint64(bound)))
		posts := inboxes * bound * 3 / 2 / fanout
		for k := range posts {
			for i := range fanout {
				j := i + rng.IntN(len(users)-i)
				users[i], users[j] = users[j], users[i]
			}
			if _, err := pk.PushAll(ctx, rd.Client, users[:fanout], pk.NewPush(snow(testBaseMs+int64(k), int64(k)))); err != nil {
				t.Fatal(err)
			}
		}
		pipe := rd.Client.Pipeline()
		var usage []*redis.IntCmd
		for _, u := range users {
			s, bk := pk.Keys(u)
			usage = append(usage, pipe.MemoryUsage(ctx, s, 0), pipe.MemoryUsage(ctx, bk, 0))
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		var mem, entries int64
		for _, u := range usage {
			if u.Val() > 0 { // a missing buffer is 0
				mem += u.Val() - int64(len(keys.Prefix))
			}
		}
		for _, u := range users {
			ids, err := pk.Posts(ctx, rd.Client, u)
			if err != nil {
				t.Fatal(err)
			}
			entries += int64(len(ids))
		}
		per, avg := float64(mem)/float64(entries), float64(entries)/inboxes
		t.Logf("bound %d (a trim keeps %d, trims start over %d): %.1f entries an inbox, %.2f bytes an entry, %.0f bytes an inbox",
			bound, pol.InboxKeep(), pol.InboxTrimOver(), avg, per, float64(mem)/inboxes)
		if avg < float64(pol.InboxKeep()) || avg > float64(bound+64) || per < 8 || per > 12 {
			t.Fatalf("bound %d: %.1f entries an inbox, %.2f bytes an entry: want %d..%d entries of 8..12 bytes", bound, avg, per, pol.InboxKeep(), bound+64)
		}
	}
}
