package readmodel

import (
	"context"
	"errors"
	"testing"

	"github.com/feedco/feed/internal/testenv"
)

// The first projector to start records its fan-out policy with the active
// versions; a later one with the same policy starts, one with another
// celebrity threshold, inbox bound or inbox layout is refused, saying
// which.
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
		if (r.InboxLayout == InboxLayoutZset) != (r.Projection == ProjectionInbox) {
			t.Errorf("%s: layout %q recorded, want zset for the inbox only", r.Projection, r.InboxLayout)
		}
		if want := r.Projection == ProjectionInbox || r.Projection == ProjectionFollowers; recorded != want {
			t.Errorf("%s: recorded %d/%d, want the policy recorded only for inbox and followers", r.Projection, r.CelebrityThreshold, r.InboxMax)
		}
	}
	for _, other := range []Policy{{CelebrityThreshold: 51, InboxMax: 100}, {CelebrityThreshold: 50, InboxMax: 200},
		{CelebrityThreshold: 50, InboxMax: 100, InboxLayout: InboxLayoutPacked}} {
		err := CheckPolicy(ctx, db.Pool, other)
		if !errors.Is(err, ErrPolicyMismatch) {
			t.Fatalf("policy %+v: %v, want ErrPolicyMismatch", other, err)
		}
		t.Logf("refused: %v", err)
	}
}
