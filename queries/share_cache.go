package queries

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
)

// sharesThrough answers a's Redis questions (redisShares) through the
// read cache (read_cache.go), so that a page whose shares have not
// changed since the last read costs no round trip for them, as its
// entries cost none. What it keeps, each under its Redis key and dropped
// by that key's invalidation like the home read's entries:
//
//   - the viewer's relations: following_v:{viewer} read whole by one
//     HSCAN step (readmodel.RelationsOf), which answers every account;
//     a hash too large for one step is asked per page (HMGET), not kept;
//   - follows the page did not answer: following:{viewer}'s membership,
//     read whole by one SSCAN step when compact (as the home read), else
//     per member;
//   - counts:{p}, per post, whoever reads it;
//   - the viewer's day buckets liked:{u}:<day> and reposted:{u}:<day>,
//     each read whole by one SSCAN step (a person likes a few dozen posts
//     a day), else per member;
//   - the first page of reposts:{O} below a repost entry.
//
// Names the process does not hold yet (nameCache) are read in the same
// round trip. The misses go out in one pipeline per node, through that
// node's tracking connections (on one server, one pipeline; on a cluster
// the viewer's keys share the page's node and counts:{p} and
// reposts:{O} are on their posts' nodes), the pipelines at once. It
// reports false when a key's node has no generation or a trip failed
// (the generation then ends): the caller asks Redis directly.
//
// The barrier (Config.ReadCacheBarrier) the page's segment read passed is
// the viewer's node's: the viewer's own relations and buckets are as
// fresh as their inbox. Counts and earlier reposts are the projectors'
// writes, which no API response promises to reflect at once.
func (f *Feed) sharesThrough(ctx context.Context, g *cacheGen, a *shareAsk) (bool, error) {
	c := f.cache
	now := time.Now().UnixNano()
	var t tally
	var trips []*shareTrip
	trip := func(gk *cacheGen) *shareTrip {
		for _, tr := range trips {
			if tr.g == gk {
				return tr
			}
		}
		tr := &shareTrip{g: gk, pipe: gk.client.Pipeline()}
		trips = append(trips, tr)
		return tr
	}
	// tripOf is the trip of a key outside the viewer's hash tag.
	tripOf := func(k string) *shareTrip {
		if c.single != nil {
			return trip(g)
		}
		gk := c.currentFor(k)
		if gk == nil {
			return nil
		}
		return trip(gk)
	}

	// The viewer's relations to the accounts.
	if len(a.accounts) > 0 {
		kV := f.follows.VersionsKey(a.viewer)
		v, hit := c.lookupTally(kV, relSig, now, &t)
		if w, ok := v.(relsWhole); ok {
			for _, x := range a.accounts {
				a.rel.set(x, w[x])
			}
		} else {
			tr := trip(g)
			rels := f.follows.QueueRelations(ctx, tr.pipe, a.viewer, a.accounts)
			var scan *redis.ScanCmd
			var tk ticket
			if !hit { // not known to be large: read it whole for the next reads
				tk = c.begin(g, kV)
				scan = f.follows.QueueRelationsScan(ctx, tr.pipe, a.viewer)
			}
			tr.done = append(tr.done, func(now int64) error {
				rs, err := rels.All()
				if err != nil {
					return fmt.Errorf("read relations of %d: %w", a.viewer, err)
				}
				for j, r := range rs {
					a.rel.set(a.accounts[j], r)
				}
				if scan != nil {
					m, whole, err := readmodel.RelationsOf(scan)
					if err != nil {
						return fmt.Errorf("read relations of %d: %w", a.viewer, err)
					}
					if whole {
						c.store(tk, kV, relSig, relsWhole(m), now)
					} else {
						c.store(tk, kV, relSig, relsLarge{}, now)
					}
				}
				return nil
			})
		}
	}

	// Follows the page did not answer.
	var followIs []bool
	if len(a.follows) > 0 {
		var kb [96]byte
		b, endF := f.follows.AppendFollowingKeys(kb[:0], a.viewer)
		kF := string(b[:endF])
		followIs = make([]bool, len(a.follows))
		viewer := a.viewer
		c.askMembers(ctx, trip, g, kF, a.follows, followIs, now, &t, func(p redis.Pipeliner) *redis.ScanCmd {
			return f.follows.QueueFollowingScan(ctx, p, viewer)
		})
	}

	// Counts and the viewer's state; those of posts older than the
	// horizon are PostgreSQL's (pgOld).
	hz, nowT := f.horizon(), f.now()
	recent, old := byHorizon(hz, nowT, a.posts)
	var kb [96]byte
	for _, p := range recent {
		b := f.engagement.AppendCountsKey(kb[:0], p)
		if cnt, ok := c.lookupCounts(b, p, now, &t); ok {
			a.counts.set(p, cnt)
			continue
		}
		k := string(b)
		tr := tripOf(k)
		if tr == nil {
			return false, nil
		}
		tr.counts = append(tr.counts, p)
		tr.countKeys = append(tr.countKeys, k)
		tr.countTickets = append(tr.countTickets, c.begin(tr.g, k))
	}
	var days []dayState
	if a.viewer != 0 {
		for _, p := range recent {
			d := readmodel.DayOf(p)
			j := slices.IndexFunc(days, func(s dayState) bool { return s.day == d })
			if j < 0 {
				j = len(days)
				days = append(days, dayState{day: d})
			}
			days[j].posts = append(days[j].posts, p)
		}
		for j := range days {
			ds := &days[j]
			ds.liked, ds.reposted = make([]bool, len(ds.posts)), make([]bool, len(ds.posts))
			kL, kR := f.engagement.StateKeys(a.viewer, ds.day)
			for _, q := range []struct {
				k  string
				is []bool
			}{{kL, ds.liked}, {kR, ds.reposted}} {
				c.askMembers(ctx, trip, g, q.k, ds.posts, q.is, now, &t, func(p redis.Pipeliner) *redis.ScanCmd {
					return f.engagement.QueueStateScan(ctx, p, q.k)
				})
			}
		}
	}

	// Names the process does not hold.
	for _, u := range a.names {
		tr := tripOf(f.userNames.Key(u))
		if tr == nil {
			return false, nil
		}
		tr.names = append(tr.names, u)
	}

	// The first page of each repost's earlier reposts; a repost entry
	// older than the horizon may have outlived its original's set (it
	// expires with the newest repost): PostgreSQL's.
	var incOrigs, incReposts []int64
	for j, r := range a.reposts {
		o := a.origs[j]
		if !hz.Within(r, nowT) {
			incOrigs, incReposts = append(incOrigs, o), append(incReposts, r)
			continue
		}
		k, sig := f.engagement.RepostsKey(o), repostsSig(r)
		if v, ok := c.lookupTally(k, sig, now, &t); ok {
			pv := v.(repostsVal)
			if pv.incomplete {
				incOrigs, incReposts = append(incOrigs, o), append(incReposts, r)
			} else {
				a.earlier[r], a.more[r] = pv.earlier, pv.more
			}
			continue
		}
		tr := tripOf(k)
		if tr == nil {
			return false, nil
		}
		tk := c.begin(tr.g, k)
		page := f.engagement.QueueRepostsPage(ctx, tr.pipe, o, r, readmodel.Repost{}, repostsPageSize)
		tr.done = append(tr.done, func(now int64) error {
			got, more, err := page.Result()
			if err != nil {
				return fmt.Errorf("read the reposts of %d: %w", o, err)
			}
			pv := repostsVal{earlier: slices.Clip(toRepostsOf(got)), more: more, incomplete: page.Incomplete()}
			c.store(tk, k, sig, pv, now)
			if pv.incomplete {
				incOrigs, incReposts = append(incOrigs, o), append(incReposts, r)
			} else {
				a.earlier[r], a.more[r] = pv.earlier, pv.more
			}
			return nil
		})
	}
	c.count(t)

	for _, tr := range trips {
		tr.queueCountsAndNames(ctx, f, a)
	}
	if len(trips) > 0 {
		errs := make([]error, len(trips))
		var wg sync.WaitGroup
		for i := 1; i < len(trips); i++ {
			wg.Go(func() { errs[i] = trips[i].g.pick().do(trips[i].pipe.Cmds()) })
		}
		errs[0] = trips[0].g.pick().do(trips[0].pipe.Cmds())
		wg.Wait()
		c.stats.trips.Add(int64(len(trips)))
		for i, tr := range trips {
			if errs[i] != nil {
				// The connection may be gone, and with it what Redis
				// tracked for it (as readHomeCached).
				tr.g.t.endGen(tr.g)
				return false, nil
			}
		}
		now = time.Now().UnixNano()
		for _, tr := range trips {
			for _, d := range tr.done {
				if err := d(now); err != nil {
					return true, err
				}
			}
		}
	}
	for i, x := range a.follows {
		a.follow[x] = followIs[i]
	}
	for _, ds := range days {
		for i, p := range ds.posts {
			a.state.set(p, ViewerState{Liked: ds.liked[i], Reposted: ds.reposted[i]})
		}
	}
	return true, f.pgOld(ctx, a, old, incOrigs, incReposts)
}

// Signatures of what sharesThrough keeps (see readCache.store).
const (
	relSig = "r" // following_v:{u}: relsWhole or relsLarge
)

// repostsSig is the signature of reposts:{O}'s first page below repost r.
func repostsSig(r int64) string { return "p" + strconv.FormatInt(r, 10) }

// relsWhole is a viewer's every relation (readmodel.RelationsOf of the
// whole following_v:{u}): an account it does not name has none.
type relsWhole map[int64]readmodel.Relation

// relsLarge marks a following_v:{u} one HSCAN step did not return whole:
// its relations are asked per page.
type relsLarge struct{}

// repostsVal is a kept first page of an original's earlier reposts (the
// slice shared by every reader: never modified).
type repostsVal struct {
	earlier          []homefeed.Repost
	more, incomplete bool
}

// dayState is a page's posts of one creation day and the viewer's state
// of each.
type dayState struct {
	day             int64
	posts           []int64
	liked, reposted []bool
}

// shareTrip is what sharesThrough asks one node: one pipeline through its
// generation g, and how each reply is read (done, after the trip).
type shareTrip struct {
	g    *cacheGen
	pipe redis.Pipeliner
	done []func(now int64) error

	counts       []int64 // posts whose counts are asked, their keys and tickets
	countKeys    []string
	countTickets []ticket
	names        []int64
}

// queueCountsAndNames queues tr's counts and names, each read by one
// command, with how their replies are read.
func (tr *shareTrip) queueCountsAndNames(ctx context.Context, f *Feed, a *shareAsk) {
	if len(tr.counts) > 0 {
		reads := f.engagement.QueueCounts(ctx, tr.pipe, tr.counts)
		tr.done = append(tr.done, func(now int64) error {
			for j, p := range tr.counts {
				rc, err := reads.At(j)
				if err != nil {
					return fmt.Errorf("read counts: %w", err)
				}
				cnt := Counts{Likes: rc.Likes, Reposts: rc.Reposts, Replies: rc.Replies}
				a.counts.set(p, cnt)
				f.cache.storeCounts(tr.countTickets[j], tr.countKeys[j], p, cnt, now)
			}
			return nil
		})
	}
	if len(tr.names) > 0 {
		reads := f.userNames.QueueNames(ctx, tr.pipe, tr.names)
		tr.done = append(tr.done, func(int64) error { return f.namesInto(a, reads, tr.names) })
	}
}

// askMembers answers whether each of members is in set k (is): what the
// cache holds costs nothing; the rest is asked in the trip of g (the
// set's node), SMISMEMBER of the members not held, with the set read
// whole by one step of scan unless it is known to be too large, so that
// the next reads are answered whatever they ask. The answers are in is
// once the trip's done functions ran.
func (c *readCache) askMembers(ctx context.Context, trip func(*cacheGen) *shareTrip, g *cacheGen, k string, members []int64, is []bool, now int64, t *tally, scan func(redis.Pipeliner) *redis.ScanCmd) {
	ask, set, large := c.lookupMembers(k, members, len(members), is, now, t)
	if set != nil || len(ask) == 0 {
		return
	}
	tr := trip(g)
	tk := c.begin(g, k)
	var whole *redis.ScanCmd
	if !large {
		whole = scan(tr.pipe)
	}
	args := make([]any, len(ask))
	for j, i := range ask {
		args[j] = strconv.FormatInt(members[i], 10)
	}
	cmd := tr.pipe.SMIsMember(ctx, k, args...)
	tr.done = append(tr.done, func(now int64) error {
		got, err := cmd.Result()
		if err != nil || len(got) != len(ask) {
			return fmt.Errorf("read the members of %s: %v (%d answers for %d)", k, err, len(got), len(ask))
		}
		for j, i := range ask {
			is[i] = got[j]
		}
		if whole != nil {
			v, err := memberSetOf(whole)
			if err != nil {
				return fmt.Errorf("read the members of %s: %w", k, err)
			}
			c.store(tk, k, wholeSig, v, now)
			if _, ok := v.(memberSet); ok {
				return nil // the whole set answers the next reads
			}
		}
		c.storeMembers(tk, k, members, ask, got, now)
		return nil
	})
}
