package readmodel

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/testkit/testenv"
)

// A followee's count is the one its newest event (by log position)
// carries, whatever order the events arrive in and however often: a late
// event of an older position, a redelivery, or a whole partition replayed
// changes nothing.
func TestFollowerCountAnyOrder(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	const a = 7
	// a's history: followers come and go; position and count per event.
	var evs []FollowEvent
	count, pos := int64(0), int64(100)
	versions := map[int64]int64{}
	rng := rand.New(rand.NewPCG(3, 5))
	for range 60 {
		f := int64(20 + rng.IntN(8))
		versions[f]++
		if versions[f]%2 == 1 {
			count++
		} else {
			count--
		}
		pos += int64(1 + rng.IntN(3)) // positions have gaps
		evs = append(evs, FollowEvent{Follower: f, Followee: a, Version: versions[f], Position: pos, Followers: count})
	}
	for trial := range 10 {
		m := NewFollows(Keys{Prefix: rd.Prefix + strconv.Itoa(trial) + ":"})
		order := slices.Clone(evs)
		if trial > 0 {
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			order = append(order, order[:rng.IntN(len(order))]...) // redeliveries
		}
		for _, e := range order {
			applyEvent(t, rd.Client, m, e)
		}
		n, built, err := m.CountOf(ctx, rd.Client, a)
		if err != nil {
			t.Fatal(err)
		}
		if n != count || built {
			t.Fatalf("trial %d: count %d (built %v), want %d (not built)", trial, n, built, count)
		}
		f, err := rd.Client.HGetAll(ctx, m.keys.Followers(a)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(f) != 2 || f[FollowersPositionField] != strconv.FormatInt(pos, 10) {
			t.Fatalf("trial %d: followers hash %v, want count and %s %d alone", trial, f, FollowersPositionField, pos)
		}
		// The following sets agree with the pair versions whatever the order.
		for u, v := range versions {
			is, err := m.FollowsEach(ctx, rd.Client, u, strconv.Itoa(a))
			if err != nil {
				t.Fatal(err)
			}
			if is[0] != (v%2 == 1) {
				t.Fatalf("trial %d: %d follows %d: %v, want %v (version %d)", trial, u, a, is[0], v%2 == 1, v)
			}
		}
	}
}

// pairEvent is one follow-pair or mute-pair event of user 1.
type pairEvent struct {
	account, version int64
	mute             bool
}

// The following state is a function of each pair's newest follow and
// mute versions: any order, any redelivery, the same set and the same
// hash, and the hash stores no version the set implies (followed once,
// not muted).
func TestFollowingStateAnyOrderCompact(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	const u = 1
	rng := rand.New(rand.NewPCG(11, 13))
	var history []pairEvent
	fv, mv := map[int64]int64{}, map[int64]int64{}
	for range 120 {
		a := int64(10 + rng.IntN(15))
		if rng.IntN(5) == 0 {
			mv[a]++
			history = append(history, pairEvent{a, mv[a], true})
		} else {
			fv[a]++
			history = append(history, pairEvent{a, fv[a], false})
		}
	}
	var wantSet []int64
	wantHash := map[string]string{}
	for a := int64(10); a < 25; a++ {
		member := fv[a]%2 == 1 && mv[a]%2 == 0
		if member {
			wantSet = append(wantSet, a)
		}
		if fv[a] > 0 && !ImpliedFollowVersion(fv[a], member) {
			wantHash[itoa(a)] = itoa(fv[a])
		}
		if mv[a] > 0 {
			wantHash[MuteField(a)] = itoa(mv[a])
		}
	}
	for trial := range 12 {
		k := Keys{Prefix: rd.Prefix + strconv.Itoa(trial) + ":"}
		m := NewFollows(k)
		order := slices.Clone(history)
		if trial > 0 {
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			order = append(order, order[:rng.IntN(len(order))]...)
		}
		for _, e := range order {
			if e.mute {
				applyMute(t, rd.Client, m, u, e.account, e.version)
			} else {
				apply(t, rd.Client, m, u, e.account, e.version, e.version%2 == 1)
			}
		}
		if got := following(t, rd.Client, k, u); !slices.Equal(got, wantSet) {
			t.Fatalf("trial %d: following %v, want %v", trial, got, wantSet)
		}
		got, err := rd.Client.HGetAll(ctx, k.FollowingVersions(u)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(wantHash) {
			t.Fatalf("trial %d: versions %v, want %v", trial, got, wantHash)
		}
		for f, v := range wantHash {
			if got[f] != v {
				t.Fatalf("trial %d: versions %v, want %v", trial, got, wantHash)
			}
		}
	}
}

// Keys in the layout before the compact one (a version per follower in
// followers:{a}, every pair's version in following_v:{u}) are applied to
// correctly: their stored versions still guard, the count moves to the
// newest event's, and a pair whose version the set now implies loses its
// field.
func TestFollowGraphPreviousLayoutKeys(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	k := Keys{Prefix: rd.Prefix}
	m := NewFollows(k)
	const a, u = 7, 1
	// The previous layout: 1 and 2 follow a (versions 1 and 3), 3 unfollowed
	// it (version 2); u follows 7 and 8 at version 1, unfollowed 9 (v2).
	if err := Exec(ctx, rd.Client, func(p redis.Pipeliner) {
		p.HSet(ctx, k.Followers(a), "1", 1, "2", 3, "3", 2, "count", 2, SentinelBuilt, 1)
		p.SAdd(ctx, k.Following(u), 7, 8)
		p.HSet(ctx, k.FollowingVersions(u), "7", 1, "8", 1, "9", 2, SentinelBuilt, 1)
	}); err != nil {
		t.Fatal(err)
	}
	// A late Followed of 9 (v1) changes nothing; an Unfollowed of 7 (v2)
	// applies; a Followed of 10 (v1) is implied by the set.
	apply(t, rd.Client, m, u, 9, 1, true)
	applyEvent(t, rd.Client, m, FollowEvent{Follower: u, Followee: a, Version: 2, Position: 50, Followers: 1})
	apply(t, rd.Client, m, u, 7, 2, false)
	apply(t, rd.Client, m, u, 10, 1, true)
	if got := following(t, rd.Client, k, u); !slices.Equal(got, []int64{8, 10}) {
		t.Fatalf("following %v, want [8 10]", got)
	}
	if v := rd.Client.HGet(ctx, k.FollowingVersions(u), "7").Val(); v != "2" {
		t.Fatalf("version of 7: %q, want 2", v)
	}
	if rd.Client.HExists(ctx, k.FollowingVersions(u), "10").Val() {
		t.Fatal("the implied version of 10 is stored")
	}
	n, built, err := m.CountOf(ctx, rd.Client, a)
	if err != nil || n != 1 || !built {
		t.Fatalf("count %d built %v (%v), want 1 and built", n, built, err)
	}
	// An older event (position 40) changes the count no more.
	applyEvent(t, rd.Client, m, FollowEvent{Follower: 5, Followee: a, Version: 1, Position: 40, Followers: 9})
	if n, _, _ := m.CountOf(ctx, rd.Client, a); n != 1 {
		t.Fatalf("count %d after an older event, want 1", n)
	}
}
