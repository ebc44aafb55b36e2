package readmodel

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/testkit/testenv"
)

// apply runs one follow-pair event through the projector's scripts (the
// following side: the followee's count is left at 0, from position 1).
func apply(t *testing.T, rdb redis.UniversalClient, m Follows, follower, followee, version int64, follow bool) {
	t.Helper()
	if follow != (version%2 == 1) {
		t.Fatalf("follow %v at version %d: Followed versions are odd", follow, version)
	}
	applyEvent(t, rdb, m, FollowEvent{Follower: follower, Followee: followee, Version: version, Position: 1})
}

// applyEvent runs one follow-pair event through the projector's scripts.
func applyEvent(t *testing.T, rdb redis.UniversalClient, m Follows, e FollowEvent) {
	t.Helper()
	err := Exec(context.Background(), rdb, func(p redis.Pipeliner) {
		m.QueueApply(context.Background(), p, e)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func following(t *testing.T, rdb redis.UniversalClient, k Keys, user int64) []int64 {
	t.Helper()
	ss, err := rdb.SMembers(context.Background(), k.Following(user)).Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, s := range ss {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("member %q", s)
		}
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func followingBuilt(t *testing.T, rdb redis.UniversalClient, m Follows, user int64) bool {
	t.Helper()
	pipe := rdb.Pipeline()
	b := m.QueueFollowingBuilt(context.Background(), pipe, user)
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b.Val()
}

// A following state recreated by the projector after a loss is not built;
// the rebuild merges a PostgreSQL snapshot into it pair by pair, by
// version, so whatever the projector applied before or after the
// snapshot, the result is what applying every event leaves.
func TestFollowingRebuildMergesByVersion(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	k := Keys{Prefix: rd.Prefix}
	m := NewFollows(k)
	ctx := context.Background()
	const u = 1

	// After a FLUSHDB, the projector applies: a new follow of 10 (v1), an
	// unfollow of 11 (v4) that the snapshot below predates, and a follow of
	// 12 (v3) that the snapshot has too.
	apply(t, rd.Client, m, u, 10, 1, true)
	apply(t, rd.Client, m, u, 11, 4, false)
	apply(t, rd.Client, m, u, 12, 3, true)
	if followingBuilt(t, rd.Client, m, u) {
		t.Fatal("a following state the projector recreated reads as built")
	}
	// The snapshot: 11 followed at v3 (older than the applied v4), 12 at
	// v3, 13 at v1 (not applied yet), 14 at v5 (the projector has v1
	// redelivered later).
	snap := []FollowPair{{11, 3, false, NoBlock}, {12, 3, false, NoBlock}, {13, 1, false, NoBlock}, {14, 5, false, NoBlock}}
	if err := m.WriteRebuiltFollowing(ctx, rd.Client, u, snap); err != nil {
		t.Fatal(err)
	}
	if !followingBuilt(t, rd.Client, m, u) {
		t.Fatal("the rebuilt following state is not built")
	}
	if got, want := following(t, rd.Client, k, u), []int64{10, 12, 13, 14}; !slices.Equal(got, want) {
		t.Fatalf("following %v, want %v (11's newer unfollow kept)", got, want)
	}
	// Redelivered and late events after the rebuild: an old Followed of 14
	// (v1) and 11's Followed v3 change nothing; 13's Unfollowed v2 applies.
	apply(t, rd.Client, m, u, 14, 1, true)
	apply(t, rd.Client, m, u, 11, 3, true)
	apply(t, rd.Client, m, u, 13, 2, false)
	if got, want := following(t, rd.Client, k, u), []int64{10, 12, 14}; !slices.Equal(got, want) {
		t.Fatalf("following %v after redeliveries, want %v", got, want)
	}

	// More pairs than one script call takes: ~built only after the last.
	const v = 2
	var many []FollowPair
	for i := range 3*rebuildChunk + 7 {
		many = append(many, FollowPair{Followee: int64(1000 + i), Version: 1})
	}
	if err := m.WriteRebuiltFollowing(ctx, rd.Client, v, many); err != nil {
		t.Fatal(err)
	}
	if got := following(t, rd.Client, k, v); len(got) != len(many) || !followingBuilt(t, rd.Client, m, v) {
		t.Fatalf("%d followees (built %v), want %d and built", len(got), followingBuilt(t, rd.Client, m, v), len(many))
	}
	// A user who follows nobody: built with ~built alone.
	if err := m.WriteRebuiltFollowing(ctx, rd.Client, 3, nil); err != nil || !followingBuilt(t, rd.Client, m, 3) {
		t.Fatalf("empty rebuild: built %v (%v)", followingBuilt(t, rd.Client, m, 3), err)
	}
}

// A timeline recreated by the projector's adds is not built (it holds the
// posts since the loss only); the rebuild adds the snapshot, keeps what
// the projector added, cuts at the bound with ~floor and marks it built.
// The celebrity set likewise.
func TestTimelineAndCelebritiesRebuild(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	k := Keys{Prefix: rd.Prefix}
	ctx := context.Background()
	tl := NewTimelines(k, 3)
	if err := tl.Add(ctx, rd.Client, 7, 105, 105); err != nil {
		t.Fatal(err)
	}
	read := func() Page {
		t.Helper()
		pipe := rd.Client.Pipeline()
		r := tl.QueueRange(ctx, pipe, 7, MaxScoreMs, 10)
		if err := ExecReads(ctx, pipe); err != nil {
			t.Fatal(err)
		}
		p, err := r.Result()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := read(); p.Built || len(p.Reply) != 1 || p.Reply[0].Member != "105" {
		t.Fatalf("after an add to a lost timeline: %+v, want one post, not built", p)
	}
	if err := tl.WriteRebuilt(ctx, rd.Client, 7, []Entry{{104, 104}, {103, 103}, {102, 102}}); err != nil {
		t.Fatal(err)
	}
	p := read()
	var ids []string
	for _, z := range p.Reply {
		if m := z.Member.(string); !IsSentinel(m) {
			ids = append(ids, m)
		}
	}
	if !p.Built || p.Floor == nil || *p.Floor != 102 || !slices.Equal(ids, []string{"105", "104", "103"}) {
		t.Fatalf("rebuilt timeline: members %v built %v floor %v; want 105 104 103 above ~floor 102, built", ids, p.Built, p.Floor)
	}

	c := NewCelebrities(k)
	if err := Exec(ctx, rd.Client, func(p redis.Pipeliner) { c.QueueSet(ctx, p, 5, true) }); err != nil {
		t.Fatal(err)
	}
	if got, built, err := c.Members(ctx, rd.Client); err != nil || built || len(got) != 1 {
		t.Fatalf("after one move: %v built %v (%v); want [5], not built", got, built, err)
	}
	if err := c.WriteRebuilt(ctx, rd.Client, []int64{6, 7}); err != nil {
		t.Fatal(err)
	}
	got, built, err := c.Members(ctx, rd.Client)
	if err != nil || !built || len(got) != 3 {
		t.Fatalf("rebuilt: %v built %v (%v); want 5, 6, 7 and built", got, built, err)
	}
}
