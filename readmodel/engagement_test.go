package readmodel

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/testkit/testenv"
)

func exec(t *testing.T, rdb redis.UniversalClient, fill func(redis.Pipeliner)) {
	t.Helper()
	if err := Exec(context.Background(), rdb, fill); err != nil {
		t.Fatal(err)
	}
}

func readCounts(t *testing.T, rdb redis.UniversalClient, e Engagement, posts ...int64) []Counts {
	t.Helper()
	var r CountReads
	exec(t, rdb, func(p redis.Pipeliner) { r = e.QueueCounts(context.Background(), p, posts) })
	out := make([]Counts, r.Len())
	for j := range out {
		c, err := r.At(j)
		if err != nil {
			t.Fatal(err)
		}
		out[j] = c
	}
	return out
}

// Counts set by events at positions keep the newest position's count
// under any order of delivery and any redelivery; an absent key is zero,
// and a rebuild at a snapshot position loses to a newer event.
func TestCountsNewestPositionWins(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	type ev struct {
		field      CountField
		count, pos int64
	}
	// Likes and reposts of post 7 in position order; the last of each
	// field is what must stay.
	evs := []ev{{CountLikes, 1, 10}, {CountReposts, 1, 11}, {CountLikes, 2, 12}, {CountReplies, 1, 13},
		{CountLikes, 1, 14}, {CountReposts, 0, 15}, {CountReposts, 1, 16}, {CountReplies, 0, 17}}
	want := Counts{Likes: 1, Reposts: 1, Replies: 0}
	rng := rand.New(rand.NewPCG(3, 5))
	for trial := range 10 {
		e := NewEngagement(Keys{Prefix: rd.Prefix + string(rune('a'+trial)) + ":"})
		order := slices.Clone(evs)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		order = append(order, order[:3]...) // redeliveries
		for _, x := range order {
			exec(t, rd.Client, func(p redis.Pipeliner) { e.QueueSetCount(context.Background(), p, 7, x.field, x.count, x.pos) })
		}
		got := readCounts(t, rd.Client, e, 7, 8)
		if got[0] != want || got[1] != (Counts{}) {
			t.Fatalf("order %v: counts %+v, want %+v and zero", order, got, want)
		}
	}
	e := NewEngagement(Keys{Prefix: rd.Prefix + "b:"})
	if ok, err := e.SetCount(context.Background(), rd.Client, 7, CountLikes, 5, 20); err != nil || !ok {
		t.Fatalf("SetCount: %v %v", ok, err)
	}
	exec(t, rd.Client, func(p redis.Pipeliner) {
		e.QueueBuildCounts(context.Background(), p, 7, Counts{Likes: 4, Reposts: 2, Replies: 3}, 19)
	})
	if got := readCounts(t, rd.Client, e, 7)[0]; got != (Counts{Likes: 5, Reposts: 2, Replies: 3}) {
		t.Fatalf("after an older snapshot: %+v, want the newer like count kept", got)
	}
}

// The viewer state of a page is two commands, whatever its length.
func TestViewerStateTwoCommands(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	e := NewEngagement(Keys{Prefix: rd.Prefix})
	ctx := context.Background()
	exec(t, rd.Client, func(p redis.Pipeliner) {
		e.QueueLiked(ctx, p, 1, 100, true)
		e.QueueLiked(ctx, p, 1, 101, true)
		e.QueueLiked(ctx, p, 1, 101, false)
		e.QueueReposted(ctx, p, 1, 102, true)
		e.QueueReposted(ctx, p, 2, 100, true)
		e.QueueBuildViewerState(ctx, p, 1, true, []int64{103})
	})
	pipe := rd.Client.Pipeline()
	r := e.QueueViewerState(ctx, pipe, 1, []int64{100, 101, 102, 103, 104})
	if n := pipe.Len(); n != 2 {
		t.Fatalf("%d commands queued, want 2", n)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := r.All()
	if err != nil {
		t.Fatal(err)
	}
	want := []ViewerState{{Liked: true}, {}, {Reposted: true}, {Liked: true}, {}}
	if !slices.Equal(got, want) {
		t.Fatalf("viewer state %v, want %v", got, want)
	}
	if got, _ := e.QueueViewerState(ctx, rd.Client.Pipeline(), 1, nil).All(); got != nil {
		t.Fatalf("empty page: %v", got)
	}
}

// reposts:{O} lists reposts in repost-id order, earlier than a given one
// exactly however small the pages, and forgets an undone repost.
func TestEarlierReposts(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	e := NewEngagement(Keys{Prefix: rd.Prefix})
	ctx := context.Background()
	const o = 42
	// Ids above 2^56 and reposter ids with high bytes set catch a
	// little-endian or decimal member.
	var rs []Repost
	for i := range 23 {
		rs = append(rs, Repost{ID: 1<<60 + int64(i)*257, Reposter: int64(1000 - i)})
	}
	shuffled := slices.Clone(rs)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	exec(t, rd.Client, func(p redis.Pipeliner) {
		for _, r := range shuffled {
			e.QueueAddRepost(ctx, p, o, r)
		}
		e.QueueAddRepost(ctx, p, o, rs[0]) // a redelivery
		e.QueueRemoveRepost(ctx, p, o, rs[5])
		e.QueueRemoveRepost(ctx, p, o, rs[5])
	})
	live := slices.Delete(slices.Clone(rs), 5, 6)
	for _, size := range []int64{1, 4, 100} {
		all, err := e.EarlierReposts(ctx, rd.Client, o, 0, size)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(all, live) {
			t.Fatalf("page size %d: all reposts %v, want %v", size, all, live)
		}
		before, err := e.EarlierReposts(ctx, rd.Client, o, rs[10].ID, size)
		if err != nil {
			t.Fatal(err)
		}
		if want := live[:9]; !slices.Equal(before, want) {
			t.Fatalf("page size %d: earlier than %d: %v, want %v", size, rs[10].ID, before, want)
		}
		first, err := e.EarlierReposts(ctx, rd.Client, o, rs[0].ID, size)
		if err != nil || len(first) != 0 {
			t.Fatalf("earlier than the first: %v %v", first, err)
		}
	}
	pipe := rd.Client.Pipeline()
	page := e.QueueRepostsPage(ctx, pipe, o, 0, rs[2], 3)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	got, more, err := page.Result()
	if err != nil || !more || !slices.Equal(got, []Repost{rs[3], rs[4], rs[6]}) {
		t.Fatalf("page after %v: %v more %v err %v", rs[2], got, more, err)
	}
}

// Block fields of both accounts are set by version only, in any order;
// QueueRelations reads mutes and blocks of a page in one HMGET.
func TestRelations(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	k := Keys{Prefix: rd.Prefix}
	m := NewFollows(k)
	ctx := context.Background()
	// 1 blocks 2 (v1), unblocks (v2), blocks again (v3): delivered v3, v1, v2.
	for _, v := range []int64{3, 1, 2} {
		exec(t, rd.Client, func(p redis.Pipeliner) { m.QueueApplyBlock(ctx, p, 1, 2, v) })
	}
	// 3 blocks 1 then unblocks: delivered v2, v1.
	for _, v := range []int64{2, 1} {
		exec(t, rd.Client, func(p redis.Pipeliner) { m.QueueApplyBlock(ctx, p, 3, 1, v) })
	}
	exec(t, rd.Client, func(p redis.Pipeliner) {
		m.QueueApplyBlock(ctx, p, 4, 1, 1)
		m.QueueApplyMute(ctx, p, 1, 5, 1)
	})
	rel := func(viewer int64, accounts ...int64) []Relation {
		pipe := rd.Client.Pipeline()
		r := m.QueueRelations(ctx, pipe, viewer, accounts)
		if pipe.Len() != 1 {
			t.Fatalf("%d commands, want 1", pipe.Len())
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		out, err := r.All()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	got := rel(1, 2, 3, 4, 5, 6)
	want := []Relation{{Blocks: true}, {}, {BlockedBy: true}, {Muted: true}, {}}
	if !slices.Equal(got, want) {
		t.Fatalf("relations of 1: %+v, want %+v", got, want)
	}
	if got := rel(2, 1); !slices.Equal(got, []Relation{{BlockedBy: true}}) || !got[0].Blocked() {
		t.Fatalf("relations of 2: %+v", got)
	}
}

// Names are written once.
func TestNamesWrittenOnce(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	n := NewNames(Keys{Prefix: rd.Prefix})
	ctx := context.Background()
	exec(t, rd.Client, func(p redis.Pipeliner) {
		n.QueueSet(ctx, p, 1, "ada")
		n.QueueSet(ctx, p, 1, "other")
	})
	pipe := rd.Client.Pipeline()
	r := n.QueueNames(ctx, pipe, []int64{1, 2})
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	if s, ok, err := r.At(0); s != "ada" || !ok || err != nil {
		t.Fatalf("name of 1: %q %v %v", s, ok, err)
	}
	if s, ok, err := r.At(1); ok || err != nil {
		t.Fatalf("name of 2: %q %v %v", s, ok, err)
	}
}

// A repost member is 16 big-endian bytes and round-trips.
func TestRepostMember(t *testing.T) {
	r := Repost{ID: 0x0102030405060708, Reposter: 0x1112131415161718}
	m := RepostMember(r)
	if m != "\x01\x02\x03\x04\x05\x06\x07\x08\x11\x12\x13\x14\x15\x16\x17\x18" {
		t.Fatalf("member %q", m)
	}
	if got, err := ParseRepostMember(m); err != nil || got != r {
		t.Fatalf("parsed %v %v", got, err)
	}
	if _, err := ParseRepostMember("short"); err == nil {
		t.Fatal("a short member parsed")
	}
}
