package projections_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// wakeSpy receives the live streams' wake-ups of some channels, in the
// order Redis sent them.
type wakeSpy struct {
	t    *testing.T
	ps   *redis.PubSub
	rdb  redis.UniversalClient
	done string // the sentinel channel
}

func newWakeSpy(t *testing.T, rdb redis.UniversalClient, prefix string, channels ...string) *wakeSpy {
	t.Helper()
	if _, ok := rdb.(*redis.ClusterClient); ok {
		t.Skip("one subscription of channels of several slots: a single Redis server only")
	}
	s := &wakeSpy{t: t, rdb: rdb, done: prefix + "spy-done"}
	ctx := context.Background()
	s.ps = rdb.SSubscribe(ctx, append(channels, s.done)...)
	t.Cleanup(func() { _ = s.ps.Close() })
	for range len(channels) + 1 {
		if _, err := s.ps.ReceiveTimeout(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// published returns the channels published since the last call, in
// order: it publishes a sentinel and reads up to it (one server sends a
// subscriber's messages in the order they were published).
func (s *wakeSpy) published() []string {
	s.t.Helper()
	ctx := context.Background()
	if err := s.rdb.SPublish(ctx, s.done, "1").Err(); err != nil {
		s.t.Fatal(err)
	}
	var got []string
	for {
		m, err := s.ps.ReceiveTimeout(ctx, time.Minute)
		if err != nil {
			s.t.Fatal(err)
		}
		msg, ok := m.(*redis.Message)
		if !ok {
			continue
		}
		if msg.Channel == s.done {
			return got
		}
		got = append(got, msg.Channel)
	}
}

func count(chs []string, ch string) int {
	n := 0
	for _, c := range chs {
		if c == ch {
			n++
		}
	}
	return n
}

// TestLiveWakeUps: the inbox projector publishes wake:{u} after a push
// only for the followers with an open stream; the timelines projector
// publishes the author's channel for every post; the posts projector
// appends each edit and deletion to the changes stream once and
// publishes the changes channel. A redelivery (as after a crash between
// a write and its wake-up) writes nothing twice and publishes again, and
// the changes of posts of two partitions, applied in either order, are
// each in the stream once.
func TestLiveWakeUps(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, b, online, offline := w.user(true), w.user(true), w.user(true), w.user(true)
	rd := testenv.NewRedis(t)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	l := readmodel.NewLive(keys)
	ctx := context.Background()
	if err := l.MarkOnline(ctx, rd.Client, []int64{online}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	spy := newWakeSpy(t, rd.Client, rd.Prefix, l.WakeUser(online), l.WakeUser(offline), l.WakeAuthor(a), l.WakeAuthor(b), l.ChangesChannel())
	ps := newProjectors(t, w, rd.Client, projections.Config{Keys: keys, CelebrityThreshold: 100, OnlineRefresh: -1})

	w.follow(online, a)
	w.follow(offline, a)
	w.follow(online, b)
	applyAll(t, ps, w.envs)
	w.envs = w.envs[:0]
	p := w.post(a)
	q := w.post(b)
	applyAll(t, ps, w.envs)
	got := spy.published()
	if count(got, l.WakeUser(online)) != 2 || count(got, l.WakeUser(offline)) != 0 ||
		count(got, l.WakeAuthor(a)) != 1 || count(got, l.WakeAuthor(b)) != 1 {
		t.Fatalf("wake-ups of two posts: %q", got)
	}
	posts := w.envs
	applyAll(t, ps, posts) // redelivered
	if got := spy.published(); count(got, l.WakeUser(online)) != 2 || count(got, l.WakeAuthor(a)) != 1 {
		t.Fatalf("wake-ups of the redelivered posts: %q", got)
	}

	// Edits and deletions of the two authors' posts: their partitions
	// delivered in either order, and redelivered.
	w.envs = nil
	w.edit(a, p, "p, edited")
	w.del(a, p)
	ofA := w.envs
	w.envs = nil
	w.edit(b, q, "q, edited")
	ofB := w.envs
	applyAll(t, ps, ofB)
	applyAll(t, ps, ofA)
	applyAll(t, ps, ofA)
	applyAll(t, ps, ofB)
	if got := spy.published(); count(got, l.ChangesChannel()) != 6 {
		t.Fatalf("changes published: %q, want one per applied event", got)
	}
	changes, err := l.ChangesAfter(ctx, rd.Client, readmodel.ChangePos{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	type change struct {
		post    int64
		deleted bool
		content string
	}
	var have []change
	for _, c := range changes {
		have = append(have, change{c.Post, c.Deleted, c.Content})
	}
	want := []change{{q, false, "q, edited"}, {p, false, "p, edited"}, {p, true, ""}}
	if len(have) != len(want) {
		t.Fatalf("changes stream %+v, want %+v", have, want)
	}
	for i := range want {
		if have[i] != want[i] {
			t.Fatalf("changes stream %+v, want %+v", have, want)
		}
	}
}

// TestDeletedOriginalTellsItsReposts: the deletion of an original appends
// to the changes stream a deletion of each of its live reposts (a feed
// stops showing them), before its own; a repost undone before is told
// once (its undo's change), a redelivery of the deletion appends nothing
// twice, and a repost whose event, in another partition, is applied only
// after the deletion is not told by it (no stream shows it: its
// hydration finds the tombstone).
func TestDeletedOriginalTellsItsReposts(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	author, r1, r2, r3, late := w.user(true), w.user(true), w.user(true), w.user(true), w.user(true)
	rd := testenv.NewRedis(t)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	l := readmodel.NewLive(keys)
	ctx := context.Background()
	ps := newProjectors(t, w, rd.Client, projections.Config{Keys: keys, CelebrityThreshold: 100, OnlineRefresh: -1})

	p := w.post(author)
	other := w.post(author)
	rp1 := w.repost(r1, p, author)
	rp2 := w.repost(r2, p, author)
	rp3 := w.repost(r3, p, author)
	w.repost(r1, other, author) // of another original: never told
	applyAll(t, ps, w.envs)
	w.envs = nil
	w.unrepost(r2, p, author)
	undo := w.envs
	w.envs = nil
	w.repost(late, p, author) // committed before the deletion, applied after it
	lateRepost := w.envs
	w.envs = nil
	w.del(author, p)
	del := w.envs
	applyAll(t, ps, undo)
	applyAll(t, ps, del)
	applyAll(t, ps, del) // redelivered
	applyAll(t, ps, lateRepost)
	applyAll(t, ps, undo) // redelivered after the deletion

	changes, err := l.ChangesAfter(ctx, rd.Client, readmodel.ChangePos{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	type change struct{ post, author int64 }
	var have []change
	for _, c := range changes {
		if !c.Deleted {
			t.Fatalf("change %+v: an edit, none was made", c)
		}
		have = append(have, change{c.Post, c.Author})
	}
	want := []change{{rp2, r2}, {rp1, r1}, {rp3, r3}, {p, author}}
	if len(have) != len(want) {
		t.Fatalf("changes stream %+v, want %+v", have, want)
	}
	for i := range want {
		if have[i] != want[i] {
			t.Fatalf("changes stream %+v, want %+v", have, want)
		}
	}
}
