package bench

import (
	"fmt"
	"io"

	dto "github.com/prometheus/client_model/go"
)

// followerListsName is the inbox projector's count of the follower lists
// its pushes used, by source (docs/projections.md, Follower cache).
const followerListsName = "feed_projection_follower_lists_total"

// listCount is that counter by source so far; nil when the API's
// /metrics has none (a process without the inbox projector).
type listCount map[string]float64

func listCountOf(families map[string]*dto.MetricFamily) listCount {
	return byLabel(families, followerListsName, "source")
}

// FollowerLists is where the inbox projector's pushes of the mixed phase
// found their follower lists: its follower cache, PostgreSQL (read and
// cached), or PostgreSQL page by page (uncached: the cache off, or a list
// over its bound). A post's push reads at most one list.
type FollowerLists struct {
	Cache    float64 `json:"cache"`
	Database float64 `json:"database"`
	Uncached float64 `json:"uncached"`
	// FromPostgres is (Database+Uncached) over all three (0: no pushes).
	FromPostgres float64 `json:"fromPostgresShare"`
}

// since is the lists used from b to c; nil when either end is unknown.
func (c listCount) since(b listCount) *FollowerLists {
	if c == nil || b == nil {
		return nil
	}
	f := &FollowerLists{Cache: c["cache"] - b["cache"], Database: c["database"] - b["database"], Uncached: c["uncached"] - b["uncached"]}
	if all := f.Cache + f.Database + f.Uncached; all > 0 {
		f.FromPostgres = (f.Database + f.Uncached) / all
	}
	return f
}

// writeFollowerLists prints where the phase's pushes found their lists.
func writeFollowerLists(w io.Writer, f *FollowerLists) {
	if f == nil {
		return
	}
	fmt.Fprintf(w, "follower lists of the pushes (inbox projector): %.0f from its cache, %.0f read from PostgreSQL, %.0f paged uncached: %.1f%% from PostgreSQL\n",
		f.Cache, f.Database, f.Uncached, 100*f.FromPostgres)
}
