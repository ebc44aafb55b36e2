package events

import (
	"math"
	"slices"
	"testing"
	"time"
)

// The layout is RFC 3339 in UTC with exactly three fractional digits, so
// the strings are fixed-width and order like the times they spell.
func TestCreatedAtLayout(t *testing.T) {
	at := time.Date(2025, 10, 12, 5, 10, 0, 120_456_789, time.FixedZone("x", 2*3600))
	got := at.UTC().Format(CreatedAtLayout)
	if got != "2025-10-12T03:10:00.120Z" {
		t.Fatalf("format = %q", got)
	}
	back, err := time.Parse(time.RFC3339Nano, got)
	if err != nil || !back.Equal(at.Truncate(time.Millisecond)) || back.Location() != time.UTC {
		t.Fatalf("%q parses as RFC 3339 to %v, %v", got, back, err)
	}
	if whole := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).Format(CreatedAtLayout); whole != "2025-01-02T03:04:05.000Z" {
		t.Fatalf("whole second = %q, want three zero digits", whole)
	}
	if a, b := at.UTC().Format(CreatedAtLayout), at.Add(time.Millisecond).UTC().Format(CreatedAtLayout); !(a < b) || len(a) != len(b) {
		t.Fatalf("%q and %q do not compare like their times", a, b)
	}
}

// Newest first is descending (ms, id): the millisecond decides, the id
// breaks ties inside one.
func TestFeedOrder(t *testing.T) {
	cases := []struct {
		a, b  FeedKey
		newer bool
	}{
		{FeedKey{Ms: 2, ID: 1}, FeedKey{Ms: 1, ID: 9}, true},
		{FeedKey{Ms: 1, ID: 9}, FeedKey{Ms: 2, ID: 1}, false},
		{FeedKey{Ms: 5, ID: 10}, FeedKey{Ms: 5, ID: 9}, true},
		{FeedKey{Ms: 5, ID: 9}, FeedKey{Ms: 5, ID: 10}, false},
		{FeedKey{Ms: 5, ID: 9}, FeedKey{Ms: 5, ID: 9}, false},
		{FeedKey{Ms: math.MaxInt64, ID: math.MaxInt64}, FeedKey{Ms: math.MaxInt64, ID: 1}, true},
		{FeedKey{Ms: -1, ID: 1}, FeedKey{Ms: math.MinInt64, ID: math.MaxInt64}, true},
	}
	for _, c := range cases {
		if got := c.a.Newer(c.b); got != c.newer {
			t.Errorf("%v.Newer(%v) = %v, want %v", c.a, c.b, got, c.newer)
		}
	}
	keys := []FeedKey{{Ms: 1, ID: 3}, {Ms: 2, ID: 1}, {Ms: 1, ID: 20}, {Ms: 2, ID: 1}, {Ms: 3, ID: 2}}
	slices.SortFunc(keys, NewestFirst)
	want := []FeedKey{{Ms: 3, ID: 2}, {Ms: 2, ID: 1}, {Ms: 2, ID: 1}, {Ms: 1, ID: 20}, {Ms: 1, ID: 3}}
	if !slices.Equal(keys, want) {
		t.Fatalf("sorted = %v, want %v", keys, want)
	}
	at := time.Date(2025, 10, 12, 5, 10, 0, 123_999_000, time.UTC)
	if k := KeyOf(at, 7); k != (FeedKey{Ms: 1_760_245_800_123, ID: 7}) {
		t.Fatalf("KeyOf = %v", k)
	}
}
