package queries

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/feedco/feed/events"
)

// HomeAbove returns the entries above a stream's position, oldest first,
// and hydrates only those: the keys at or below the position are not
// hydrated (the hydration counters count each key hydrated) and hidden
// ones above it are skipped.
func TestHomeAboveHydratesOnlyAbove(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	u, a, stranger := b.user(), b.user(), b.user()
	b.follow(u, a)
	old := time.Now().Add(-time.Minute).UnixMilli()
	var posts []key // oldest first
	for i := range 12 {
		posts = append(posts, b.post(a, old+int64(i)))
	}
	deleted := b.post(a, old+20) // above the position: hidden
	foreign := b.post(stranger, old+21)
	top := b.post(a, old+22)
	b.projectAll(nil, []int64{u}, 500, 500)
	b.deletePost(deleted)
	b.pushInbox(u, foreign) // in the inbox, not followed: hidden
	b.cachePost(foreign)

	first, err := b.feed.Home(b.ctx, u, "", 5)
	if err != nil || len(first.Items) != 5 {
		t.Fatalf("first page: %v, %d items", err, len(first.Items))
	}

	hydrated := func() float64 {
		m := b.feed.metrics
		return counter(m.hydProcess) + counter(m.hydRedis) + counter(m.hydPG)
	}
	pos := posts[len(posts)-2]
	before := hydrated()
	got, _, more, err := b.feed.HomeAbove(b.ctx, u, events.FeedKey{Ms: pos.ms, ID: pos.id}, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	var keys []key
	for _, e := range got {
		keys = append(keys, key{ms: e.Key.Ms, id: e.Key.ID})
	}
	want := []key{posts[len(posts)-1], top}
	if more || len(keys) != len(want) || keys[0] != want[0] || keys[1] != want[1] {
		t.Fatalf("above the position: %v (more %v), want %v", keys, more, want)
	}
	// Above the position: the newest post, the deleted one, the foreign
	// one and the top; a read without the floor hydrated a whole batch.
	if n := hydrated() - before; n != 4 {
		t.Errorf("%v keys hydrated, want the 4 above the position", n)
	}

	// More above than asked: the closest to the position, and more.
	got, _, more, err = b.feed.HomeAbove(b.ctx, u, events.FeedKey{Ms: posts[8].ms, ID: posts[8].id}, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !more || len(got) != 2 || got[0].Key.ID != posts[9].id || got[1].Key.ID != posts[10].id {
		t.Fatalf("above posts[8], 2 at most: %+v (more %v), want posts 9 and 10 and more", got, more)
	}

	// A stream whose position lags: it has posts 6, 7, 9 and 10 above
	// posts[5] (sent since), and is woken for the top. Its read leaves out
	// and does not hydrate what it has, and one Redis read covers it.
	have := []events.FeedKey{}
	for _, p := range []key{posts[6], posts[7], posts[9], posts[10]} {
		have = append(have, events.FeedKey{Ms: p.ms, ID: p.id})
	}
	before, reads := hydrated(), streamReads(b.feed)
	got, _, more, err = b.feed.HomeAbove(b.ctx, u, events.FeedKey{Ms: posts[5].ms, ID: posts[5].id}, have, 10)
	if err != nil {
		t.Fatal(err)
	}
	keys = keys[:0]
	for _, e := range got {
		keys = append(keys, key{ms: e.Key.Ms, id: e.Key.ID})
	}
	want = []key{posts[8], posts[11], top}
	if more || !slices.Equal(keys, want) {
		t.Fatalf("above posts[5], with 4 of them had: %v (more %v), want %v", keys, more, want)
	}
	// Above posts[5] and not had: posts 8 and 11, the deleted and the
	// foreign post, the top.
	if n := hydrated() - before; n != 5 {
		t.Errorf("%v keys hydrated, want the 5 above the position not had", n)
	}
	if n := streamReads(b.feed) - reads; n != 1 {
		t.Errorf("%v Redis reads, want 1", n)
	}
}

// streamReads counts a Feed's stream home reads, either pipeline.
func streamReads(f *Feed) float64 {
	return counter(f.metrics.streamOwn) + counter(f.metrics.streamShared)
}

// Streams' reads made at once share the autopipeliner's pipelines and
// answer as each alone does (the streams a post wakes together); a read
// alone goes in a pipeline of its own; with StreamPlainReads every read
// does.
func TestHomeAboveShared(t *testing.T) {
	t.Parallel()
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain=%v", plain), func(t *testing.T) {
			t.Parallel()
			b := setup(t, Config{StreamPlainReads: plain})
			a := b.user()
			old := time.Now().Add(-time.Minute).UnixMilli()
			var posts []key // oldest first
			for i := range 6 {
				posts = append(posts, b.post(a, old+int64(i)))
			}
			readers := make([]int64, 24)
			for i := range readers {
				readers[i] = b.user()
				b.follow(readers[i], a)
			}
			b.projectAll(nil, readers, 500, 500)
			pos := events.FeedKey{Ms: posts[2].ms, ID: posts[2].id}
			check := func(u int64) error {
				got, _, more, err := b.feed.HomeAbove(b.ctx, u, pos, nil, 10)
				if err != nil {
					return err
				}
				if more || len(got) != 3 {
					return fmt.Errorf("reader %d: %d entries above the position (more %v), want 3", u, len(got), more)
				}
				for i, e := range got {
					if w := posts[3+i]; e.Key.ID != w.id || e.Post.ID != strconv.FormatInt(w.id, 10) {
						return fmt.Errorf("reader %d: entry %d is %d (post %s), want %d", u, i, e.Key.ID, e.Post.ID, w.id)
					}
				}
				return nil
			}
			m := b.feed.metrics
			own0 := counter(m.streamOwn)
			if err := check(readers[0]); err != nil {
				t.Fatal(err)
			}
			if n := counter(m.streamOwn) - own0; n != 1 {
				t.Fatalf("a read alone: %v in a pipeline of its own, want 1", n)
			}
			for range 5 {
				var wg sync.WaitGroup
				errs := make(chan error, len(readers))
				for _, u := range readers {
					wg.Go(func() {
						if err := check(u); err != nil {
							errs <- err
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
			}
			shared := counter(m.streamShared)
			if plain && shared != 0 {
				t.Errorf("StreamPlainReads: %v reads through the autopipeliner, want 0", shared)
			}
			if !plain && shared == 0 {
				t.Errorf("%d reads at once, five times: none through the autopipeliner", len(readers))
			}
		})
	}
}
