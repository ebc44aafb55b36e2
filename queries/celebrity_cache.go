package queries

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/singleflight"

	"github.com/feedco/feed/readmodel"
)

// The in-process caches of the pull side. A celebrity's newest posts are
// read by millions of followers; caching them per process for a few seconds
// turns that hot key into a few Redis reads per second per instance. Each
// cache refresh is single-flight, so an expiry does not stampede Redis.
//
// Both caches hold what one version of their projection said (the
// celebrity set the followers version's, a timeline head the timelines
// version's): an entry keeps the version it was read at, and a read at
// another version (after a switch) ignores it, so a switch reaches the
// pull side at the reads that follow it, not a TTL later. Each flight
// reads (and, for the celebrity set, rebuilds) the keys of one version,
// fixed at its start.

// celebrityCache holds the `celebrities` set, as an immutable snapshot
// every read loads without a lock, with the authors whose downward
// crossing the inboxes have not finished backfilling (pulled until then:
// readmodel.Celebrities). A read takes the followers and inbox versions
// from its inboxView (the ones its inboxes are merged at), not from the
// keys at the time of the call.
type celebrityCache struct {
	ttl  time.Duration
	sf   singleflight.Group
	snap atomic.Pointer[celebSnapshot]
}

type celebSnapshot struct {
	members []celeb
	at      time.Time
	version int // the followers version the set was read at
	inbox   int // the inbox version whose backfills it was read against
}

// celeb is one member of the celebrity set: its id, and as the decimal
// string SMISMEMBER sends.
type celeb struct {
	id int64
	s  string
}

// celebrities returns the authors a read of iv pulls: the celebrity set
// of its followers version, and the authors that version removed from it
// whose backfill iv's inbox version has not finished.
func (f *Feed) celebrities(ctx context.Context, iv *inboxView) ([]celeb, error) {
	c := &f.celebs
	if s := c.snap.Load(); s != nil && s.version == iv.followers && s.inbox == iv.version && f.now().Sub(s.at) < c.ttl {
		f.metrics.celebHit.Inc()
		return s.members, nil
	}
	f.metrics.celebMiss.Inc()
	v, err, _ := c.sf.Do(strconv.Itoa(iv.followers)+":"+strconv.Itoa(iv.version), func() (any, error) {
		pipe := f.rdb.Pipeline()
		read := iv.celebs.QueueMembers(ctx, pipe, iv.backfilled)
		if err := readmodel.ExecReads(ctx, pipe); err != nil {
			return nil, fmt.Errorf("read celebrities: %w", err)
		}
		cs, built, pending, err := read()
		if err != nil {
			return nil, err
		}
		m := make([]celeb, len(cs), len(cs)+len(pending))
		for i, c := range cs {
			m[i] = celeb{id: c.ID, s: c.Decimal}
		}
		if !built {
			if m, err = f.rebuildCelebrities(ctx, iv, m); err != nil {
				return nil, err
			}
		}
		f.metrics.CrossingsPending.Set(float64(len(pending)))
		m = unionCelebs(m, pending)
		c.snap.Store(&celebSnapshot{members: m, at: f.now(), version: iv.followers, inbox: iv.version})
		return m, nil
	})
	if err != nil {
		return nil, err
	}
	return v.([]celeb), nil
}

// timelineHead is the newest part of one celebrity's timeline, as a source
// complete above its bound.
type timelineHead struct {
	src     source // keys newest first
	at      time.Time
	version int // the timelines version it was read at
}

// timelineCache holds timeline heads by author.
type timelineCache struct {
	ttl  time.Duration
	size int
	sf   singleflight.Group

	mu    sync.RWMutex // read-locked by every read that follows a celebrity
	heads map[int64]*timelineHead
}

// usable reports whether the cached head answers a read from cur that needs
// n entries: it must cover part of the range below cur, and either hold n
// entries there or be complete to its floor (or to the first post).
func (h *timelineHead) usable(cur key, n int) bool {
	if !h.src.bound.less(cur) {
		return false
	}
	if h.src.floor || h.src.bound == minKey {
		return true
	}
	count := 0
	for _, k := range h.src.keys {
		if k.less(cur) && h.src.bound.less(k) {
			count++
		}
	}
	return count >= n
}

// timelineHeads returns the cached heads of authors, by index, in out
// (reused when it has room), refreshing expired ones concurrently (one
// Redis read per author and TTL, whatever the number of readers).
func (f *Feed) timelineHeads(ctx context.Context, authors []int64, out []*timelineHead) ([]*timelineHead, error) {
	c := &f.timelines
	ver := f.cfg.Keys.Version(readmodel.ProjectionTimelines) // one version for every head of this read
	out = slices.Grow(out[:0], len(authors))[:len(authors)]
	var missing []int // indexes in authors
	now := f.now()
	c.mu.RLock()
	for i, a := range authors {
		if h, ok := c.heads[a]; ok && h.version == ver && now.Sub(h.at) < c.ttl {
			out[i] = h
		} else {
			missing = append(missing, i)
		}
	}
	c.mu.RUnlock()
	f.metrics.timelineHit.Add(float64(len(authors) - len(missing)))
	if len(missing) == 0 {
		return out, nil
	}
	f.metrics.timelineMiss.Add(float64(len(missing)))
	keys := readmodel.Keys{Prefix: f.cfg.Keys.Prefix, Versions: readmodel.Versions{}.With(readmodel.ProjectionTimelines, ver)}
	tl := readmodel.NewTimelines(keys, readmodel.DefaultTimelineMax)
	chans := make([]<-chan singleflight.Result, len(missing))
	for i, ai := range missing {
		a := authors[ai]
		chans[i] = c.sf.DoChan(strconv.Itoa(ver)+":"+strconv.FormatInt(a, 10), func() (any, error) {
			// Detached from one reader's cancellation: other readers wait
			// on this flight too.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			return f.fetchTimelineHead(rctx, tl, ver, a)
		})
	}
	var errs []error
	for i, ch := range chans {
		select {
		case r := <-ch:
			if r.Err != nil {
				errs = append(errs, r.Err)
				continue
			}
			out[missing[i]] = r.Val.(*timelineHead)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, errors.Join(errs...)
}

// fetchTimelineHead reads author's head from tl, the timelines of version
// ver, and caches it.
func (f *Feed) fetchTimelineHead(ctx context.Context, tl readmodel.Timelines, ver int, author int64) (*timelineHead, error) {
	c := &f.timelines
	pipe := f.rdb.Pipeline()
	rr := tl.QueueRange(ctx, pipe, author, startKey.ms, c.size)
	if err := readmodel.ExecReads(ctx, pipe); err != nil {
		return nil, fmt.Errorf("read timeline of %d: %w", author, err)
	}
	src, built, err := rangeSource(rr)
	if err != nil {
		return nil, fmt.Errorf("read timeline of %d: %w", author, err)
	}
	if !built {
		f.startRebuild(rebuildKey{rebuildTimelineKind, author})
	}
	h := &timelineHead{src: src, at: f.now(), version: ver}
	c.mu.Lock()
	if c.heads == nil {
		c.heads = make(map[int64]*timelineHead)
	}
	if len(c.heads) > 10000 {
		for a, old := range c.heads {
			if h.at.Sub(old.at) >= c.ttl || old.version != ver {
				delete(c.heads, a)
			}
		}
	}
	if old := c.heads[author]; old == nil || old.version <= ver {
		c.heads[author] = h // never replace a head of a newer version with a late flight's older one
	}
	c.mu.Unlock()
	return h, nil
}

// rebuildCelebrities rebuilds the celebrity set of iv's followers version,
// found without its ~built marker, from PostgreSQL at the threshold that
// version was built at (and its band: readmodel.LoadCelebrities, what the
// followers projector's moves of the set converge to; a sequential scan of
// users, once per loss of the set, the flight above and the marker it
// writes making it one per process at most), and returns the union of had
// (the set's members now) and the snapshot's.
func (f *Feed) rebuildCelebrities(ctx context.Context, iv *inboxView, had []celeb) ([]celeb, error) {
	ids, err := readmodel.LoadCelebrities(ctx, f.db, iv.pol)
	if err != nil {
		f.metrics.Rebuilds.WithLabelValues("celebrities", "error").Inc()
		return nil, fmt.Errorf("read celebrities from PostgreSQL: %w", err)
	}
	if !f.cfg.ReadOnly {
		if err := iv.celebs.WriteRebuilt(ctx, f.rdb, ids); err != nil {
			f.metrics.Rebuilds.WithLabelValues("celebrities", "error").Inc()
			return nil, err
		}
		f.metrics.Rebuilds.WithLabelValues("celebrities", "ok").Inc()
	}
	add := make([]readmodel.Celebrity, len(ids))
	for i, id := range ids {
		add[i] = readmodel.Celebrity{ID: id, Decimal: strconv.FormatInt(id, 10)}
	}
	return unionCelebs(had, add), nil
}

// unionCelebs appends to m the authors of add it does not hold.
func unionCelebs(m []celeb, add []readmodel.Celebrity) []celeb {
	if len(add) == 0 {
		return m
	}
	seen := make(map[int64]bool, len(m))
	for _, c := range m {
		seen[c.id] = true
	}
	for _, c := range add {
		if !seen[c.ID] {
			m = append(m, celeb{id: c.ID, s: c.Decimal})
		}
	}
	return m
}

// ids runs a query of one bigint column.
func (f *Feed) ids(ctx context.Context, sql string, args ...any) ([]int64, error) {
	rows, err := f.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}
