package projections

import (
	"slices"
	"testing"
	"time"
)

func testList(n int, loaded time.Time) *followerList {
	return &followerList{ids: make([]int64, n), loaded: loaded}
}

// The cache's bookkeeping: a retry (the same offset) and the next offset
// keep a partition's lists, any other offset drops them (and only that
// partition's); lists past the age bound are not served; over the row
// bound the least recently used go; lists over the length bound are not
// kept.
func TestFollowerCacheBookkeeping(t *testing.T) {
	now := time.Now()
	c := newFollowerCache(100, 40)
	c.now = func() time.Time { return now }
	p0 := delivery{topic: "feed", partition: 0, offset: 10}
	p1 := delivery{topic: "feed", partition: 1, offset: 5}
	c.observe(p0)
	c.observe(p1)
	c.put(p0, 1, testList(10, now))
	c.put(p1, 2, testList(10, now))
	at := func(d delivery, off int64) delivery { d.offset = off; return d }
	for _, off := range []int64{10, 11, 11, 12} {
		c.observe(at(p0, off))
		if c.get(at(p0, off), 1) == nil {
			t.Fatalf("offset %d after the previous one dropped the list", off)
		}
	}
	c.observe(at(p0, 14)) // a gap
	if c.get(p0, 1) != nil {
		t.Fatal("a gap in offsets kept the list")
	}
	if c.get(p1, 2) == nil {
		t.Fatal("a gap in partition 0 dropped partition 1's list")
	}
	c.observe(at(p1, 3)) // back: a redelivery from an older commit
	if c.get(p1, 2) != nil {
		t.Fatal("an offset going back kept the list")
	}
	if c.rowsHeld() != 0 {
		t.Fatalf("rows held %d after every list was dropped, want 0", c.rowsHeld())
	}

	// Age.
	c.put(p0, 3, testList(10, now.Add(-followerCacheMaxAge-time.Second)))
	if c.get(p0, 3) != nil {
		t.Fatal("a list past the age bound was served")
	}
	// Length bound.
	c.put(p0, 4, testList(41, now))
	if c.get(p0, 4) != nil || c.rowsHeld() != 0 {
		t.Fatal("a list over the length bound was kept")
	}
	// Row bound: 4 lists of 30 rows; the fourth put evicts down to 75 rows,
	// least recently used first (author 10 was read after 11 and 12).
	for a := int64(10); a < 13; a++ {
		now = now.Add(time.Second)
		c.put(p0, a, testList(30, now))
	}
	now = now.Add(time.Second)
	c.get(p0, 10)
	now = now.Add(time.Second)
	c.put(p0, 13, testList(30, now))
	if c.rowsHeld() > 75 {
		t.Fatalf("rows held %d over the bound, want at most 75", c.rowsHeld())
	}
	if c.get(p0, 11) != nil || c.get(p0, 12) != nil {
		t.Fatal("the least recently used lists were kept")
	}
	if c.get(p0, 10) == nil || c.get(p0, 13) == nil {
		t.Fatal("a recently used list was evicted")
	}
	c.drop(10)
	if c.get(p0, 10) != nil || c.rowsHeld() != 30 {
		t.Fatalf("drop: list kept or rows %d, want 30", c.rowsHeld())
	}
}

// change applies follow and mute events to a held list as set operations:
// idempotent, in id order, counted in the row bound, on a copy (a push
// holding the old list reads it unchanged), and a list that grows past
// the length bound is dropped.
func TestFollowerCacheChange(t *testing.T) {
	now := time.Now()
	c := newFollowerCache(100, 6)
	c.now = func() time.Time { return now }
	d := delivery{topic: "feed", partition: 2, offset: 1}
	c.observe(d)
	c.put(d, 7, &followerList{ids: []int64{10, 20, 30}, loaded: now})
	held := c.get(d, 7)
	check := func(when string, ids, muters, targets []int64) {
		t.Helper()
		l := c.get(d, 7)
		if l == nil {
			t.Fatalf("%s: the list was dropped", when)
		}
		if !slices.Equal(l.ids, ids) || !slices.Equal(l.muters, muters) || !slices.Equal(l.targets(), targets) {
			t.Fatalf("%s: followers %v, muters %v, targets %v; want %v, %v, %v", when, l.ids, l.muters, l.targets(), ids, muters, targets)
		}
		if c.rowsHeld() != len(ids)+len(muters) {
			t.Fatalf("%s: %d rows held, want %d", when, c.rowsHeld(), len(ids)+len(muters))
		}
	}
	c.change(7, 15, false, true)
	check("a follow", []int64{10, 15, 20, 30}, nil, []int64{10, 15, 20, 30})
	c.change(7, 15, false, true)
	check("the same follow again", []int64{10, 15, 20, 30}, nil, []int64{10, 15, 20, 30})
	c.change(7, 30, false, false)
	c.change(7, 99, false, false)
	check("an unfollow, and one of a non-follower", []int64{10, 15, 20}, nil, []int64{10, 15, 20})
	c.change(7, 20, true, true)
	c.change(7, 5, true, true)
	check("two mutes (one by a non-follower)", []int64{10, 15, 20}, []int64{5, 20}, []int64{10, 15})
	c.change(7, 5, false, true)
	check("a muter follows", []int64{5, 10, 15, 20}, []int64{5, 20}, []int64{10, 15})
	c.change(7, 20, true, false)
	check("an unmute", []int64{5, 10, 15, 20}, []int64{5}, []int64{10, 15, 20})
	if !slices.Equal(held.ids, []int64{10, 20, 30}) || held.muters != nil {
		t.Fatalf("the list a push held changed under it: %v, %v", held.ids, held.muters)
	}
	c.change(8, 1, false, true) // an author whose list is not held
	if c.get(d, 8) != nil {
		t.Fatal("a follow of an author not held created a list")
	}
	c.change(7, 40, false, true) // 5 followers + 1 muter: at the bound
	c.change(7, 50, false, true) // past it
	if c.get(d, 7) != nil || c.rowsHeld() != 0 {
		t.Fatalf("a list grown past the length bound was kept (rows %d)", c.rowsHeld())
	}
}
