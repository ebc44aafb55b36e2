package readmodel

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/testkit/testenv"
)

// The hot path's trimScript leaves exactly what boundedAddScript (with no
// entries to add and no slack) leaves, on random inboxes: with and without
// ~floor and ~built, same-score neighbours across the cut, late pushes at
// and below the floor, a floor already above the cut, and inboxes at or
// under the bound. A key that does not exist stays absent.
func TestTrimScriptMatchesBoundedAdd(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 11))
	const max = 12
	for i := range 400 {
		var zs []redis.Z
		real := max - 3 + rng.IntN(25)
		score := 1000.0
		for e := range real {
			if rng.IntN(3) > 0 { // else: the same millisecond as the previous one
				score += float64(1 + rng.IntN(3))
			}
			zs = append(zs, redis.Z{Score: score, Member: fmt.Sprint(900000 + e*7%real*10 + e)})
		}
		floor := math.NaN()
		if rng.IntN(4) > 0 {
			// Below every entry, among them, or above the cut.
			floor = []float64{999, 1000 + float64(rng.IntN(2*real)), score - float64(rng.IntN(max))}[rng.IntN(3)]
			zs = append(zs, redis.Z{Score: floor, Member: SentinelFloor})
			for l := range rng.IntN(3) { // late pushes at or below the floor
				zs = append(zs, redis.Z{Score: floor - float64(rng.IntN(2)), Member: fmt.Sprint(800000 + l)})
			}
		}
		if rng.IntN(4) > 0 {
			zs = append(zs, redis.Z{Score: math.Inf(1), Member: SentinelBuilt})
		}
		a, b := fmt.Sprintf("%sa%d", rd.Prefix, i), fmt.Sprintf("%sb%d", rd.Prefix, i)
		rd.Client.ZAdd(ctx, a, zs...)
		rd.Client.ZAdd(ctx, b, zs...)
		if err := boundedAddScript.Run(ctx, rd.Client, []string{a}, max, 0, "", "", "0", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := trimScript.Run(ctx, rd.Client, []string{b}, max).Err(); err != nil {
			t.Fatal(err)
		}
		want := rd.Client.ZRangeWithScores(ctx, a, 0, -1).Val()
		got := rd.Client.ZRangeWithScores(ctx, b, 0, -1).Val()
		if fmt.Sprint(want) != fmt.Sprint(got) {
			t.Fatalf("case %d (%d real, floor %v):\n bounded-add %v\n trim        %v", i, real, floor, want, got)
		}
	}
	missing := rd.Prefix + "missing"
	if err := trimScript.Run(ctx, rd.Client, []string{missing}, max).Err(); err != nil {
		t.Fatal(err)
	}
	if n := rd.Client.Exists(ctx, missing).Val(); n != 0 {
		t.Fatal("trimScript created a key that did not exist")
	}
}

// The bound rule's configuration: a trim keeps InboxMax - slack, so the
// slack must stay below the bound; a defaulted slack is clamped to a
// quarter of the bound (a small FEED_INBOX_MAX keeps most of it), an
// explicit one is taken as it is. Trims start over keep + band: the
// defaulted policy's band is half the slack, an explicit policy's zero
// band is the slack (trims start over InboxMax), an explicit band is taken
// as it is and must lie within the slack.
func TestTrimSlackConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in                      Policy
		slack, keep, band, over int
	}{
		{Policy{}, 64, 436, 32, 468},
		{Policy{InboxMax: 20}, 5, 15, 2, 17},
		{Policy{InboxMax: 4}, 1, 3, 1, 4},
		{Policy{InboxMax: 3}, 0, 3, 0, 3},
		{Policy{InboxMax: 20, InboxTrimSlack: 2}, 2, 18, 2, 20},
		{Policy{InboxMax: 20, InboxTrimEvery: 1}, 0, 20, 0, 20},
		{Policy{InboxMax: 20, InboxTrimSlack: 8, InboxTrimEvery: 4}, 8, 12, 8, 20},
		{Policy{InboxMax: 20, InboxTrimSlack: 8, InboxTrimEvery: 4, InboxTrimBand: 3}, 8, 12, 3, 15},
		{Policy{InboxTrimBand: 10}, 64, 436, 10, 446},
		{Policy{InboxMax: 8, InboxTrimSlack: -3, InboxTrimEvery: 4}, 0, 8, 0, 8},
	} {
		got := c.in.WithDefaults()
		if got.InboxTrimSlack != c.slack || got.InboxKeep() != c.keep || got.InboxTrimBand != c.band || got.InboxTrimOver() != c.over {
			t.Errorf("%+v: slack %d keep %d band %d over %d, want %d, %d, %d, %d", c.in,
				got.InboxTrimSlack, got.InboxKeep(), got.InboxTrimBand, got.InboxTrimOver(), c.slack, c.keep, c.band, c.over)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%+v: %v", c.in, err)
		}
	}
	for _, bad := range []Policy{
		{InboxMax: 10, InboxTrimSlack: 10, InboxTrimEvery: 16}, // a trim would keep nothing
		{InboxMax: 10, InboxTrimSlack: 4, InboxTrimEvery: 16, InboxTrimBand: 5},
		{InboxMax: 10, InboxTrimSlack: 4, InboxTrimEvery: 16, InboxTrimBand: -1},
	} {
		if err := bad.WithDefaults().Validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}
