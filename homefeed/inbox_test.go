package homefeed

import (
	"context"
	"encoding/binary"
	"fmt"
	"github.com/feedco/feed/readmodel"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/testkit/testenv"
)

const testBaseMs = 1764498000000

// snow is a post id of millisecond ms with low bits lo.
func snow(ms, lo int64) int64 { return (ms-snowEpochMs)<<22 | lo&(1<<22-1) }

// pushPacked pushes posts to user one pipeline each, with the follow-ups
// and the merges they ask for, and reports how many merges ran.
func pushPacked(t testing.TB, ctx context.Context, rdb redis.UniversalClient, m Inboxes, user int64, posts ...int64) int {
	t.Helper()
	merges := 0
	for _, post := range posts {
		n, err := m.PushAll(ctx, rdb, []int64{user}, m.NewPush(post))
		if err != nil {
			t.Fatal(err)
		}
		merges += n
	}
	return merges
}

func readPacked(t testing.TB, ctx context.Context, rdb redis.UniversalClient, m Inboxes, user, fromMs int64, n int) Page {
	t.Helper()
	pipe := rdb.Pipeline()
	r := m.QueueRead(ctx, pipe, user, fromMs, n)
	if err := readmodel.ExecReads(ctx, pipe); err != nil {
		t.Fatal(err)
	}
	p, err := r.Result()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func ids(es []readmodel.Entry) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

func mergeNow(t testing.TB, ctx context.Context, rdb redis.UniversalClient, m Inboxes, user int64) {
	t.Helper()
	// the merge of the buffer as it is, with the trim and the fallback TTL
	if err := readmodel.Exec(ctx, rdb, func(pipe redis.Pipeliner) {
		m.queueMergeScript(ctx, pipe, user, m.mergeArgs(nil, "", false, "nx"))
	}); err != nil {
		t.Fatal(err)
	}
}

// Out-of-order pushes and redeliveries read back newest first and
// distinct, before the merge (buffer only), after it (sealed only) and
// with duplicates across both; the merge keeps one copy.
func TestPackedOrderAndDuplicates(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	m := NewInboxes(readmodel.Keys{Prefix: rd.Prefix}, readmodel.Policy{})
	var posts []int64
	for i := range 20 {
		posts = append(posts, snow(testBaseMs+int64(i/3), int64(i)))
	}
	shuffled := slices.Clone(posts)
	rand.New(rand.NewPCG(1, 1)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	pushPacked(t, ctx, rd.Client, m, 1, shuffled...)
	pushPacked(t, ctx, rd.Client, m, 1, shuffled[:7]...) // redelivered
	want := slices.Clone(posts)
	slices.Reverse(want)
	check := func(stage string) {
		t.Helper()
		p := readPacked(t, ctx, rd.Client, m, 1, readmodel.MaxScoreMs, 50)
		if got := ids(p.Entries); !slices.Equal(got, want) || p.More {
			t.Fatalf("%s: read %v (more %v), want %v", stage, got, p.More, want)
		}
		for _, e := range p.Entries {
			if e.Ms != idMs(e.ID) || e.Ms < testBaseMs {
				t.Fatalf("%s: entry %v: ms not the id's", stage, e)
			}
		}
		all, err := m.Posts(ctx, rd.Client, 1)
		if err != nil || !slices.Equal(all, want) {
			t.Fatalf("%s: posts %v (%v), want %v", stage, all, err, want)
		}
	}
	check("buffer")
	mergeNow(t, ctx, rd.Client, m, 1)
	s, b := m.Keys(1)
	if n := rd.Client.StrLen(ctx, s).Val(); n != header+8*20 {
		t.Fatalf("sealed %d bytes, want %d", n, header+8*20)
	}
	if rd.Client.Exists(ctx, b).Val() != 0 {
		t.Fatal("the merge left the buffer")
	}
	check("sealed")
	pushPacked(t, ctx, rd.Client, m, 1, shuffled[3:9]...) // again, now in both parts
	check("both")
	mergeNow(t, ctx, rd.Client, m, 1)
	check("merged twice")
	if n := rd.Client.StrLen(ctx, s).Val(); n != header+8*20 {
		t.Fatalf("sealed %d bytes after merging duplicates, want %d", n, header+8*20)
	}
	if p := readPacked(t, ctx, rd.Client, m, 1, readmodel.MaxScoreMs, 5); !slices.Equal(ids(p.Entries), want[:5]) || !p.More {
		t.Fatalf("short page %v more %v", ids(p.Entries), p.More)
	}
}

// The push whose APPEND makes the buffer MergeAt ids long asks for
// the merge, not the one before; the first push of a buffer gives it the
// fallback TTL.
func TestPackedMergeThreshold(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	m := NewInboxes(readmodel.Keys{Prefix: rd.Prefix}, readmodel.Policy{})
	s, b := m.Keys(7)
	var posts []int64
	for i := range MergeAt {
		posts = append(posts, snow(testBaseMs+int64(i), 1))
	}
	if n := pushPacked(t, ctx, rd.Client, m, 7, posts[:1]...); n != 0 {
		t.Fatal("the first push merged")
	}
	if ttl := rd.Client.TTL(ctx, b).Val(); ttl <= 0 {
		t.Fatalf("buffer TTL %v after the first push", ttl)
	}
	if n := pushPacked(t, ctx, rd.Client, m, 7, posts[1:MergeAt-1]...); n != 0 {
		t.Fatalf("%d merges before the threshold", n)
	}
	if n := rd.Client.StrLen(ctx, b).Val(); n != 8*(MergeAt-1) || rd.Client.Exists(ctx, s).Val() != 0 {
		t.Fatalf("buffer %d bytes before the threshold", n)
	}
	if n := pushPacked(t, ctx, rd.Client, m, 7, posts[MergeAt-1]); n != 1 {
		t.Fatalf("%d merges at the threshold", n)
	}
	if rd.Client.Exists(ctx, b).Val() != 0 || rd.Client.StrLen(ctx, s).Val() != header+8*MergeAt {
		t.Fatal("the threshold push did not merge the buffer")
	}
	if ttl := rd.Client.TTL(ctx, s).Val(); ttl <= 0 {
		t.Fatalf("sealed TTL %v after the merge", ttl)
	}
	p := readPacked(t, ctx, rd.Client, m, 7, readmodel.MaxScoreMs, 10)
	if p.Built || p.Floor != nil {
		t.Fatalf("pushes alone made ~built %v or a floor %v", p.Built, p.Floor)
	}
}

// A merge over the trim band keeps the newest InboxKeep, raises the floor
// to the highest millisecond cut and drops everything at or below it,
// same-millisecond neighbours of the cut and late pushes included.
func TestPackedTrim(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	pol := readmodel.Policy{InboxMax: 20, InboxTrimSlack: 8, InboxTrimEvery: 4, InboxTrimBand: 3} // keep 12, over 15
	m := NewInboxes(readmodel.Keys{Prefix: rd.Prefix}, pol)
	var posts []int64
	for i := range 40 {
		posts = append(posts, snow(testBaseMs+int64(i), int64(i)))
	}
	pushPacked(t, ctx, rd.Client, m, 3, posts[:15]...)
	mergeNow(t, ctx, rd.Client, m, 3)
	if p := readPacked(t, ctx, rd.Client, m, 3, readmodel.MaxScoreMs, 50); len(p.Entries) != 15 || p.Floor != nil {
		t.Fatalf("at the band: %d entries, floor %v", len(p.Entries), p.Floor)
	}
	// 16 real: over the band, cut to 12; a second post in the 12th newest's
	// millisecond goes with the cut.
	tie := snow(testBaseMs+4, 1000)
	pushPacked(t, ctx, rd.Client, m, 3, posts[15], tie)
	mergeNow(t, ctx, rd.Client, m, 3)
	p := readPacked(t, ctx, rd.Client, m, 3, readmodel.MaxScoreMs, 50)
	want := slices.Clone(posts[5:16])
	slices.Reverse(want)
	if got := ids(p.Entries); !slices.Equal(got, want) || p.Floor == nil || *p.Floor != testBaseMs+4 {
		t.Fatalf("after the trim: %v floor %v, want %v floor %d", got, p.Floor, want, testBaseMs+4)
	}
	// A late push at the floor is not shown, and the next merge drops it.
	pushPacked(t, ctx, rd.Client, m, 3, snow(testBaseMs+4, 2000), snow(testBaseMs+1, 1))
	if got := ids(readPacked(t, ctx, rd.Client, m, 3, readmodel.MaxScoreMs, 50).Entries); !slices.Equal(got, want) {
		t.Fatalf("late pushes shown: %v", got)
	}
	mergeNow(t, ctx, rd.Client, m, 3)
	s, _ := m.Keys(3)
	if n := rd.Client.StrLen(ctx, s).Val(); n != header+8*int64(len(want)) {
		t.Fatalf("sealed %d bytes after merging late pushes, want %d", n, header+8*len(want))
	}
	// Many pushes at once: never over the band after a merge.
	pushPacked(t, ctx, rd.Client, m, 3, posts[16:]...)
	mergeNow(t, ctx, rd.Client, m, 3)
	p = readPacked(t, ctx, rd.Client, m, 3, readmodel.MaxScoreMs, 50)
	want = slices.Clone(posts[28:])
	slices.Reverse(want)
	if got := ids(p.Entries); !slices.Equal(got, want) || *p.Floor != testBaseMs+27 {
		t.Fatalf("after a big merge: %v floor %v, want %v", got, *p.Floor, want)
	}
}

// The cold rebuild sets ~built, the floor when cut at the bound, the TTL,
// and only adds (a push that landed before it survives); a backfill's
// floor raise only grows the floor and drops what lies at or below it;
// removal takes posts out of both parts and leaves the markers.
func TestPackedFloorBuiltRemove(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	pol := readmodel.Policy{InboxMax: 10, InboxTrimSlack: 2, InboxTrimEvery: 4, InboxTrimBand: 2}
	m := NewInboxes(readmodel.Keys{Prefix: rd.Prefix}, pol)
	early := snow(testBaseMs+100, 1)
	pushPacked(t, ctx, rd.Client, m, 5, early)
	if p := readPacked(t, ctx, rd.Client, m, 5, readmodel.MaxScoreMs, 20); p.Built {
		t.Fatal("a pushed-only inbox is built")
	}
	var rebuilt []readmodel.Entry
	for i := range 10 {
		ms := testBaseMs + 50 - int64(i)
		rebuilt = append(rebuilt, readmodel.Entry{ID: snow(ms, 5), Ms: ms})
	}
	if err := m.WriteRebuilt(ctx, rd.Client, 5, rebuilt); err != nil {
		t.Fatal(err)
	}
	p := readPacked(t, ctx, rd.Client, m, 5, readmodel.MaxScoreMs, 20)
	want := append([]int64{early}, ids(rebuilt[:9])...) // the oldest is the floor's own ms
	if !p.Built || p.Floor == nil || *p.Floor != testBaseMs+41 || !slices.Equal(ids(p.Entries), want) {
		t.Fatalf("rebuilt: built %v floor %v entries %v, want %v", p.Built, p.Floor, ids(p.Entries), want)
	}
	s, b := m.Keys(5)
	if ttl := rd.Client.TTL(ctx, s).Val(); ttl < pol.WithDefaults().InboxTTL()-60e9 {
		t.Fatalf("rebuilt TTL %v", ttl)
	}
	// A backfill raises the floor; a lower raise later does not lower it.
	bf := []readmodel.Entry{{ID: snow(testBaseMs+60, 9), Ms: testBaseMs + 60}, {ID: snow(testBaseMs+45, 9), Ms: testBaseMs + 45}}
	if err := readmodel.Exec(ctx, rd.Client, func(pipe redis.Pipeliner) {
		m.QueueBackfill(ctx, pipe, 5, bf, testBaseMs+45, true)
		m.QueueBackfill(ctx, pipe, 5, nil, testBaseMs+42, true)
	}); err != nil {
		t.Fatal(err)
	}
	p = readPacked(t, ctx, rd.Client, m, 5, readmodel.MaxScoreMs, 20)
	want = []int64{early, bf[0].ID, rebuilt[0].ID, rebuilt[1].ID, rebuilt[2].ID, rebuilt[3].ID, rebuilt[4].ID}
	if !p.Built || *p.Floor != testBaseMs+45 || !slices.Equal(ids(p.Entries), want) {
		t.Fatalf("backfilled: floor %v entries %v, want %v", *p.Floor, ids(p.Entries), want)
	}
	// Remove one sealed and one buffered post, and one that is absent.
	fresh := snow(testBaseMs+200, 3)
	pushPacked(t, ctx, rd.Client, m, 5, fresh, snow(testBaseMs+201, 3))
	if err := m.Remove(ctx, rd.Client, 5, []int64{rebuilt[2].ID, fresh, 12345}); err != nil {
		t.Fatal(err)
	}
	p = readPacked(t, ctx, rd.Client, m, 5, readmodel.MaxScoreMs, 20)
	want = []int64{snow(testBaseMs+201, 3), early, bf[0].ID, rebuilt[0].ID, rebuilt[1].ID, rebuilt[3].ID, rebuilt[4].ID}
	if !p.Built || *p.Floor != testBaseMs+45 || !slices.Equal(ids(p.Entries), want) {
		t.Fatalf("after removal: built %v floor %v entries %v, want %v", p.Built, *p.Floor, ids(p.Entries), want)
	}
	if err := m.Remove(ctx, rd.Client, 5, []int64{snow(testBaseMs+201, 3)}); err != nil {
		t.Fatal(err)
	}
	if rd.Client.Exists(ctx, b).Val() != 0 {
		t.Fatal("an emptied buffer was kept")
	}
	if err := m.Touch(ctx, rd.Client, 5); err != nil {
		t.Fatal(err)
	}
	// Nothing to merge into a missing inbox writes nothing.
	mergeNow(t, ctx, rd.Client, m, 99)
	if s, b := m.Keys(99); rd.Client.Exists(ctx, s, b).Val() != 0 {
		t.Fatal("a merge of nothing created keys")
	}
}

// Merges agree with the bound rule computed here, on runs of pushes
// mostly in order (the script's in-place path, its trim window, and the
// fallback when more than the window share the cut's millisecond),
// sometimes out of order or redelivered (the sorting path), and shuffled
// (the buffers sorted by the client before their merges).
func TestPackedMergeModel(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	pol := readmodel.Policy{InboxMax: 60, InboxTrimSlack: 20, InboxTrimEvery: 4, InboxTrimBand: 5} // keep 40, over 45
	m := NewInboxes(readmodel.Keys{Prefix: rd.Prefix}, pol)
	keep, over := pol.WithDefaults().InboxKeep(), pol.WithDefaults().InboxTrimOver()
	rng := rand.New(rand.NewPCG(5, 6))
	for user := int64(1); user <= 30; user++ {
		var model []int64 // ascending
		floor := int64(-1)
		ms, seq := int64(testBaseMs), int64(0)
		if user%2 == 0 {
			if err := m.WriteRebuilt(ctx, rd.Client, user, nil); err != nil {
				t.Fatal(err)
			}
		}
		for range 12 {
			var batch []int64
			for range 1 + rng.IntN(50) {
				switch r := rng.IntN(20); {
				case r == 0 && len(model) > 0: // redelivered
					batch = append(batch, model[rng.IntN(len(model))])
					continue
				case r == 1: // late
					batch = append(batch, snow(ms-int64(rng.IntN(30)), 3000+int64(rng.IntN(1000))))
					continue
				case user%3 == 0 && rng.IntN(40) > 0: // long runs of one millisecond
				case user%3 == 1 && r < 10: // short ones
				default:
					ms += int64(1 + rng.IntN(2))
				}
				seq++
				batch = append(batch, snow(ms, seq))
			}
			if user%4 == 3 { // interleaved partitions: the buffer's merges sort it (QueueBufferMerge)
				rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
			}
			pushPacked(t, ctx, rd.Client, m, user, batch...)
			mergeNow(t, ctx, rd.Client, m, user)
			for _, id := range batch {
				if floor < 0 || idMs(id) > floor {
					model = append(model, id)
				}
			}
			slices.Sort(model)
			model = slices.Compact(model)
			if len(model) > over {
				if f := idMs(model[len(model)-keep-1]); f > floor {
					floor = f
				}
				model = slices.DeleteFunc(model, func(id int64) bool { return idMs(id) <= floor })
			}
			got, err := m.Posts(ctx, rd.Client, user)
			if err != nil {
				t.Fatal(err)
			}
			want := slices.Clone(model)
			slices.Reverse(want)
			p := readPacked(t, ctx, rd.Client, m, user, readmodel.MaxScoreMs, 1)
			if !slices.Equal(got, want) || fmt.Sprint(deref(p.Floor)) != fmt.Sprint(deref(ptrIf(floor))) || p.Built != (user%2 == 0) {
				t.Fatalf("user %d: %v floor %v built %v, want %v floor %d", user, got, deref(p.Floor), p.Built, want, floor)
			}
		}
	}
}

func ptrIf(f int64) *int64 {
	if f < 0 {
		return nil
	}
	return &f
}

// Removal matches whole ids only: the bytes of an absent id across two
// neighbouring ids are not a match, in the sealed string or the buffer.
func TestPackedRemoveAligned(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	m := NewInboxes(readmodel.Keys{Prefix: rd.Prefix}, readmodel.Policy{})
	a, c, ghost := int64(0x01), int64(0x0200000000000000), int64(0x0102) // a|c holds ghost's bytes at offset 1
	for _, merged := range []bool{true, false} {
		user := int64(1)
		if !merged {
			user = 2
		}
		pushPacked(t, ctx, rd.Client, m, user, a, c)
		if merged {
			mergeNow(t, ctx, rd.Client, m, user)
		}
		if err := m.Remove(ctx, rd.Client, user, []int64{ghost}); err != nil {
			t.Fatal(err)
		}
		if got, _ := m.Posts(ctx, rd.Client, user); !slices.Equal(got, []int64{c, a}) {
			t.Fatalf("merged %v: after removing an absent id: %v", merged, got)
		}
		if err := m.Remove(ctx, rd.Client, user, []int64{a}); err != nil {
			t.Fatal(err)
		}
		if got, _ := m.Posts(ctx, rd.Client, user); !slices.Equal(got, []int64{c}) {
			t.Fatalf("merged %v: after removing %d: %v", merged, a, got)
		}
	}
}

// A batched push reaches every inbox, a redelivery of the batch adds
// nothing visible, and the batch that fills buffers merges exactly those.
func TestPackedPushAll(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	m := NewInboxes(readmodel.Keys{Prefix: rd.Prefix}, readmodel.Policy{})
	users := []int64{1, 2, 3, 4, 5}
	// inbox 1 starts MergeAt-1 ids ahead
	for i := range MergeAt - 1 {
		pushPacked(t, ctx, rd.Client, m, 1, snow(testBaseMs+int64(i), 9))
	}
	post := snow(testBaseMs+1000, 1)
	for round := range 2 {
		n, err := m.PushAll(ctx, rd.Client, users, m.NewPush(post))
		if err != nil {
			t.Fatal(err)
		}
		if want := 1 - round; n != want {
			t.Fatalf("round %d: %d merges, want %d", round, n, want)
		}
	}
	for _, u := range users {
		p := readPacked(t, ctx, rd.Client, m, u, readmodel.MaxScoreMs, 2)
		if len(p.Entries) == 0 || p.Entries[0].ID != post || (u != 1 && len(p.Entries) != 1) {
			t.Fatalf("inbox %d: %v", u, p.Entries)
		}
	}
	if s, _ := m.Keys(1); rd.Client.StrLen(ctx, s).Val() != header+8*MergeAt {
		t.Fatal("the filling push did not merge inbox 1")
	}
}

// The bulk build's writer writes what the cold rebuild writes for the
// same inbox (the pages, floor, ~built), with the build's TTL, and what a
// later merge of pushes extends.
func TestPackedBuildWriter(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	pol := readmodel.Policy{InboxMax: 30, InboxTrimSlack: 6, InboxTrimEvery: 4, InboxTrimBand: 3}
	m := NewInboxes(readmodel.Keys{Prefix: rd.Prefix}, pol)
	rng := rand.New(rand.NewPCG(8, 9))
	nowMs := time.Now().UnixMilli()
	var c builtChunk
	for u := range 20 {
		var in BuiltInbox
		ms := int64(testBaseMs + 10_000)
		n := 1 + rng.IntN(28)
		if u%2 == 0 {
			n = 29 // with the floor's post, at the bound: the rebuild sets the floor
		}
		for i := range n {
			if rng.IntN(3) > 0 {
				ms -= int64(1 + rng.IntN(4))
			}
			in.Kept = append(in.Kept, readmodel.Entry{ID: snow(ms, int64(rng.IntN(1000)*10+i)), Ms: ms}) // ids of one ms in any order
		}
		if u%2 == 0 {
			in.Floor, in.HasFloor = ms-1, true
		}
		c.users = append(c.users, int64(100+u))
		c.expires = append(c.expires, nowMs+3_600_000)
		c.inboxes = append(c.inboxes, in)
		// the cold rebuild of the same posts, newest first by id, into user u+1
		es := slices.Clone(in.Kept)
		slices.SortFunc(es, func(a, b readmodel.Entry) int { return cmpDesc(a.ID, b.ID) })
		if in.HasFloor {
			es = append(es, readmodel.Entry{ID: snow(in.Floor, 0), Ms: in.Floor}) // the rebuild's floor comes from its oldest post
		}
		if err := m.WriteRebuilt(ctx, rd.Client, int64(u+1), es); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.WriteChunk(ctx, rd.Client, c, func() int64 { return nowMs }, &BuildBuffers{}); err != nil {
		t.Fatal(err)
	}
	for u := range 20 {
		built, rebuilt := int64(100+u), int64(u+1)
		a := readPacked(t, ctx, rd.Client, m, built, readmodel.MaxScoreMs, 40)
		b := readPacked(t, ctx, rd.Client, m, rebuilt, readmodel.MaxScoreMs, 40)
		if fmt.Sprint(a.Entries, deref(a.Floor), a.Built) != fmt.Sprint(b.Entries, deref(b.Floor), b.Built) || !a.Built || len(a.Entries) != len(c.inboxes[u].Kept) {
			t.Fatalf("inbox %d: built %v %v %v, rebuilt %v %v %v", u, a.Entries, deref(a.Floor), a.Built, b.Entries, deref(b.Floor), b.Built)
		}
		s, _ := m.Keys(built)
		if ttl := rd.Client.PTTL(ctx, s).Val(); ttl <= 0 || ttl > time.Hour {
			t.Fatalf("inbox %d: TTL %v", u, ttl)
		}
	}
	// a merge extends a built inbox
	post := snow(testBaseMs+20_000, 1)
	pushPacked(t, ctx, rd.Client, m, 100, post)
	mergeNow(t, ctx, rd.Client, m, 100)
	if p := readPacked(t, ctx, rd.Client, m, 100, readmodel.MaxScoreMs, 1); p.Entries[0].ID != post || !p.Built {
		t.Fatalf("after a merge: %v", p.Entries)
	}
}

// The merge of a buffer the client read and sorted (QueueBufferMerge)
// against what can happen to the buffer between the read and the merge:
// nothing (the sorted ids appended, the buffer gone), a push landing (it
// stays in the buffer, with its TTL), another merge taking the buffer (the
// stale read adds nothing twice), a removal taking an id from it (the
// stale read does not bring the removed post back).
func TestPackedBufferMerge(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	m := NewInboxes(readmodel.Keys{Prefix: rd.Prefix}, readmodel.Policy{})
	shuffledPosts := func(from int64) (posts, shuffled []int64) {
		for i := range int64(10) {
			posts = append(posts, snow(testBaseMs+from+i, from+i))
		}
		shuffled = slices.Clone(posts)
		rand.New(rand.NewPCG(uint64(from), 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		return posts, append(shuffled, shuffled[2]) // and a redelivery
	}
	// fill writes the shuffled posts to user's buffer, over sealed posts
	// older than them, and reads the buffer as FollowUp does.
	fill := func(user int64) (posts []int64, read *redis.StringCmd) {
		t.Helper()
		old := []readmodel.Entry{{ID: snow(testBaseMs, 0), Ms: testBaseMs}}
		if err := m.WriteRebuilt(ctx, rd.Client, user, old); err != nil {
			t.Fatal(err)
		}
		posts, shuffled := shuffledPosts(100 * user)
		_, b := m.Keys(user)
		if err := rd.Client.Set(ctx, b, packIDs(shuffled), time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		read = rd.Client.Get(ctx, b)
		if read.Err() != nil {
			t.Fatal(read.Err())
		}
		return append([]int64{old[0].ID}, posts...), read
	}
	merge := func(user int64, read *redis.StringCmd) {
		t.Helper()
		if err := readmodel.Exec(ctx, rd.Client, func(pipe redis.Pipeliner) {
			if !m.QueueBufferMerge(ctx, pipe, user, read) {
				t.Fatal("nothing queued for a buffer read")
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(user int64, sealed, buffered []int64) {
		t.Helper()
		s, b := m.Keys(user)
		raw := rd.Client.Get(ctx, s).Val()
		var got []int64
		for i := 0; i+8 <= len(raw)-header; i += 8 {
			got = append(got, int64(binary.BigEndian.Uint64([]byte(raw[i:]))))
		}
		if !slices.Equal(got, sealed) {
			t.Fatalf("inbox %d sealed %v, want %v", user, got, sealed)
		}
		buf := rd.Client.Get(ctx, b).Val()
		if want := string(packIDs(buffered)); buf != want {
			t.Fatalf("inbox %d buffer %x, want %x", user, buf, want)
		}
		if len(buffered) > 0 && rd.Client.TTL(ctx, b).Val() <= 0 {
			t.Fatalf("inbox %d: the buffer kept after the merge lost its TTL", user)
		}
		all, err := m.Posts(ctx, rd.Client, user)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(sealed)
		for _, id := range buffered {
			if !slices.Contains(want, id) {
				want = append(want, id)
			}
		}
		slices.Sort(want)
		slices.Reverse(want)
		if !slices.Equal(all, want) {
			t.Fatalf("inbox %d reads %v, want %v", user, all, want)
		}
	}

	posts, read := fill(1) // nothing between
	merge(1, read)
	expect(1, posts, nil)

	posts, read = fill(2) // a push lands between
	late := snow(testBaseMs+500, 1)
	pushPacked(t, ctx, rd.Client, m, 2, late)
	merge(2, read)
	expect(2, posts, []int64{late})

	posts, read = fill(3) // another merge takes the buffer between
	mergeNow(t, ctx, rd.Client, m, 3)
	expect(3, posts, nil)
	merge(3, read)
	expect(3, posts, nil)
	pushPacked(t, ctx, rd.Client, m, 3, late) // and a new buffer starts
	merge(3, read)
	expect(3, append(slices.Clone(posts), late), nil)

	posts, read = fill(4) // a removal takes an id from the buffer between
	gone := posts[4]
	if err := m.Remove(ctx, rd.Client, 4, []int64{gone}); err != nil {
		t.Fatal(err)
	}
	merge(4, read)
	expect(4, slices.DeleteFunc(slices.Clone(posts), func(id int64) bool { return id == gone }), nil)
}

// TestPushAllocations checks a follower's push costs the four
// allocations QueuePush's comment counts: it is paid once per delivered
// inbox entry.
func TestPushAllocations(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // only queued, never sent
	defer rdb.Close()
	m := NewInboxes(readmodel.Keys{Prefix: "t9:", Versions: readmodel.Versions{Inbox: 2}}, readmodel.Policy{})
	p, ctx := m.NewPush(1234567), context.Background()
	pipe := rdb.Pipeline()
	for range 2000 { // grow the pipeline's slice first
		m.QueuePush(ctx, pipe, 123456, p)
	}
	if n := testing.AllocsPerRun(1000, func() { m.QueuePush(ctx, pipe, 123456, p) }); n > 4 {
		t.Errorf("QueuePush: %v allocations, want at most 4", n)
	}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}
