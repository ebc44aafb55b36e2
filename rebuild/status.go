package rebuild

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
)

// ProjectionStatus is one projection as `feed status` shows it.
type ProjectionStatus struct {
	Name string
	// Version is the active version, from PostgreSQL (projection_versions).
	Version int
	// Cached is the version the Redis registry holds (0: none): readers
	// restore it from Version when they differ.
	Cached int
	// CelebrityThreshold and InboxMax are the fan-out policy the version
	// was built with (0: not recorded).
	CelebrityThreshold int64
	InboxMax           int
	// CelebrityBand is the celebrity band the version was built with (0
	// also when not recorded).
	CelebrityBand int64
	// InboxLayout is the inbox layout the version was built in ("": not
	// recorded).
	InboxLayout string
	// Group is the active version's consumer group and Lag its messages
	// not committed yet (-1 when Kafka could not be asked).
	Group string
	Lag   int64
	// Dirty: keys of another version may exist (a rebuild is running, or
	// one was interrupted and the next run cleans up).
	Dirty bool
}

// Status is the state of the projections and of rebuilds.
type Status struct {
	Projections []ProjectionStatus
	// Running: a rebuild holds the lock now; Info is what it says about
	// itself (projection, version, phase, started, updated).
	Running bool
	Info    map[string]string
}

// ReadStatus reads the active versions from PostgreSQL, the Redis registry, the lock and the consumer lag of every
// active group. A Kafka failure leaves the lags at -1 and is returned with
// the rest of the status.
func ReadStatus(ctx context.Context, pool *pgxpool.Pool, rdb redis.UniversalClient, rc projections.RunnerConfig, prefix string) (Status, error) {
	var st Status
	reg := readmodel.NewRegistry(prefix)
	recs, err := readmodel.LoadVersionRecords(ctx, pool)
	if err != nil {
		return st, err
	}
	cached, err := reg.Cached(ctx, rdb)
	if err != nil {
		return st, err
	}
	dirtyAll, err := reg.DirtyAll(ctx, rdb)
	if err != nil {
		return st, err
	}
	var groups []string
	for _, rec := range recs {
		n := rec.Projection
		g := rc.GroupPrefix + projections.GroupFor(n, rec.Version)
		st.Projections = append(st.Projections, ProjectionStatus{Name: n, Version: rec.Version, Cached: cached.Get(n),
			CelebrityThreshold: rec.CelebrityThreshold, CelebrityBand: rec.CelebrityBand, InboxMax: rec.InboxMax, InboxLayout: rec.InboxLayout, Group: g, Lag: -1, Dirty: dirtyAll[n]})
		groups = append(groups, g)
	}
	if st.Running, err = Locked(ctx, pool, prefix); err != nil {
		return st, err
	}
	if st.Running {
		st.Info, _ = reg.RebuildInfo(ctx, rdb)
	}
	lags, lerr := projections.ConsumerLag(ctx, rc.Conn(), rc.Topic, groups)
	if lerr == nil {
		for i := range st.Projections {
			st.Projections[i].Lag = lags[st.Projections[i].Group]
		}
	}
	return st, lerr
}
