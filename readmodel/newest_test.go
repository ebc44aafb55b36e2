package readmodel

import (
	"context"
	"testing"

	"github.com/feedco/feed/testkit/testenv"
)

// The newest-post marker only rises (a post marked after a newer one
// leaves it), ids of different lengths compare as numbers, and the
// timelines projector's Add clears it for the marked post or a newer one,
// never for an older one.
func TestNewestMarker(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	tl := NewTimelines(Keys{Prefix: rd.Prefix}, 10)
	marker := func() int64 {
		t.Helper()
		pipe := rd.Client.Pipeline()
		c := tl.QueueNewest(ctx, pipe, 7)
		_, _ = pipe.Exec(ctx)
		return NewestOf(c)
	}
	for _, step := range []struct {
		mark, want int64
	}{{950, 950}, {1000, 1000}, {999, 1000}, {7_000_000_000_000_000_001, 7_000_000_000_000_000_001}, {7_000_000_000_000_000_000, 7_000_000_000_000_000_001}} {
		if err := tl.MarkNewest(ctx, rd.Client, 7, step.mark); err != nil {
			t.Fatal(err)
		}
		if got := marker(); got != step.want {
			t.Fatalf("marked %d: marker %d, want %d", step.mark, got, step.want)
		}
	}
	if err := tl.Add(ctx, rd.Client, 7, 7_000_000_000_000_000_000, 1); err != nil {
		t.Fatal(err)
	}
	if got := marker(); got != 7_000_000_000_000_000_001 {
		t.Fatalf("an older post's Add cleared the marker: %d", got)
	}
	if err := tl.Add(ctx, rd.Client, 7, 7_000_000_000_000_000_001, 1); err != nil {
		t.Fatal(err)
	}
	if got := marker(); got != 0 {
		t.Fatalf("the marked post's Add left the marker %d", got)
	}
	if err := tl.MarkNewest(ctx, rd.Client, 7, 999); err != nil {
		t.Fatal(err)
	}
	if err := tl.Add(ctx, rd.Client, 7, 1000, 1); err != nil {
		t.Fatal(err)
	}
	if got := marker(); got != 0 {
		t.Fatalf("a newer post's Add left the marker %d", got)
	}
}
