package projections

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/feedco/feed/readmodel"
)

// BuildFollowers writes the followers projection (docs/rebuild.md) from
// the follow events of the log below horizon: the state that applying
// every one of them through ApplyBatch, in position order, leaves, but
// computed in memory and written once per key instead of two scripts per
// event. For each follow pair only its newest event counts (the highest
// stream version: the scripts' version guard makes every older one a
// no-op in the end); for the celebrity set only each followee's newest
// event by position whose count is outside the celebrity band (ApplyBatch
// moves the set on every such event, and on no other: inside the band the
// state before holds), so a count inside the band at the horizon gives
// the state its history decided, not the count's.
//
// horizon is a pg_snapshot xmax below which every transaction has
// finished; events of later transactions are the catch-up's. The keys of
// the Keys' version must not exist yet (a rebuild sweeps them first).
//
// Memory: 24 bytes per follow event of the log while it builds, in one
// slice sized by a count first (about 54 bytes per event of peak RSS with
// the garbage collector's headroom, docs/rebuild.md), and a map entry per
// followee (its newest event's position).
func (p *Followers) BuildFollowers(ctx context.Context, pg Querier, horizon uint64, progress BuildProgress) (int64, error) {
	if progress == nil {
		progress = noProgress{}
	}
	progress.Stage("read follow events", "events", 0)
	edges, last, newest, err := p.readFollowEdges(ctx, pg, horizon, progress)
	if err != nil {
		return 0, err
	}
	n := int64(len(edges))
	edges = newestPerPair(edges)
	mutes, err := readMutes(ctx, pg, horizon)
	if err != nil {
		return n, err
	}

	progress.Stage("write followers", "pairs", int64(len(edges)))
	if err := p.writeFollowerHashes(ctx, edges, last, newest, progress); err != nil {
		return n, err
	}
	slices.SortFunc(edges, func(a, b followEdge) int {
		return cmp.Or(cmp.Compare(a.follower, b.follower), cmp.Compare(a.followee, b.followee))
	})
	progress.Stage("write following", "pairs", int64(len(edges)))
	if err := p.writeFollowing(ctx, edges, mutes, progress); err != nil {
		return n, err
	}
	if err := p.writeBlocks(ctx, pg, horizon); err != nil {
		return n, err
	}
	return n, nil
}

// blockEventsSQL is every block pair's newest stream version below the
// horizon (odd: blocked).
const blockEventsSQL = `SELECT (payload->>'blockerId')::bigint, (payload->>'blockedId')::bigint, max(stream_version)
FROM events
WHERE type IN ('user.blocked.v1', 'user.unblocked.v1') AND tx_id < $1::text::xid8
GROUP BY 1, 2`

// writeBlocks writes the block fields of following_v (readmodel.BlockField
// in the blocker's, readmodel.BlockedByField in the blocked account's) at
// each block pair's newest version below horizon, as the projector's
// events leave them (QueueApplyBlock). They sit beside the follow state
// and do not touch ~built.
func (p *Followers) writeBlocks(ctx context.Context, pg Querier, horizon uint64) error {
	rows, err := pg.Query(ctx, blockEventsSQL, strconv.FormatUint(horizon, 10))
	if err != nil {
		return fmt.Errorf("build followers: read block events: %w", err)
	}
	defer rows.Close()
	w := newPipelines(ctx, p.rdb, noProgress{})
	for rows.Next() {
		var blocker, blocked, version int64
		if err := rows.Scan(&blocker, &blocked, &version); err != nil {
			return fmt.Errorf("build followers: read block events: %w", err)
		}
		p.follows.QueueBuildFollowing(w.ctx, w.pipe, blocker, []any{readmodel.BlockField(blocked), version}, nil, false)
		p.follows.QueueBuildFollowing(w.ctx, w.pipe, blocked, []any{readmodel.BlockedByField(blocker), version}, nil, false)
		w.added(4, 0)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("build followers: read block events: %w", err)
	}
	if err := w.wait(); err != nil {
		return fmt.Errorf("build followers: write block fields: %w", err)
	}
	return nil
}

// followEdge is one follow event: the pair and vf = version<<1 | 1 for
// Followed, 0 for Unfollowed.
type followEdge struct {
	follower, followee int64
	vf                 int64
}

func (e followEdge) version() int64 { return e.vf >> 1 }
func (e followEdge) follows() bool  { return e.vf&1 == 1 }

// lastEvent is a followee's newest follow event by position whose count
// lies outside the celebrity band: that count decides celebrity
// membership (Policy.Decided).
type lastEvent struct{ position, after int64 }

const followEdgesSQL = `SELECT position, stream_version, type = 'user.followed.v1',
       (payload->>'followerId')::bigint, (payload->>'followeeId')::bigint,
       coalesce((payload->>'followeeFollowers')::bigint, 0)
FROM events
WHERE type IN ('user.followed.v1', 'user.unfollowed.v1') AND tx_id < $1::text::xid8`

// followEventCountSQL counts the follow events of the whole log (a
// parallel sequential scan where they are most of it: 0.9 s for 6.2M
// events): at least the number below any horizon taken before it ran.
const followEventCountSQL = `SELECT count(*) FROM events WHERE type IN ('user.followed.v1', 'user.unfollowed.v1')`

// muteEventsSQL is every mute-pair event below the horizon: few beside
// the follows, so they are kept in a map.
const muteEventsSQL = `SELECT stream_version, (payload->>'muterId')::bigint, (payload->>'mutedId')::bigint
FROM events
WHERE type IN ('user.muted.v1', 'user.unmuted.v1') AND tx_id < $1::text::xid8`

// readMutes returns, per muter, each mute pair's newest stream version
// below horizon (odd: muted).
func readMutes(ctx context.Context, pg Querier, horizon uint64) (map[int64]map[int64]int64, error) {
	rows, err := pg.Query(ctx, muteEventsSQL, strconv.FormatUint(horizon, 10))
	if err != nil {
		return nil, fmt.Errorf("build followers: read mute events: %w", err)
	}
	defer rows.Close()
	out := map[int64]map[int64]int64{}
	for rows.Next() {
		var version, muter, muted int64
		if err := rows.Scan(&version, &muter, &muted); err != nil {
			return nil, fmt.Errorf("build followers: read mute events: %w", err)
		}
		m := out[muter]
		if m == nil {
			m = map[int64]int64{}
			out[muter] = m
		}
		m[muted] = max(m[muted], version)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("build followers: read mute events: %w", err)
	}
	return out, nil
}

// readFollowEdges reads every follow event below horizon in one streamed
// query, in no particular order, into a slice sized by a count first
// (and, per followee, the position of its newest follow event: what its
// followers hash has applied, readmodel.Follows):
// grown by appends instead, it held about four times its contents at its
// peak (the arrays it outgrew, and the garbage collector's headroom over
// them).
func (p *Followers) readFollowEdges(ctx context.Context, pg Querier, horizon uint64, progress BuildProgress) ([]followEdge, map[int64]lastEvent, map[int64]int64, error) {
	var count int64
	if err := pg.QueryRow(ctx, followEventCountSQL).Scan(&count); err != nil {
		return nil, nil, nil, fmt.Errorf("build followers: count follow events: %w", err)
	}
	rows, err := pg.Query(ctx, followEdgesSQL, strconv.FormatUint(horizon, 10))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("build followers: read follow events: %w", err)
	}
	defer rows.Close()
	edges := make([]followEdge, 0, count)
	last := map[int64]lastEvent{}
	newest := map[int64]int64{}
	const tick = 50_000
	for rows.Next() {
		var pos, version, after int64
		var follow bool
		var e followEdge
		if err := rows.Scan(&pos, &version, &follow, &e.follower, &e.followee, &after); err != nil {
			return nil, nil, nil, fmt.Errorf("build followers: read follow events: %w", err)
		}
		if version < 1 || version > 1<<61 {
			return nil, nil, nil, fmt.Errorf("build followers: follow event at %d with stream version %d: %w", pos, version, ErrPermanent)
		}
		newest[e.followee] = max(newest[e.followee], pos)
		e.vf = version << 1
		if follow {
			e.vf |= 1
		}
		edges = append(edges, e)
		if _, decides := p.pol.Decided(after); decides {
			if l, ok := last[e.followee]; !ok || pos > l.position {
				last[e.followee] = lastEvent{pos, after}
			}
		}
		if len(edges)%tick == 0 {
			progress.Add(tick)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, nil, fmt.Errorf("build followers: read follow events: %w", err)
	}
	progress.Add(len(edges) % tick)
	return edges, last, newest, nil
}

// newestPerPair sorts edges by (followee, follower) and keeps each pair's
// newest event.
func newestPerPair(edges []followEdge) []followEdge {
	slices.SortFunc(edges, func(a, b followEdge) int {
		return cmp.Or(cmp.Compare(a.followee, b.followee), cmp.Compare(a.follower, b.follower), cmp.Compare(b.vf, a.vf))
	})
	return slices.CompactFunc(edges, func(a, b followEdge) bool {
		return a.followee == b.followee && a.follower == b.follower
	})
}

// eachRun calls fn with each run of consecutive edges that share key.
func eachRun(edges []followEdge, key func(followEdge) int64, fn func(id int64, run []followEdge)) {
	for i := 0; i < len(edges); {
		id := key(edges[i])
		j := i + 1
		for j < len(edges) && key(edges[j]) == id {
			j++
		}
		fn(id, edges[i:j])
		i = j
	}
}

// followerChunk is the number of fields per HSET or members per SADD, and
// about the number per write pipeline; followerWriters pipelines are in
// flight at once. A variable for the tests (export_test.go).
var followerChunk = 1024

const followerWriters = 4

// pipelines runs fill's commands in pipelines of about followerChunk*8
// arguments, followerWriters at a time, loading the scripts never (plain
// commands only).
type pipelines struct {
	ctx      context.Context
	rdb      redis.UniversalClient
	g        *errgroup.Group
	pipe     redis.Pipeliner
	args     int
	progress BuildProgress
	pairs    int
}

func newPipelines(ctx context.Context, rdb redis.UniversalClient, progress BuildProgress) *pipelines {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(followerWriters)
	return &pipelines{ctx: gctx, rdb: rdb, g: g, pipe: rdb.Pipeline(), progress: progress}
}

// added counts args queued and pairs written, and sends the pipeline when
// it is full.
func (w *pipelines) added(args, pairs int) {
	w.args += args
	w.pairs += pairs
	if w.args >= followerChunk*8 {
		w.flush()
	}
}

func (w *pipelines) flush() {
	if w.args == 0 && w.pipe.Len() == 0 {
		return
	}
	pipe, pairs := w.pipe, w.pairs
	w.pipe, w.args, w.pairs = w.rdb.Pipeline(), 0, 0
	w.g.Go(func() error {
		if _, err := pipe.Exec(w.ctx); err != nil {
			return err
		}
		w.progress.Add(pairs)
		return nil
	})
}

func (w *pipelines) wait() error {
	w.flush()
	return w.g.Wait()
}

// writeFollowerHashes writes followers:{a} (the count of current
// followers and the position of a's newest follow event below the
// horizon) and the celebrity set, from edges sorted by followee.
func (p *Followers) writeFollowerHashes(ctx context.Context, edges []followEdge, last map[int64]lastEvent, newest map[int64]int64, progress BuildProgress) error {
	w := newPipelines(ctx, p.rdb, progress)
	eachRun(edges, func(e followEdge) int64 { return e.followee }, func(a int64, run []followEdge) {
		var count int64
		for _, e := range run {
			if e.follows() {
				count++
			}
		}
		p.follows.QueueBuildFollowers(w.ctx, w.pipe, a, count, newest[a])
		w.added(6, len(run))
	})
	var celebs []any
	for a, l := range last {
		if celeb, _ := p.pol.Decided(l.after); celeb {
			celebs = append(celebs, a)
		}
	}
	for len(celebs) > 0 {
		c := celebs[:min(len(celebs), followerChunk)]
		celebs = celebs[len(c):]
		p.celebs.QueueAdd(w.ctx, w.pipe, c)
		w.added(len(c), 0)
	}
	p.celebs.QueueBuilt(w.ctx, w.pipe)
	if err := w.wait(); err != nil {
		return fmt.Errorf("build followers: write follower counts: %w", err)
	}
	return nil
}

// writeFollowing writes following:{u} (the accounts u follows and does
// not mute now) and following_v:{u} (u's newest version of every follow
// pair the set does not imply, readmodel.ImpliedFollowVersion, and, under
// readmodel.MuteField, of every mute pair), from edges sorted by follower
// and mutes per muter.
func (p *Followers) writeFollowing(ctx context.Context, edges []followEdge, mutes map[int64]map[int64]int64, progress BuildProgress) error {
	w := newPipelines(ctx, p.rdb, progress)
	eachRun(edges, func(e followEdge) int64 { return e.follower }, func(u int64, run []followEdge) {
		muted := mutes[u]
		delete(mutes, u)
		for len(run) > 0 {
			chunk := run[:min(len(run), followerChunk)]
			run = run[len(chunk):]
			var vers, members []any
			for _, e := range chunk {
				member := e.follows() && muted[e.followee]%2 == 0
				if member {
					members = append(members, e.followee)
				}
				if !readmodel.ImpliedFollowVersion(e.version(), member) {
					vers = append(vers, e.followee, e.version())
				}
			}
			last := len(run) == 0
			if last {
				vers = appendMuteFields(vers, muted)
			}
			p.follows.QueueBuildFollowing(w.ctx, w.pipe, u, vers, members, last)
			w.added(len(vers)+len(members), len(chunk))
		}
	})
	// Muters without a follow event: their state is their mutes alone.
	for u, muted := range mutes {
		vers := appendMuteFields(nil, muted)
		p.follows.QueueBuildFollowing(w.ctx, w.pipe, u, vers, nil, true)
		w.added(len(vers), 0)
	}
	if err := w.wait(); err != nil {
		return fmt.Errorf("build followers: write following sets: %w", err)
	}
	return nil
}

// appendMuteFields appends the mute-pair versions of one muter as
// following_v fields.
func appendMuteFields(vers []any, muted map[int64]int64) []any {
	for a, v := range muted {
		vers = append(vers, readmodel.MuteField(a), v)
	}
	return vers
}
