package readmodel

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/feedco/feed/testkit/testenv"
)

// The first projector to start records its fan-out policy with the active
// versions; a later one with the same policy starts, one with another
// celebrity threshold or inbox bound is refused, saying which.
func TestCheckPolicy(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	p := Policy{CelebrityThreshold: 50, InboxMax: 100}
	for run := range 2 {
		if err := CheckPolicy(ctx, db.Pool, p); err != nil {
			t.Fatalf("run %d with the recorded policy: %v", run+1, err)
		}
	}
	recs, err := LoadVersionRecords(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		recorded := r.CelebrityThreshold == 50 && r.InboxMax == 100
		if r.InboxLayout != "" {
			t.Errorf("%s: layout %q recorded, want none (there is one layout)", r.Projection, r.InboxLayout)
		}
		if want := r.Projection == ProjectionInbox || r.Projection == ProjectionFollowers; recorded != want {
			t.Errorf("%s: recorded %d/%d, want the policy recorded only for inbox and followers", r.Projection, r.CelebrityThreshold, r.InboxMax)
		}
	}
	for _, other := range []Policy{{CelebrityThreshold: 51, InboxMax: 100}, {CelebrityThreshold: 50, InboxMax: 200}} {
		err := CheckPolicy(ctx, db.Pool, other)
		if !errors.Is(err, ErrPolicyMismatch) {
			t.Fatalf("policy %+v: %v, want ErrPolicyMismatch", other, err)
		}
		t.Logf("refused: %v", err)
	}
}

// ResolvePolicy: a fresh deployment records the process's policy; a later process with nothing set adopts every recorded
// value; one with a variable set to another value is refused, the
// message naming the variable, both values and the rebuild that changes
// it; the same value set explicitly starts.
func TestResolvePolicy(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	first, err := ResolvePolicy(ctx, db.Pool, Policy{InboxMax: 300}, PolicyExplicit{InboxMax: true})
	if err != nil {
		t.Fatal(err)
	}
	if first.InboxMax != 300 || first.CelebrityThreshold != 10_000 {
		t.Fatalf("fresh deployment resolved %+v, want 300, 10000", first)
	}
	if first.InboxTrimSlack != 64 {
		t.Errorf("trim slack %d, want the default 64", first.InboxTrimSlack)
	}
	// Nothing set: the defaults (500, 10000) give way to the record.
	got, err := ResolvePolicy(ctx, db.Pool, Policy{InboxMax: 100}.WithDefaults(), PolicyExplicit{})
	if err != nil {
		t.Fatalf("unset variables: %v", err)
	}
	if got.InboxMax != 300 || got.InboxTrimSlack != 64 || got.InboxTrimBand != first.InboxTrimBand {
		t.Fatalf("unset variables resolved %+v, want the recorded 300 with its defaulted trims", got)
	}
	for _, tc := range []struct {
		p        Policy
		explicit PolicyExplicit
		want     []string
	}{
		{Policy{InboxMax: 500}, PolicyExplicit{InboxMax: true},
			[]string{"FEED_INBOX_MAX=500", "inbox bound 300", "feed rebuild inbox --inbox-max 500"}},
		{Policy{CelebrityThreshold: 7, InboxMax: 300}, PolicyExplicit{CelebrityThreshold: true},
			[]string{"FEED_CELEBRITY_THRESHOLD=7", "celebrity threshold 10000"}},
	} {
		_, err := ResolvePolicy(ctx, db.Pool, tc.p, tc.explicit)
		if !errors.Is(err, ErrPolicyMismatch) {
			t.Fatalf("%+v: %v, want ErrPolicyMismatch", tc.explicit, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("refusal %q does not say %q", err, w)
			}
		}
	}
	same := PolicyExplicit{CelebrityThreshold: true, InboxMax: true}
	if _, err := ResolvePolicy(ctx, db.Pool, Policy{CelebrityThreshold: 10_000, InboxMax: 300}, same); err != nil {
		t.Fatalf("the recorded values set explicitly: %v", err)
	}
	// A switch that records another bound is adopted by the next process
	// that does not set it.
	if err := ActivateVersion(ctx, db.Pool, ProjectionInbox, 1, 2, Policy{InboxMax: 100}); err != nil {
		t.Fatal(err)
	}
	got, err = ResolvePolicy(ctx, db.Pool, Policy{}, PolicyExplicit{})
	if err != nil {
		t.Fatal(err)
	}
	if got.InboxMax != 100 || got.InboxTrimSlack != 25 {
		t.Fatalf("after the switch resolved %+v, want 100, slack 25 (a quarter of the bound)", got)
	}
}

// TestResolvePolicyNotificationsMax: the notifications bound is recorded
// with the notifications version by the first process, adopted where
// unset, refused where set to another value (naming the rebuild that
// changes it), and a switch of the notifications version records its new
// bound, which the next process adopts.
func TestResolvePolicyNotificationsMax(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	first, err := ResolvePolicy(ctx, db.Pool, Policy{NotificationsMax: 40}, PolicyExplicit{NotificationsMax: true})
	if err != nil || first.NotificationsMax != 40 {
		t.Fatalf("fresh deployment: %+v, %v; want 40", first.NotificationsMax, err)
	}
	got, err := ResolvePolicy(ctx, db.Pool, Policy{}, PolicyExplicit{})
	if err != nil || got.NotificationsMax != 40 {
		t.Fatalf("unset: %d, %v; want the recorded 40", got.NotificationsMax, err)
	}
	_, err = ResolvePolicy(ctx, db.Pool, Policy{NotificationsMax: 120}, PolicyExplicit{NotificationsMax: true})
	if !errors.Is(err, ErrPolicyMismatch) {
		t.Fatalf("another bound set explicitly: %v, want ErrPolicyMismatch", err)
	}
	for _, w := range []string{"FEED_NOTIFICATIONS_MAX=120", "notifications bound 40", "feed rebuild notifications --notifications-max 120"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q does not say %q", err, w)
		}
	}
	// Only the notifications row holds it: an inbox switch leaves it.
	if err := ActivateVersion(ctx, db.Pool, ProjectionInbox, 1, 2, Policy{NotificationsMax: 7}); err != nil {
		t.Fatal(err)
	}
	if got, err = ResolvePolicy(ctx, db.Pool, Policy{}, PolicyExplicit{}); err != nil || got.NotificationsMax != 40 {
		t.Fatalf("after an inbox switch: %d, %v; want still 40", got.NotificationsMax, err)
	}
	if err := ActivateVersion(ctx, db.Pool, ProjectionNotifications, 1, 2, Policy{InboxMax: 500, NotificationsMax: 60}); err != nil {
		t.Fatal(err)
	}
	if got, err = ResolvePolicy(ctx, db.Pool, Policy{}, PolicyExplicit{}); err != nil || got.NotificationsMax != 60 {
		t.Fatalf("after the notifications switch: %d, %v; want 60", got.NotificationsMax, err)
	}
	recs, err := LoadVersionRecords(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if want := map[bool]int{true: 60, false: 0}[r.Projection == ProjectionNotifications]; r.NotificationsMax != want {
			t.Errorf("%s records notifications max %d, want %d", r.Projection, r.NotificationsMax, want)
		}
	}
}
