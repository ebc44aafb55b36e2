package homefeed

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// An inbox version that an earlier release recorded in the sorted-set
// layout is refused, the message saying to run `feed rebuild inbox`; a
// fresh deployment's and a switched version's records are not (a switch
// records this layout).
func TestCheckVersionsRefusesSortedSetInboxes(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	if err := CheckVersions(ctx, db.Pool); err != nil {
		t.Fatalf("fresh deployment: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE projection_versions SET inbox_layout = 'zset' WHERE projection = 'inbox'`); err != nil {
		t.Fatal(err)
	}
	err := CheckVersions(ctx, db.Pool)
	if !errors.Is(err, ErrRemovedLayout) || !strings.Contains(err.Error(), "run `feed rebuild inbox`") {
		t.Fatalf("sorted-set inbox version: %v, want ErrRemovedLayout saying to run `feed rebuild inbox`", err)
	}
	if err := readmodel.ActivateVersion(ctx, db.Pool, readmodel.ProjectionInbox, 1, 2, readmodel.Policy{}); err != nil {
		t.Fatal(err)
	}
	if err := CheckVersions(ctx, db.Pool); err != nil {
		t.Fatalf("after the rebuild's switch: %v", err)
	}
	recs, err := readmodel.LoadVersionRecords(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Projection == readmodel.ProjectionInbox && r.InboxLayout != Layout {
			t.Fatalf("switched inbox version records layout %q, want %q", r.InboxLayout, Layout)
		}
	}
}
