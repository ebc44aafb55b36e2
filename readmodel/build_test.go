package readmodel

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/feedco/feed/testkit/testenv"
)

// builtChunk is an InboxChunk over inboxes computed beforehand.
type builtChunk struct {
	users   []int64
	expires []int64
	inboxes []BuiltInbox
}

func (c builtChunk) Len() int { return len(c.users) }

func (c builtChunk) Inbox(i int, b *BuiltInbox) (int64, int64, bool) {
	in := c.inboxes[i]
	if len(in.Kept) == 0 && !in.HasFloor {
		return 0, 0, false
	}
	b.Kept = append(b.Kept[:0], in.Kept...)
	b.Floor, b.HasFloor = in.Floor, in.HasFloor
	return c.users[i], c.expires[i], true
}

// randomChunk makes n inboxes of up to size posts, newest first, with
// same-millisecond runs (ordered by id, not by their decimal's bytes) and a
// floor on about half of them, each expiring within a day.
func randomChunk(rnd *rand.Rand, n, size int, nowMs int64) builtChunk {
	var c builtChunk
	for u := range n {
		var in BuiltInbox
		ms := int64(1764498000000)
		k := size
		if size > 4 {
			k = size/2 + rnd.IntN(size/2)
		}
		for i := range k {
			if rnd.IntN(3) > 0 {
				ms -= int64(1 + rnd.IntN(5))
			}
			id := ms<<22 | int64(1_000_000-i)
			if rnd.IntN(7) == 0 {
				id = int64(9 + i) // short decimals: byte order is not numeric order
			}
			in.Kept = append(in.Kept, Entry{ID: id, Ms: ms})
		}
		if rnd.IntN(2) == 0 {
			in.Floor, in.HasFloor = ms-1, true
		}
		c.users = append(c.users, int64(u+1))
		c.expires = append(c.expires, nowMs+int64(time.Hour/time.Millisecond)+rnd.Int64N(int64(23*time.Hour/time.Millisecond)))
		c.inboxes = append(c.inboxes, in)
	}
	// One with nothing to write, and one that expired already.
	c.users, c.expires, c.inboxes = append(c.users, int64(n+1)), append(c.expires, nowMs+1000), append(c.inboxes, BuiltInbox{})
	c.users, c.expires = append(c.users, int64(n+2)), append(c.expires, nowMs-1)
	c.inboxes = append(c.inboxes, BuiltInbox{Kept: []Entry{{ID: 5, Ms: 5}}})
	return c
}

// The RESTORE writer and the plain ZADD writer build the same inboxes:
// the same members with the same scores, the same sentinels, the same TTL
// (within the test's run time), and nothing for an inbox without posts or
// one that expired before it was written.
func TestBuildWritersAgree(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(3, 4))
	now := time.Now().UnixMilli()
	nowMs := func() int64 { return now }
	for _, size := range []int{1, 30, 500} {
		restore := NewInboxes(Keys{Prefix: fmt.Sprintf("%srestore%d:", rd.Prefix, size)}, Policy{})
		zadd := NewInboxes(Keys{Prefix: fmt.Sprintf("%szadd%d:", rd.Prefix, size)}, Policy{})
		c := randomChunk(rnd, 20, size, now)
		var b BuildBuffers
		rw := restore.RestoreBuildWriter()
		if err := rw.WriteChunk(ctx, rd.Client, c, nowMs, &b); err != nil {
			t.Fatal(err)
		}
		if !rw.(*restoreWriter).restore.Load() {
			t.Fatal("the server refused a RESTORE: the writers were not compared")
		}
		if err := zadd.ZaddBuildWriter().WriteChunk(ctx, rd.Client, c, nowMs, &b); err != nil {
			t.Fatal(err)
		}
		for i, u := range c.users {
			a, z := restore.Key(u), zadd.Key(u)
			ga := rd.Client.ZRangeWithScores(ctx, a, 0, -1).Val()
			gz := rd.Client.ZRangeWithScores(ctx, z, 0, -1).Val()
			if fmt.Sprint(ga) != fmt.Sprint(gz) {
				t.Fatalf("size %d, user %d: restore %v\n zadd %v", size, u, ga, gz)
			}
			in := c.inboxes[i]
			if i >= 20 {
				if len(ga) != 0 {
					t.Fatalf("size %d, user %d: written, want nothing (%v)", size, u, ga)
				}
				continue
			}
			want := len(in.Kept) + 1
			if in.HasFloor {
				want++
			}
			if len(ga) != want || ga[len(ga)-1].Member != SentinelBuilt || in.HasFloor != (ga[0].Member == SentinelFloor) {
				t.Fatalf("size %d, user %d: %d members %v, want %d with the sentinels", size, u, len(ga), ga, want)
			}
			ta, tz := rd.Client.PTTL(ctx, a).Val(), rd.Client.PTTL(ctx, z).Val()
			wantTTL := time.Duration(c.expires[i]-now) * time.Millisecond
			if d := ta - tz; d < -time.Minute || d > time.Minute || ta > wantTTL || ta < wantTTL-time.Minute {
				t.Fatalf("size %d, user %d: TTL restore %v, zadd %v, want %v", size, u, ta, tz, wantTTL)
			}
			if ea, ez := rd.Client.ObjectEncoding(ctx, a).Val(), rd.Client.ObjectEncoding(ctx, z).Val(); ea != ez {
				t.Fatalf("size %d, user %d: encodings restore %s, zadd %s", size, u, ea, ez)
			}
		}
	}
}

// BenchmarkBuildInboxRestoreVsZadd writes chunks of 256 full inboxes (about
// 430 posts each, as trims leave them) with each writer: the measurement
// behind RestoreBuildWriter (a ZADD of n members into a listpack scans it
// for each, O(n²) in Redis; a RESTORE is one copy). Redis's own CPU is in
// the wall time: the client waits for every reply.
func BenchmarkBuildInboxRestoreVsZadd(b *testing.B) {
	rd := testenv.NewRedis(b)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	nowMs := func() int64 { return now }
	c := randomChunk(rand.New(rand.NewPCG(5, 6)), 256, 430*2, now)
	for _, w := range []struct {
		name string
		make func(Inboxes) InboxBuildWriter
	}{
		{"restore", Inboxes.RestoreBuildWriter},
		{"zadd", Inboxes.ZaddBuildWriter},
	} {
		b.Run(w.name, func(b *testing.B) {
			var buf BuildBuffers
			for i := range b.N {
				m := NewInboxes(Keys{Prefix: fmt.Sprintf("%s%s%d:", rd.Prefix, w.name, i)}, Policy{})
				if err := w.make(m).WriteChunk(ctx, rd.Client, c, nowMs, &buf); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				testenv.DeletePrefix(ctx, rd.Client, fmt.Sprintf("%s%s%d:", rd.Prefix, w.name, i))
				b.StartTimer()
			}
		})
	}
}
