package readmodel

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/testkit/testenv"
)

func applyMute(t *testing.T, rdb redis.UniversalClient, m Follows, muter, muted, version int64) {
	t.Helper()
	err := Exec(context.Background(), rdb, func(p redis.Pipeliner) {
		m.QueueApplyMute(context.Background(), p, muter, muted, version)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A muted account leaves the muter's following set and comes back on
// unmute while followed; the set is a function of the two pairs' newest
// versions, so every order of delivery across partitions (the follow and
// mute events of a pair are keyed alike, but a redelivery replays older
// ones) and every redelivery ends in the same set.
func TestMuteMembershipAnyOrder(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	type ev struct {
		mute    bool
		version int64
	}
	// The pair's history: followed v1, muted v1, unfollowed v2, followed
	// v3, unmuted v2, muted v3. After each prefix, want says whether the
	// account is in the set.
	history := []ev{{false, 1}, {true, 1}, {false, 2}, {false, 3}, {true, 2}, {true, 3}}
	want := []bool{true, false, false, false, true, false}
	rng := rand.New(rand.NewPCG(7, 9))
	for n := 1; n <= len(history); n++ {
		for trial := range 8 {
			m := NewFollows(Keys{Prefix: rd.Prefix + string(rune('a'+trial)) + itoa(int64(n)) + ":"})
			evs := slices.Clone(history[:n])
			if trial > 0 {
				rng.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
				evs = append(evs, evs[rng.IntN(len(evs))]) // a redelivery
			}
			for _, e := range evs {
				if e.mute {
					applyMute(t, rd.Client, m, 1, 10, e.version)
				} else {
					apply(t, rd.Client, m, 1, 10, e.version, e.version%2 == 1)
				}
			}
			got := slices.Contains(following(t, rd.Client, m.keys, 1), 10)
			if got != want[n-1] {
				t.Fatalf("after %d events in order %v: member %v, want %v", n, evs, got, want[n-1])
			}
			is, err := m.FollowsEach(ctx, rd.Client, 1, "10")
			if err != nil || is[0] != got {
				t.Fatalf("FollowsEach says %v (%v), the set %v", is, err, got)
			}
		}
	}
}

// The query side's rebuild merges mute pairs by version like follow pairs:
// a snapshot's mute hides a followed account, and a newer unmute the
// projector applied first keeps it shown.
func TestFollowingRebuildWithMutes(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	k := Keys{Prefix: rd.Prefix}
	m := NewFollows(k)
	ctx := context.Background()
	const u = 1
	applyMute(t, rd.Client, m, u, 12, 2) // unmuted v2, applied before the older snapshot
	snap := []FollowPair{{11, 1, false, NoBlock}, {11, 1, true, NoBlock}, {12, 1, false, NoBlock}, {12, 1, true, NoBlock}, {13, 3, false, NoBlock}}
	if err := m.WriteRebuiltFollowing(ctx, rd.Client, u, snap); err != nil {
		t.Fatal(err)
	}
	if got := following(t, rd.Client, k, u); !slices.Equal(got, []int64{12, 13}) {
		t.Fatalf("following after the rebuild: %v, want [12 13] (11 muted)", got)
	}
	if !followingBuilt(t, rd.Client, m, u) {
		t.Fatal("not built after the rebuild")
	}
	applyMute(t, rd.Client, m, u, 11, 2) // the unmute after the snapshot
	if got := following(t, rd.Client, k, u); !slices.Equal(got, []int64{11, 12, 13}) {
		t.Fatalf("following after the unmute: %v, want [11 12 13]", got)
	}
}
