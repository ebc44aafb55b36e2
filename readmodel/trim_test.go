package readmodel

import (
	"testing"
)

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
