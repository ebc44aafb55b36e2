package queries

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
)

func ids(keys []key) []int64 {
	out := make([]int64, len(keys))
	for i, k := range keys {
		out[i] = k.id
	}
	return out
}

func e(id, ms int64) key { return key{ms: ms, id: id} }

// The textbook merge case: post 3 is in both sources and
// shown once; the second page starts right after the cursor.
func TestMergePageSeedExample(t *testing.T) {
	t.Parallel()
	pushed := []key{e(5, 5000), e(3, 3000), e(1, 1000)}
	pulled := []key{e(4, 4000), e(3, 3000), e(2, 2000)}
	first := mergePage(startKey, 3, pushed, pulled)
	if got := ids(first); !slices.Equal(got, []int64{5, 4, 3}) {
		t.Fatalf("first page = %v, want [5 4 3]", got)
	}
	second := mergePage(key{ms: 3000, id: 3}, 3, pushed, pulled)
	if got := ids(second); !slices.Equal(got, []int64{2, 1}) {
		t.Fatalf("second page = %v, want [2 1]", got)
	}
}

func TestMergePageEdgeCases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cur   key
		limit int
		lists [][]key
		want  []int64
	}{
		{"same millisecond ordered by id", startKey, 10,
			[][]key{{e(7, 100), e(9, 100)}, {e(8, 100), e(10, 99)}}, []int64{9, 8, 7, 10}},
		{"same millisecond as the cursor: only smaller ids", key{ms: 100, id: 8}, 10,
			[][]key{{e(7, 100), e(9, 100), e(8, 100)}, {e(6, 101), e(5, 99)}}, []int64{7, 5}},
		{"duplicates across three sources", startKey, 10,
			[][]key{{e(3, 30), e(2, 20)}, {e(3, 30), e(1, 10)}, {e(2, 20), e(3, 30)}}, []int64{3, 2, 1}},
		{"duplicates inside one source", startKey, 10, [][]key{{e(3, 30), e(3, 30)}}, []int64{3}},
		{"cursor at the last item", e(1, 10), 10, [][]key{{e(3, 30), e(2, 20), e(1, 10)}}, []int64{}},
		{"cursor beyond the last item", e(1, 5), 10, [][]key{{e(3, 30), e(1, 10)}}, []int64{}},
		{"empty sources", startKey, 10, [][]key{{}, nil}, []int64{}},
		{"no sources", startKey, 10, nil, []int64{}},
		{"one empty source", startKey, 2, [][]key{{}, {e(1, 10), e(2, 20), e(3, 30)}}, []int64{3, 2}},
		{"unsorted input", startKey, 10, [][]key{{e(1, 10), e(3, 30), e(2, 20)}}, []int64{3, 2, 1}},
		{"ids of different lengths order as numbers", startKey, 10,
			[][]key{{e(9, 100), e(10, 100), e(100, 100)}}, []int64{100, 10, 9}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ids(mergePage(tc.cur, tc.limit, tc.lists...))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// Paging with cursors over merged sources visits every post exactly once,
// whatever the page size, including runs of same-millisecond posts.
func TestMergePagingVisitsEveryPostOnce(t *testing.T) {
	t.Parallel()
	var a, b []key
	var all []key
	for i := int64(1); i <= 40; i++ {
		k := e(i*7%41+1, 1000+i/5) // five posts per millisecond, ids not in time order
		all = append(all, k)
		if i%2 == 0 {
			a = append(a, k)
		}
		if i%3 != 0 {
			b = append(b, k)
		}
	}
	sortNewestFirst(all)
	var want []key
	for _, k := range all {
		if slices.Contains(a, k) || slices.Contains(b, k) {
			want = append(want, k)
		}
	}
	for limit := 1; limit <= 7; limit++ {
		var got []key
		cur := startKey
		for pages := 0; ; pages++ {
			if pages > 100 {
				t.Fatal("paging does not end")
			}
			page := mergePage(cur, limit, a, b)
			if len(page) == 0 {
				break
			}
			got = append(got, page...)
			cur = page[len(page)-1]
		}
		if !slices.Equal(got, want) {
			t.Fatalf("limit %d: got %v, want %v", limit, ids(got), ids(want))
		}
	}
}

func TestMergeSegmentBounds(t *testing.T) {
	t.Parallel()
	t.Run("complete sources end the feed", func(t *testing.T) {
		seg := mergeSegment(startKey, []source{{keys: []key{e(1, 10)}, bound: minKey}})
		if seg.next != stepEnd || !slices.Equal(ids(seg.keys), []int64{1}) {
			t.Fatalf("got %+v", seg)
		}
	})
	t.Run("a floor keeps only entries above it and continues in PostgreSQL", func(t *testing.T) {
		inbox := source{keys: []key{e(5, 50), e(4, 40), e(3, 30)}, bound: below(40), floor: true}
		celeb := source{keys: []key{e(9, 45), e(8, 20)}, bound: minKey}
		seg := mergeSegment(startKey, []source{inbox, celeb})
		if got := ids(seg.keys); !slices.Equal(got, []int64{5, 9}) {
			t.Fatalf("keys = %v, want [5 9] (40 is at the floor, not above)", got)
		}
		if seg.next != stepPG || seg.bound != below(40) {
			t.Fatalf("next = %v bound = %v", seg.next, seg.bound)
		}
	})
	t.Run("the highest bound wins: a celebrity floor above the inbox's", func(t *testing.T) {
		inbox := source{keys: []key{e(5, 50), e(2, 20)}, bound: below(10), floor: true}
		celeb := source{keys: []key{e(6, 60), e(4, 40)}, bound: below(30), floor: true}
		seg := mergeSegment(startKey, []source{inbox, celeb})
		if got := ids(seg.keys); !slices.Equal(got, []int64{6, 5, 4}) {
			t.Fatalf("keys = %v", got)
		}
		if seg.bound != below(30) || seg.next != stepPG {
			t.Fatalf("bound %v next %v", seg.bound, seg.next)
		}
	})
	t.Run("a LIMIT cut continues in Redis", func(t *testing.T) {
		seg := mergeSegment(startKey, []source{{keys: []key{e(5, 50), e(4, 40)}, bound: below(40)}})
		if seg.next != stepRedis || !slices.Equal(ids(seg.keys), []int64{5}) {
			t.Fatalf("got %+v", seg)
		}
	})
	t.Run("a cut that makes no progress continues in PostgreSQL", func(t *testing.T) {
		cur := e(9, 50)
		seg := mergeSegment(cur, []source{{keys: []key{e(8, 50), e(7, 50)}, bound: below(50)}})
		if seg.next != stepPG || len(seg.keys) != 0 {
			t.Fatalf("got %+v", seg)
		}
	})
}

func TestZSource(t *testing.T) {
	t.Parallel()
	reply := []redis.Z{
		{Score: 50, Member: "5"},
		{Score: 40, Member: readmodel.SentinelFloor},
		{Score: 40, Member: "4"},
		{Score: 30, Member: "x"}, // not a post id: never shown
	}
	t.Run("cut at the limit bounds above the last score", func(t *testing.T) {
		s := zsource(reply, 4, nil)
		if s.bound != below(30) || s.floor || !slices.Equal(ids(s.keys), []int64{5, 4}) {
			t.Fatalf("got %+v", s)
		}
	})
	t.Run("short reply with a floor", func(t *testing.T) {
		fl := int64(40)
		s := zsource(reply, 10, &fl)
		if s.bound != below(40) || !s.floor {
			t.Fatalf("got %+v", s)
		}
	})
	t.Run("floor below a cut: the cut bounds", func(t *testing.T) {
		fl := int64(10)
		s := zsource(reply, 4, &fl)
		if s.bound != below(30) || s.floor {
			t.Fatalf("got %+v", s)
		}
	})
	t.Run("built sentinel is skipped", func(t *testing.T) {
		s := zsource([]redis.Z{{Score: math.Inf(1), Member: readmodel.SentinelBuilt}, {Score: 1, Member: "1"}}, 10, nil)
		if s.bound != minKey || !slices.Equal(ids(s.keys), []int64{1}) {
			t.Fatalf("got %+v", s)
		}
	})
}

func TestMakePage(t *testing.T) {
	t.Parallel()
	items := []item{newItem(3, 1, "c", 30), newItem(2, 1, "b", 20), newItem(1, 1, "a", 10)}
	p := makePage(items, 2)
	if len(p.Items) != 2 || p.NextCursor == nil {
		t.Fatalf("page %+v", p)
	}
	if k, err := parseCursor(*p.NextCursor); err != nil || k != e(2, 20) {
		t.Fatalf("next cursor %v %v, want the last shown item", k, err)
	}
	if p := makePage(items, 3); p.NextCursor != nil || len(p.Items) != 3 {
		t.Fatalf("end page %+v", p)
	}
	if p := makePage(nil, 3); p.Items == nil || p.NextCursor != nil {
		t.Fatalf("empty page %+v: items must be [] not null", p)
	}
	if got := formatTime(1_760_245_800_123); got != "2025-10-12T05:10:00.123Z" {
		t.Errorf("formatTime = %q", got)
	}
}

// A descending source (a reverse range reply) is cut early; the segment is
// the same as for the same keys in no particular order.
func TestMergeSegmentDescendingSourcesCutEarly(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 7))
	for range 500 {
		var srcs, plain []source
		for range 1 + rng.IntN(4) {
			var ks []key
			ms := int64(1000)
			for range rng.IntN(30) {
				ms -= rng.Int64N(3) // ties in one millisecond, ids in any order
				ks = append(ks, key{ms: ms, id: 1 + rng.Int64N(1_000_000)})
			}
			bound := minKey
			if rng.IntN(3) > 0 {
				bound = key{ms: 1000 - rng.Int64N(40), id: rng.Int64N(1_000_000)}
			}
			srcs = append(srcs, source{keys: ks, bound: bound, desc: true})
			shuffled := slices.Clone(ks)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			plain = append(plain, source{keys: shuffled, bound: bound})
		}
		cur := key{ms: 1000 - rng.Int64N(20), id: rng.Int64N(1_000_000)}
		got, want := mergeSegment(cur, srcs), mergeSegment(cur, plain)
		if !slices.Equal(got.keys, want.keys) || got.bound != want.bound || got.next != want.next {
			t.Fatalf("desc %+v\nplain %+v", got, want)
		}
	}
}

func TestPackedSource(t *testing.T) {
	t.Parallel()
	page := func(more bool, floor *int64) homefeed.Page {
		return homefeed.Page{Entries: []readmodel.Entry{{ID: 50, Ms: 5}, {ID: 41, Ms: 4}, {ID: 40, Ms: 4}}, More: more, Floor: floor}
	}
	fl := func(v int64) *int64 { return &v }
	for _, c := range []struct {
		name  string
		p     homefeed.Page
		bound key
		floor bool
	}{
		{"complete: not cut, no floor", page(false, nil), minKey, false},
		{"cut: complete above the last millisecond", page(true, nil), below(4), false},
		{"floor above the cut bounds", page(true, fl(4)), below(4), true},
		{"floor below the cut: the cut bounds", page(true, fl(2)), below(4), false},
		{"floor of a page not cut", page(false, fl(3)), below(3), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := packedSource(c.p)
			if s.bound != c.bound || s.floor != c.floor || !s.desc || !slices.Equal(ids(s.keys), []int64{50, 41, 40}) {
				t.Fatalf("got %+v, want bound %v floor %v", s, c.bound, c.floor)
			}
		})
	}
}

// followAnswers answers the same whether it scans or indexes: yes only for
// an asked author answered yes, the first answer of one asked twice.
func TestFollowAnswers(t *testing.T) {
	for _, n := range []int{0, 3, maxScannedAuthors, maxScannedAuthors + 1, 300} {
		authors := make([]int64, n)
		is := make([]bool, n-n/3) // the last third unanswered: false
		for i := range authors {
			authors[i] = int64(1000 + 7*i)
		}
		for i := range is {
			is[i] = i%2 == 0
		}
		if n > 2 {
			authors[n-1] = authors[0] // asked twice: the first answer holds
		}
		f := newFollowAnswers(authors, is)
		if (f.index != nil) != (n > maxScannedAuthors) {
			t.Fatalf("n=%d: index %v", n, f.index != nil)
		}
		for i, a := range authors {
			want := i < len(is) && is[i]
			if n > 2 && i == n-1 {
				want = is[0]
			}
			if !f.known(a) || f.follows(a) != want {
				t.Fatalf("n=%d: author %d (#%d): known %v follows %v, want true %v", n, a, i, f.known(a), f.follows(a), want)
			}
		}
		if f.known(1) || f.follows(1) {
			t.Fatalf("n=%d: an author not asked is known", n)
		}
	}
}

// Descending sources that share posts (a post in the inbox and in a
// celebrity's timeline), with many posts per millisecond, merge to what
// sorting their keys makes.
func TestMergeSegmentDescendingSharedKeys(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 3))
	for range 2000 {
		var all []key
		ms := int64(100)
		for range rng.IntN(60) {
			ms -= rng.Int64N(2)
			all = append(all, key{ms: ms, id: 1 + rng.Int64N(8)})
		}
		all = slices.Compact(all)
		var srcs, plain []source
		for range 1 + rng.IntN(6) {
			var ks []key
			for _, k := range all {
				if rng.IntN(2) == 0 {
					ks = append(ks, k)
				}
			}
			// ties in any order within a millisecond
			for i := 0; i < len(ks); {
				j := i + 1
				for j < len(ks) && ks[j].ms == ks[i].ms {
					j++
				}
				rng.Shuffle(j-i, func(a, b int) { ks[i+a], ks[i+b] = ks[i+b], ks[i+a] })
				i = j
			}
			bound := minKey
			if rng.IntN(3) > 0 {
				bound = key{ms: 100 - rng.Int64N(40), id: rng.Int64N(10)}
			}
			srcs = append(srcs, source{keys: ks, bound: bound, desc: true})
			plain = append(plain, source{keys: slices.Clone(ks), bound: bound})
		}
		cur := startKey
		if rng.IntN(2) == 0 {
			cur = key{ms: 100 - rng.Int64N(20), id: rng.Int64N(10)}
		}
		got, want := mergeSegment(cur, srcs), mergeSegment(cur, plain)
		if !slices.Equal(got.keys, want.keys) || got.bound != want.bound || got.next != want.next {
			t.Fatalf("cur %v\ndesc %+v\nplain %+v", cur, got, want)
		}
	}
}

func BenchmarkMergeSegment(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	desc := func(n int, step int64) []key {
		ks := make([]key, n)
		ms := int64(1_000_000)
		for i := range ks {
			ms -= 1 + rng.Int64N(step)
			ks[i] = key{ms: ms, id: ms*10 + rng.Int64N(10)}
		}
		return ks
	}
	inbox, own := desc(27, 1000), desc(27, 50000)
	srcs := []source{
		{keys: inbox, bound: below(inbox[len(inbox)-1].ms), desc: true},
		{keys: own, bound: below(own[len(own)-1].ms), desc: true},
	}
	for range 3 {
		srcs = append(srcs, source{keys: desc(200, 5000), bound: minKey, floor: true, desc: true})
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = mergeSegment(startKey, srcs)
	}
}
