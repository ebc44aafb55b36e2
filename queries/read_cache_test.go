package queries

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/readmodel"
)

// genOf returns the read cache's generation serving reader u (on a
// cluster: of the master of u's keys), nil when off.
func genOf(b *bundle, u int64) *cacheGen {
	return b.feed.cache.currentFor(b.feed.tl.Key(u))
}

// cacheUp waits until the read cache's generation gen (1 the first) of
// reader u's node serves reads, and returns it.
func cacheUp(b *bundle, u int64, gen int64) *cacheGen {
	b.t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		changed := b.feed.cache.genChanged()
		if g := genOf(b, u); g != nil && g.t.gens.Load() >= gen {
			return g
		}
		select {
		case <-changed:
		case <-timeout:
			b.t.Fatalf("read cache generation %d of reader %d's node not up (%d generations in all)", gen, u, b.feed.cache.stats.generations.Load())
		}
	}
}

// inOneGeneration runs fn, a measurement of the read cache for reader u
// (warm-up reads, then a read whose round trips are counted), until one
// read-cache generation served it from start to end, up to five times: on
// a loaded machine an invalidation connection can miss a 250 ms pong,
// which ends its generation and flushes the cache under the measurement.
func inOneGeneration(b *bundle, u int64, fn func()) {
	b.t.Helper()
	for attempt := 1; ; attempt++ {
		g := cacheUp(b, u, 1)
		gens, flushes := b.feed.cache.stats.generations.Load(), b.feed.cache.stats.flushes.Load()
		fn()
		if genOf(b, u) == g && b.feed.cache.stats.generations.Load() == gens && b.feed.cache.stats.flushes.Load() == flushes || attempt == 5 {
			return
		}
		b.t.Logf("attempt %d: a read-cache generation ended under the measurement; again", attempt)
	}
}

// otherClient is a second Redis client (of the same kind: one node or
// the cluster) without the tests' sync hook: its writes reach the cache
// only through Redis's invalidation messages, as the projectors' do.
func otherClient(b *bundle) redis.UniversalClient {
	var c redis.UniversalClient
	switch r := b.rdb.(type) {
	case *redis.ClusterClient:
		c = redis.NewClusterClient(r.Options())
	default:
		c = redis.NewClient(r.(*redis.Client).Options())
	}
	b.t.Cleanup(func() { _ = c.Close() })
	return c
}

// nodeClient is a client of generation g's node (CLIENT KILL there).
func nodeClient(b *bundle, g *cacheGen) *redis.Client {
	o := g.t.base
	o.OnConnect = nil
	c := redis.NewClient(&o)
	b.t.Cleanup(func() { _ = c.Close() })
	return c
}

// cachedFeed is a reader with a built inbox of three posts, read once (so
// cached) and then read again without any Redis round trip.
func cachedFeed(t *testing.T) (b *bundle, u, a int64) {
	t.Helper()
	return cachedFeedWith(t, Config{})
}

func cachedFeedWith(t *testing.T, cfg Config) (b *bundle, u, a int64) {
	t.Helper()
	b = setup(t, cfg)
	u, a = cachedFeedOn(b)
	return b, u, a
}

// cachedFeedOn is cachedFeed on bundle b.
func cachedFeedOn(b *bundle) (u, a int64) {
	t := b.t
	t.Helper()
	b.useClock(newClock(time.Now())) // bodies stay trusted: round trips are exact
	u, a = b.user(), b.user()
	b.follow(u, a)
	for i := range 3 {
		b.post(a, base+int64(i))
	}
	b.projectAll(nil, []int64{u}, 500, 500)
	var rt *roundTrips
	var hits int64
	var p Page
	inOneGeneration(b, u, func() {
		// The first read caches the sets; the second the follow answers
		// of the authors the first showed (its follow hint).
		for range 2 {
			if _, err := b.feed.Home(b.ctx, u, "", 20); err != nil {
				t.Fatal(err)
			}
			// The first read's activity write moves the inbox's expiry,
			// which invalidates it: let it land (the tests' client syncs
			// the cache).
			waitIdle(b.feed)
		}
		rt = countRoundTrips(b)
		hits = b.feed.cache.stats.hits.Load()
		var err error
		if p, err = b.feed.Home(b.ctx, u, "", 20); err != nil {
			t.Fatal(err)
		}
	})
	if len(p.Items) != 3 {
		t.Fatalf("page of %d, want 3", len(p.Items))
	}
	// The items' counts and the viewer's state are kept too
	// (share_cache.go): nothing changed, nothing is asked.
	if n := rt.n.Load(); n != 0 {
		t.Fatalf("repeated read of an unchanged inbox took %d round trips, want 0", n)
	}
	if got := b.feed.cache.stats.hits.Load() - hits; got < 4+3+2 {
		t.Fatalf("%d cache hits on the repeated read, want the inbox, the timeline, both EXISTS, the 3 posts' counts and the viewer's two day buckets", got)
	}
	return u, a
}

// addToInbox writes a new post of a into u's inbox through c (APPENDed to
// its buffer, as a push).
func addToInbox(b *bundle, c redis.UniversalClient, u, a, ms int64) key {
	b.t.Helper()
	k := b.post(a, ms)
	b.cachePost(k)
	_, bk := b.feed.inboxes().inbox.Keys(u)
	if err := c.Append(b.ctx, bk, string(binary.BigEndian.AppendUint64(nil, uint64(k.id)))).Err(); err != nil {
		b.t.Fatal(err)
	}
	return k
}

func firstItem(b *bundle, u int64) (key, int) {
	b.t.Helper()
	p, err := b.feed.Home(b.ctx, u, "", 20)
	if err != nil {
		b.t.Fatal(err)
	}
	if len(p.Items) == 0 {
		b.t.Fatal("empty page")
	}
	return itemKey(b.t.(*testing.T), p.Items[0]), len(p.Items)
}

// A write to a cached inbox by another client is on the next read once its
// invalidation has arrived (sync waits for exactly that). An inbox's
// reply is cached over both its keys: a push to its buffer, then a write
// of its sealed string, are each seen.
func TestReadCacheInboxWriteVisible(t *testing.T) {
	t.Parallel()
	func() {
		b, u, a := cachedFeedWith(t, Config{})
		other := otherClient(b)
		inv := b.feed.cache.stats.invalidated.Load()
		k := addToInbox(b, other, u, a, base+10)
		if err := b.feed.cache.sync(b.ctx); err != nil {
			t.Fatal(err)
		}
		if got := b.feed.cache.stats.invalidated.Load() - inv; got < 1 {
			t.Fatalf("%d invalidations after the write, want the inbox", got)
		}
		if got, n := firstItem(b, u); got != k || n != 4 {
			t.Fatalf("first item %v of %d, want the new post %v of 4", got, n, k)
		}
		// cached again (firstItem read it), then the sealed string
		// rewritten with one more post, as a merge does
		if _, n := firstItem(b, u); n != 4 {
			t.Fatalf("page of %d, want 4", n)
		}
		k2 := b.post(a, base+11)
		b.cachePost(k2)
		sk, _ := b.feed.inboxes().inbox.Keys(u)
		v := other.Get(b.ctx, sk).Val()
		if len(v) < 8 {
			t.Fatalf("sealed string of %d bytes", len(v))
		}
		nv := v[:len(v)-8] + string(binary.BigEndian.AppendUint64(nil, uint64(k2.id))) + v[len(v)-8:]
		if err := other.Set(b.ctx, sk, nv, redis.KeepTTL).Err(); err != nil {
			t.Fatal(err)
		}
		if err := b.feed.cache.sync(b.ctx); err != nil {
			t.Fatal(err)
		}
		if got, n := firstItem(b, u); got != k2 || n != 5 {
			t.Fatalf("after the sealed write: first item %v of %d, want the new post %v of 5", got, n, k2)
		}
	}()
}

// With a following set too large to be held whole: an author a page shows
// that its first pipeline did not ask about (a post pushed since the
// reader's last page) is asked once, through the read cache: the next
// read, which asks about that author with its follow hint, costs no round
// trip. An unfollow by another process hides the author on the first read
// after its invalidation.
func TestReadCacheHydrationFollows(t *testing.T) {
	t.Parallel()
	b, u, _ := cachedFeed(t)
	other := otherClient(b)
	makeLarge(b, other, u)
	if err := b.feed.cache.sync(b.ctx); err != nil {
		t.Fatal(err)
	}
	firstItem(b, u) // finds the set large: its authors become the hint
	waitIdle(b.feed)
	c := b.user()
	b.follow(u, c) // following:{u} written: its cached answers are dropped
	k := addToInbox(b, other, u, c, base+10)
	if err := b.feed.cache.sync(b.ctx); err != nil {
		t.Fatal(err)
	}
	var n int64
	var rt *roundTrips
	inOneGeneration(b, u, func() {
		if got, n := firstItem(b, u); got != k || n != 4 {
			t.Fatalf("first item %v of %d, want c's post %v of 4", got, n, k)
		}
		waitIdle(b.feed)
		if h := b.feed.hints.get(u); !slices.Contains(h, c) {
			t.Fatalf("follow hint %v lacks %d", h, c)
		}
		rt = countRoundTrips(b)
		if got, n := firstItem(b, u); got != k || n != 4 {
			t.Fatalf("read again: first item %v of %d, want %v of 4", got, n, k)
		}
		n = rt.n.Load()
	})
	if n != 0 { // the items' counts and viewer state are kept too
		t.Fatalf("the read after the one that asked about %d took %d round trips (%s), want 0", c, n, rt)
	}
	if err := other.SRem(b.ctx, b.keys.Following(u), strconv.FormatInt(c, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	hiddenAfterUnfollow(b, u, k)
}

// hiddenAfterUnfollow waits for the invalidations of the writes made so
// far and checks that u's first page is a's 3 posts alone, without k (a
// post of the author u unfollowed).
func hiddenAfterUnfollow(b *bundle, u int64, k key) {
	b.t.Helper()
	if err := b.feed.cache.sync(b.ctx); err != nil {
		b.t.Fatal(err)
	}
	if got, n := firstItem(b, u); got == k || n != 3 {
		b.t.Fatalf("after the unfollow: first item %v of %d, want a's posts alone (3)", got, n)
	}
}

// A compact following set is read whole into the cache: a post of an author
// new to the reader (not in the follow hint, never asked about) costs the
// page no round trip beyond its inbox's, and a write to the set (an
// unfollow) makes the next read ask again.
func TestReadCacheFollowSetAnswersNewAuthors(t *testing.T) {
	t.Parallel()
	b, u, _ := cachedFeed(t)
	kF := b.keys.Following(u)
	c, d := b.user(), b.user()
	b.follow(u, c) // following:{u} changes: read whole again by the next page
	if err := b.feed.cache.sync(b.ctx); err != nil {
		t.Fatal(err)
	}
	if _, n := firstItem(b, u); n != 3 {
		t.Fatalf("page of %d, want a's 3 posts", n)
	}
	waitIdle(b.feed)
	if h := b.feed.hints.get(u); slices.Contains(h, c) {
		t.Fatalf("follow hint %v has %d before any post of theirs", h, c)
	}
	other := otherClient(b)
	kc := addToInbox(b, other, u, c, base+10)
	addToInbox(b, other, u, d, base+11) // d is not followed: hidden
	if err := b.feed.cache.sync(b.ctx); err != nil {
		t.Fatal(err)
	}
	// The posts' bodies are new to the process: their MGET is a round
	// trip of the main client; the read cache's own are counted. (A
	// generation that ended before the measured read only makes its one
	// round trip read the set again.)
	var trips int64
	var whole any
	inOneGeneration(b, u, func() {
		before := b.feed.cache.stats.trips.Load()
		if got, n := firstItem(b, u); got != kc || n != 4 {
			t.Fatalf("first item %v of %d, want c's post %v of 4 (d's hidden)", got, n, kc)
		}
		trips = b.feed.cache.stats.trips.Load() - before
		whole = cachedVal(b, kF, wholeSig)
	})
	if trips != 2 {
		t.Fatalf("the page showing a new author took %d round trips through the read cache, want 2 (the inbox's, then the new posts' counts)", trips)
	}
	if _, ok := whole.(memberSet); !ok {
		t.Fatalf("following:{%d} not cached whole after the read: %#v", u, whole)
	}
	b.unfollow(u, c)
	hiddenAfterUnfollow(b, u, kc)
}

// A following set too large to come whole in one SSCAN step is marked so,
// and its members are asked and cached one by one, as before: followed
// authors shown, others hidden.
func TestReadCacheLargeFollowSetAnswersPerMember(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	b.useClock(newClock(time.Now()))
	u, a, _ := b.projectedFollow(3)
	kF := b.keys.Following(u)
	other := otherClient(b)
	n := makeLarge(b, other, u)
	c, d := b.user(), b.user()
	b.follow(u, c)
	kc := addToInbox(b, other, u, c, base+10)
	addToInbox(b, other, u, d, base+11)
	if err := b.feed.cache.sync(b.ctx); err != nil {
		t.Fatal(err)
	}
	var v any
	var ask []int
	var set memberSet
	var large bool
	is := make([]bool, 3)
	inOneGeneration(b, u, func() {
		for range 2 {
			if got, n := firstItem(b, u); got != kc || n != 4 {
				t.Fatalf("first item %v of %d, want c's post %v of 4 (a's 3; d's hidden)", got, n, kc)
			}
			waitIdle(b.feed)
		}
		v = cachedVal(b, kF, wholeSig)
		var tl tally
		ask, set, large = b.feed.cache.lookupMembers(kF, []int64{a, c, d}, 3, is, time.Now().UnixNano(), &tl)
	})
	if v != (largeSet{}) {
		t.Fatalf("following:{%d} of %d members cached as %#v, want largeSet", u, n+2, v)
	}
	if !large || set != nil || len(ask) != 0 || !slices.Equal(is, []bool{true, true, false}) {
		t.Fatalf("cached answers for a, c, d: ask %v set %v large %v is %v, want each cached, a and c followed", ask, set, large, is)
	}
}

// An unfollow whose invalidation arrives after Redis read the set whole
// but before the reply is stored: the set is not cached, and the next
// read hides the unfollowed author.
func TestReadCacheFollowSetRacedByUnfollow(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	b.useClock(newClock(time.Now()))
	u, a, _ := b.projectedFollow(3)
	c := b.user()
	b.follow(u, c)
	other := otherClient(b)
	kc := addToInbox(b, other, u, c, base+10)
	armed := raceOnce(b, cacheUp(b, u, 1), func() {
		if err := other.SRem(context.Background(), b.keys.Following(u), strconv.FormatInt(c, 10)).Err(); err != nil {
			t.Error(err)
		}
	})
	dropped := b.feed.cache.stats.dropped.Load()
	armed.Store(true)
	// The raced read's set had c, but it asks about c's post after the
	// unfollow (the set was not cached): either answer is right for it.
	if _, n := firstItem(b, u); n != 3 && n != 4 {
		t.Fatalf("the raced read: page of %d, want a's 3 posts, and c's read before the unfollow or not", n)
	}
	if armed.Load() {
		t.Fatal("the read did not go through the tracking connections")
	}
	if got := b.feed.cache.stats.dropped.Load() - dropped; got < 1 {
		t.Fatalf("%d replies dropped, want the raced set", got)
	}
	if v := cachedVal(b, b.keys.Following(u), wholeSig); v != nil {
		t.Fatalf("the raced set was cached: %#v", v)
	}
	if got, n := firstItem(b, u); got == kc || n != 3 {
		t.Fatalf("next read: first %v of %d, want %d's 3 posts alone (a stale set was cached)", got, n, a)
	}
}

// memberSetOf keeps an SSCAN step's reply as a sorted set of ids only when
// the step returned the whole set (cursor 0) and every member is an id;
// followAnswers backed by it know every author.
func TestMemberSetOf(t *testing.T) {
	step := func(members []string, cursor uint64) *redis.ScanCmd {
		cmd := redis.NewScanCmd(context.Background(), nil)
		cmd.SetVal(members, cursor)
		return cmd
	}
	v, err := memberSetOf(step([]string{"30", "7", "12"}, 0))
	if err != nil || !slices.Equal(v.(memberSet), memberSet{7, 12, 30}) {
		t.Fatalf("whole step: %#v %v, want memberSet{7, 12, 30}", v, err)
	}
	set := v.(memberSet)
	if v, _ := memberSetOf(step([]string{"1", "2"}, 17)); v != (largeSet{}) {
		t.Fatalf("partial step: %#v, want largeSet", v)
	}
	if v, _ := memberSetOf(step([]string{"1", "x"}, 0)); v != (largeSet{}) {
		t.Fatalf("a member that is not an id: %#v, want largeSet", v)
	}
	if v, _ := memberSetOf(step(nil, 0)); v == nil || len(v.(memberSet)) != 0 {
		t.Fatalf("empty set: %#v, want an empty memberSet (known: follows nobody)", v)
	}
	f := newFollowAnswers([]int64{99}, []bool{false}) // a hinted author left unanswered
	f.set = set
	for a, want := range map[int64]bool{7: true, 12: true, 30: true, 99: false, 8: false} {
		if !f.known(a) || f.follows(a) != want {
			t.Errorf("author %d: known %v follows %v, want known, follows %v", a, f.known(a), f.follows(a), want)
		}
	}
}

// makeLarge adds to u's following set, through c, more accounts (that
// post nothing here) than one SSCAN step returns, and returns how many.
func makeLarge(b *bundle, c redis.UniversalClient, u int64) int {
	b.t.Helper()
	filler := make([]any, 0, 3*readmodel.FollowingScanCount)
	for i := range cap(filler) {
		filler = append(filler, strconv.Itoa(1_000_000_000+i))
	}
	if err := c.SAdd(b.ctx, b.keys.Following(u), filler...).Err(); err != nil {
		b.t.Fatal(err)
	}
	return len(filler)
}

// cachedVal is what the read cache holds for sig on k (nil: nothing).
func cachedVal(b *bundle, k, sig string) any {
	var t tally
	v, _ := b.feed.cache.lookupTally(k, sig, time.Now().UnixNano(), &t)
	return v
}

// A reply read before a write whose invalidation arrives before the reply
// is stored is never cached: the read itself may show the old inbox (it
// was read before the write), the next one shows the new.
func TestReadCacheInvalidationDuringRead(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	b.useClock(newClock(time.Now()))
	u, a, _ := b.projectedFollow(3)
	g := cacheUp(b, u, 1)
	other := otherClient(b)
	var written key
	// The reply is read, not yet stored: a write lands and its
	// invalidation is applied now.
	armed := raceOnce(b, g, func() { written = addToInbox(b, other, u, a, base+10) })
	dropped := b.feed.cache.stats.dropped.Load()
	armed.Store(true)
	if got, n := firstItem(b, u); n != 3 {
		t.Fatalf("the raced read: first %v of %d, want the 3 posts read before the write", got, n)
	}
	if armed.Load() {
		t.Fatal("the read did not go through the tracking connections")
	}
	if got := b.feed.cache.stats.dropped.Load() - dropped; got < 1 {
		t.Fatalf("%d replies dropped, want the raced inbox", got)
	}
	if got, n := firstItem(b, u); got != written || n != 4 {
		t.Fatalf("next read: first %v of %d, want the new post %v of 4 (a stale reply was cached)", got, n, written)
	}
}

// raceOnce hooks generation g's tracking connections so that, once armed
// (the flag returned), the next pipeline's replies are read and then,
// before the read path stores them, write runs and its invalidation is
// applied; the flag is false again once write ran.
func raceOnce(b *bundle, g *cacheGen, write func()) *atomic.Bool {
	armed := new(atomic.Bool)
	hook := raceHook{after: func() {
		if armed.CompareAndSwap(true, false) {
			write()
			if err := b.feed.cache.sync(context.Background()); err != nil {
				b.t.Error(err)
			}
		}
	}}
	for _, tc := range g.conns {
		tc.cn.AddHook(hook)
	}
	return armed
}

// raceHook runs after() when a pipeline's replies are read, before the
// read path stores them.
type raceHook struct{ after func() }

func (raceHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (raceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h raceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.after()
		return err
	}
}

// When the invalidation connection drops, whatever Redis would have told
// it is lost: the cache is flushed, and the next generation reads afresh.
func TestReadCacheInvalidationConnectionLoss(t *testing.T) {
	t.Parallel()
	b, u, a := cachedFeed(t)
	g := genOf(b, u)
	other := otherClient(b)
	flushes := b.feed.cache.stats.flushes.Load()
	if err := nodeClient(b, g).Do(b.ctx, "CLIENT", "KILL", "ID", g.id).Err(); err != nil {
		t.Fatal(err)
	}
	// Redis has no invalidation connection for this write's invalidation.
	k := addToInbox(b, other, u, a, base+10)
	cacheUp(b, u, 2)
	if got := b.feed.cache.stats.flushes.Load() - flushes; got < 1 {
		t.Fatalf("%d flushes, want one at the loss", got)
	}
	if got, n := firstItem(b, u); got != k || n != 4 {
		t.Fatalf("first item %v of %d after the reconnect, want the new post %v of 4", got, n, k)
	}
	// The new generation caches and invalidates again.
	if _, _ = firstItem(b, u); genOf(b, u) == nil {
		t.Fatal("cache off")
	}
	k2 := addToInbox(b, other, u, a, base+11)
	if err := b.feed.cache.sync(b.ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := firstItem(b, u); got != k2 {
		t.Fatalf("first item %v, want %v", got, k2)
	}
}

// A data connection that drops takes what Redis tracked for it: the
// generation ends (flushed) and the next one reads afresh.
func TestReadCacheDataConnectionLoss(t *testing.T) {
	t.Parallel()
	b, u, a := cachedFeed(t)
	g := genOf(b, u)
	other := otherClient(b)
	node := nodeClient(b, g)
	for _, tc := range g.conns {
		tc.mu.Lock()
		id, err := tc.cn.ClientID(b.ctx).Result()
		tc.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if err := node.Do(b.ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	k := addToInbox(b, other, u, a, base+10)
	cacheUp(b, u, 2)
	if got, n := firstItem(b, u); got != k || n != 4 {
		t.Fatalf("first item %v of %d after the data connections dropped, want the new post %v of 4", got, n, k)
	}
}

// The author's own post is on their next read without waiting for Redis's
// invalidation of their (cached) timeline.
func TestReadCacheOwnPostLocalInvalidation(t *testing.T) {
	t.Parallel()
	b, u, _ := cachedFeed(t)
	mine := b.post(u, time.Now().UnixMilli())
	inv := b.feed.cache.stats.invalidated.Load()
	b.created(u, mine)
	if b.feed.cache.stats.invalidated.Load() == inv {
		t.Fatal("PostCreated did not invalidate the author's timeline here")
	}
	if got, _ := firstItem(b, u); got != mine {
		t.Fatalf("first item %v, want the own post %v", got, mine)
	}
}

// A negative ReadCacheKeys (cmd/feed's FEED_READ_CACHE_KEYS=0) turns the
// cache off; the reads are as before.
func TestReadCacheOff(t *testing.T) {
	b := setup(t, Config{ReadCacheKeys: -1})
	if b.feed.cache != nil {
		t.Fatal("cache on with ReadCacheKeys -1")
	}
	u, a := b.user(), b.user()
	b.follow(u, a)
	k := b.post(a, base)
	b.projectAll(nil, []int64{u}, 500, 500)
	if got, n := firstItem(b, u); got != k || n != 1 {
		t.Fatalf("first item %v of %d", got, n)
	}
	if n, err := readCacheKeys(-1); err != nil || n != 0 {
		t.Fatalf("ReadCacheKeys -1: %d %v, want off", n, err)
	}
}

// The cache's bound: a shard keeps at most two generations of half its
// share of keys; an invalidation between a read's ticket and its store
// keeps the reply out.
func TestReadCacheBoundAndTicket(t *testing.T) {
	c := &readCache{maxAge: int64(time.Minute), seed: maphash.MakeSeed()}
	c.shards = make([]rcShard, readCacheShards)
	for i := range c.shards {
		c.shards[i] = rcShard{half: 2, cur: map[string]*rcEntry{}}
	}
	c.single = &tracker{c: c}
	g := &cacheGen{t: c.single}
	c.single.gen.Store(g)
	now := time.Now().UnixNano()
	for i := range 10_000 {
		k := "k" + strconv.Itoa(i)
		c.store(c.begin(g, k), k, "s", i, now)
	}
	n := 0
	for i := range c.shards {
		n += len(c.shards[i].cur) + len(c.shards[i].old)
		if len(c.shards[i].cur) > 2 || len(c.shards[i].old) > 2 {
			t.Fatalf("shard %d: %d + %d keys, bound 2 + 2", i, len(c.shards[i].cur), len(c.shards[i].old))
		}
	}
	if n > 4*readCacheShards {
		t.Fatalf("%d keys cached", n)
	}
	tk := c.begin(g, "x")
	c.invalidate("x")
	c.store(tk, "x", "s", 1, now)
	if _, ok := c.lookup("x", "s", now); ok {
		t.Fatal("a reply raced by an invalidation was cached")
	}
	tk = c.begin(g, "x")
	c.single.gen.Store(&cacheGen{t: c.single})
	c.store(tk, "x", "s", 1, now)
	if _, ok := c.lookup("x", "s", now); ok {
		t.Fatal("a reply of an ended generation was cached")
	}
	c.single.gen.Store(g)
	c.store(c.begin(g, "x"), "x", "s", 1, now)
	if _, ok := c.lookup("x", "s", now); !ok {
		t.Fatal("not cached")
	}
	if _, ok := c.lookup("x", "s", now+int64(2*time.Minute)); ok {
		t.Fatal("served past maxAge")
	}
}

// The first pages' signatures made once are the ones every other read
// makes: a table entry that differed would split one reply over two cache
// entries, or share one between two different reads.
func TestFirstPageSigs(t *testing.T) {
	seen := map[string]bool{}
	for n := range len(firstPageSigs) + 3 {
		for _, wb := range []bool{false, true} {
			got, want := setSig(startKey, n, wb), makeSetSig(startKey, n, wb)
			if got != want {
				t.Fatalf("setSig(start, %d, %v) = %q, want %q", n, wb, got, want)
			}
			if seen[got] {
				t.Fatalf("setSig(start, %d, %v) = %q twice", n, wb, got)
			}
			seen[got] = true
		}
	}
	if a, b := setSig(key{ms: 5, id: 1}, 3, true), makeSetSig(key{ms: 5, id: 1}, 3, true); a != b || a == setSig(startKey, 3, true) {
		t.Fatalf("a deeper page's signature %q (want %q) must differ from the first page's", a, b)
	}
}

// lookup is one lookupTally counted at once, as a read counts its own.
func (c *readCache) lookup(k, sig string, now int64) (any, bool) {
	var t tally
	v, ok := c.lookupTally(k, sig, now, &t)
	c.count(t)
	return v, ok
}

// A page's shares are kept by the read cache (share_cache.go) and change
// with their keys: another client's writes, as the posts and followers
// projectors' (a like's count, the viewer's like in its day bucket, a
// mute in following_v:{u}), are on the next read once their
// invalidations arrived, and a following_v:{u} too large to be read whole
// still answers (per page).
func TestReadCacheSharesInvalidated(t *testing.T) {
	t.Parallel()
	b, u, a := cachedFeed(t)
	other := otherClient(b)
	page := func() Page {
		t.Helper()
		if err := b.feed.cache.sync(b.ctx); err != nil {
			t.Fatal(err)
		}
		p, err := b.feed.Home(b.ctx, u, "", 20)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := page()
	if len(p.Items) != 3 {
		t.Fatalf("page of %d, want a's 3 posts", len(p.Items))
	}
	top, err := strconv.ParseInt(p.Items[0].ID, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	kC, kL := b.keys.Counts(top), b.keys.Liked(u, readmodel.DayOf(top))
	var tl tally
	if c, ok := b.feed.cache.lookupCounts([]byte(kC), top, time.Now().UnixNano(), &tl); !ok || c != (Counts{}) {
		t.Fatalf("counts of %d not kept after a read: %#v, %v", top, c, ok)
	}
	// Kept under their key: the same post under another key (another
	// version of the posts projection) is not answered.
	if c, ok := b.feed.cache.lookupCounts([]byte("v9:"+kC), top, time.Now().UnixNano(), &tl); ok {
		t.Fatalf("counts of %d answered under another key: %#v", top, c)
	}
	if _, ok := cachedVal(b, kL, wholeSig).(memberSet); !ok {
		t.Fatalf("%s not kept whole after a read: %#v", kL, cachedVal(b, kL, wholeSig))
	}

	// A like of the top post by u: its count and u's bucket.
	if err := other.HSet(b.ctx, kC, "l", 7, "lv", 100).Err(); err != nil {
		t.Fatal(err)
	}
	if err := other.SAdd(b.ctx, kL, strconv.FormatInt(top, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	p = page()
	if got := p.Items[0]; got.Counts == nil || got.Counts.Likes != 7 || got.Viewer == nil || !got.Viewer.Liked {
		t.Fatalf("after the like: counts %+v viewer %+v, want 7 likes and liked", got.Counts, got.Viewer)
	}
	// Read again from the cache: the same answers, no round trip.
	var again Page
	var n int64
	inOneGeneration(b, u, func() {
		rt := countRoundTrips(b)
		again = page()
		n = rt.n.Load()
	})
	if n != 0 || again.Items[0].Counts.Likes != 7 || !again.Items[0].Viewer.Liked {
		t.Fatalf("read again: %d round trips, counts %+v viewer %+v; want 0, 7 likes, liked", n, again.Items[0].Counts, again.Items[0].Viewer)
	}

	// A reply to a blocked account is hidden (homefeed.Judge): a block
	// written into following_v:{u}, which the page read whole, hides a's
	// reply to m on the next read, and so does it when following_v:{u}
	// is too large for one HSCAN step (asked per page).
	v, m := b.user(), b.user()
	b.follow(v, a)
	b.follow(v, m)
	orig := b.post(m, base+40)
	reply := b.post(a, base+41)
	b.exec(`UPDATE posts SET reply_to = $1, reply_to_author = $2 WHERE id = $3`, orig.id, m, reply.id)
	b.projectAll(nil, []int64{v}, 500, 500) // bodies of text alone: the reply's is written below
	raw, err := json.Marshal(readmodel.Post{ID: reply.id, AuthorID: a, Content: fmt.Sprint("post ", reply.id),
		CreatedAt: formatTime(reply.ms), ReplyTo: orig.id, ReplyToAuthor: m, ReplyRoot: orig.id})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.rdb.Set(b.ctx, b.keys.Post(reply.id), raw, 0).Err(); err != nil {
		t.Fatal(err)
	}
	vpage := func() []Post {
		t.Helper()
		if err := b.feed.cache.sync(b.ctx); err != nil {
			t.Fatal(err)
		}
		p, err := b.feed.Home(b.ctx, v, "", 20)
		if err != nil {
			t.Fatal(err)
		}
		return p.Items
	}
	shows := func(items []Post, k key) bool {
		for _, it := range items {
			if itemKey(t, it) == k {
				return true
			}
		}
		return false
	}
	if items := vpage(); !shows(items, reply) || !shows(vpage(), reply) {
		t.Fatalf("%d's page lacks a's reply to m before any block: %d items", v, len(items))
	}
	kV := b.keys.FollowingVersions(v)
	if _, ok := cachedVal(b, kV, relSig).(relsWhole); !ok {
		t.Fatalf("relations of %d not kept whole after a read: %#v", v, cachedVal(b, kV, relSig))
	}
	if err := other.HSet(b.ctx, kV, readmodel.BlockField(m), 1).Err(); err != nil {
		t.Fatal(err)
	}
	if items := vpage(); shows(items, reply) {
		t.Fatalf("a's reply to m shown after %d blocked m", v)
	}
	if rels, ok := cachedVal(b, kV, relSig).(relsWhole); !ok || !rels[m].Blocks {
		t.Fatalf("relations kept after the block: %#v, want m blocked", cachedVal(b, kV, relSig))
	}
	// Large: the unblock (even version) with more fields than one step.
	fields := []any{readmodel.BlockField(m), 2}
	for i := range 2 * readmodel.RelationsScanCount {
		fields = append(fields, strconv.Itoa(1_000_000+i), 2)
	}
	if err := other.HSet(b.ctx, kV, fields...).Err(); err != nil {
		t.Fatal(err)
	}
	if items := vpage(); !shows(items, reply) {
		t.Fatalf("a's reply to m hidden after %d unblocked m (a large following_v)", v)
	}
	if _, ok := cachedVal(b, kV, relSig).(relsLarge); !ok {
		t.Fatalf("relations of %d after it grew: %#v, want relsLarge", v, cachedVal(b, kV, relSig))
	}
	if err := other.HSet(b.ctx, kV, readmodel.BlockedByField(m), 3).Err(); err != nil {
		t.Fatal(err)
	}
	if items := vpage(); shows(items, reply) {
		t.Fatalf("a's reply to m shown after m blocked %d (a large following_v)", v)
	}
}
