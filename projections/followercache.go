package projections

import (
	"context"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// The follower cache saves the push path its PostgreSQL query: an author's
// followers and muters are read once and reused for the author's next
// posts, and kept up to date by the author's follow and mute events. Why
// that stays correct (docs/projections.md, "Follower cache"):
//
//   - Follows and mutes change only with a Followed/Unfollowed or
//     Muted/Unmuted event, in the same transaction, and that event is
//     keyed by the followee (the muted account): it sits in the
//     author's partition, in commit order with the author's posts. A list
//     loaded while handling offset o holds every follow change committed
//     before the load, which includes every change whose event is at or
//     before o (CDC publishes an event only once its transaction is
//     visible, docs/cdc.md "Visibility"); any later change has its event
//     after o. The inbox projector applies each follow and mute event of
//     the author to the list as it handles it (change): a set insert or
//     removal, idempotent, so an event whose change the load already saw
//     changes nothing, and a pair's state is that of its last event
//     applied, or of the load when no event of the pair came after o. A
//     list used for a post at offset p thus has every follow change whose
//     event lies before p; a change it may show early (committed before
//     the load, its event after p) is the case of a fresh query that ran
//     after it committed, which the later event fixes either way (the
//     follow backfill or the unfollow removal).
//   - That argument needs every message between o and p to have passed
//     through this projector. Each partition's offsets are tracked
//     (observe): any offset other than the last one again (a retry) or the
//     next one (a gap: a rebalance, a message that failed to decode, a
//     redelivery from an older commit) drops the partition's lists. A
//     message without a delivery (projections.Apply, tools) never uses the
//     cache.
//   - Activity is not an event. The lists hold follower ids only; who of
//     them is active and not past the inbox TTL comes from the activity
//     index (activity.go), a lower bound of each user's last_seen_at, and
//     every follower it cannot decide (inactive, expiring, or not held) is
//     asked again from PostgreSQL on every post, with the same conditions
//     as the uncached query. A follower who came back is therefore pushed
//     to exactly as before. The PostgreSQL clock is estimated from the
//     load (its now() against ours), with a margin.
//
// Lists are bounded (FollowerCacheRows in all, longer lists are not kept),
// evicted least recently used, and dropped after followerCacheMaxAge as a
// guard against writes that bypass the event log (a hand-made fix in SQL).
type followerCache struct {
	mu      sync.Mutex
	maxRows int
	maxList int
	rows    int
	parts   map[partKey]*partFollowers
	now     func() time.Time
	loads   atomic.Int64 // lists read from PostgreSQL (tests)
}

const (
	// followerCacheMaxAge bounds how long a list is reused.
	followerCacheMaxAge = 10 * time.Minute
	// clockMargin is how far the PostgreSQL clock estimate may be off
	// before a follower near the TTL boundary is decided wrongly; such
	// followers are asked again instead.
	clockMargin = time.Minute
	// noActivity is the held last_seen_at of a user the activity index
	// does not hold.
	noActivity = math.MinInt64
)

type partKey struct {
	topic     string
	partition int32
}

type partFollowers struct {
	last  int64 // offset of the last message observed
	lists map[int64]*followerList
}

// followerList is one author's followers and muters, each in id order.
// Nothing in a list changes once it is in the cache: change replaces it
// with an updated copy, so a push may go on reading the one it got.
type followerList struct {
	ids    []int64       // every follower
	muters []int64       // every account that mutes the author: not pushed to
	skew   time.Duration // PostgreSQL's clock minus ours, at the load
	loaded time.Time
	used   time.Time
}

// rows is what the list counts against FollowerCacheRows.
func (l *followerList) rows() int { return len(l.ids) + len(l.muters) }

// targets is the followers who do not mute the author.
func (l *followerList) targets() []int64 {
	if len(l.muters) == 0 {
		return l.ids
	}
	out := make([]int64, 0, len(l.ids))
	for _, id := range l.ids {
		if _, muted := slices.BinarySearch(l.muters, id); !muted {
			out = append(out, id)
		}
	}
	return out
}

func newFollowerCache(maxRows, maxList int) *followerCache {
	if maxRows <= 0 {
		return nil
	}
	return &followerCache{maxRows: maxRows, maxList: min(maxList, maxRows), parts: map[partKey]*partFollowers{}, now: time.Now}
}

// observe records that the message d is being handled, and drops the
// partition's lists unless d is the message observed last (a retry) or the
// one right after it.
func (c *followerCache) observe(d delivery) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	pf, created := c.partLocked(d)
	if created {
		return
	}
	if d.offset != pf.last && d.offset != pf.last+1 {
		c.clearLocked(pf)
	}
	pf.last = d.offset
}

// partLocked returns the lists of d's partition, created (empty, at d's
// offset) when the partition had none; c.mu is held.
func (c *followerCache) partLocked(d delivery) (pf *partFollowers, created bool) {
	k := partKey{d.topic, d.partition}
	if pf = c.parts[k]; pf == nil {
		pf = &partFollowers{last: d.offset, lists: map[int64]*followerList{}}
		c.parts[k] = pf
		created = true
	}
	return pf, created
}

// change applies a follow (mute false) or mute (mute true) event of the
// author to the author's list, in whichever partition holds it: member
// joins (on) or leaves the followers or the muters. The list is replaced
// by an updated copy; one that grows past the length bound is dropped.
func (c *followerCache) change(author, member int64, mute, on bool) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, pf := range c.parts {
		l := pf.lists[author]
		if l == nil {
			continue
		}
		nl := *l
		if mute {
			nl.muters = withMember(l.muters, member, on)
		} else {
			nl.ids = withMember(l.ids, member, on)
		}
		if nl.rows() == l.rows() {
			continue // the list had the event's change already
		}
		c.rows += nl.rows() - l.rows()
		if nl.rows() > c.maxList {
			c.rows -= nl.rows()
			delete(pf.lists, author)
			continue
		}
		pf.lists[author] = &nl
	}
	if c.rows > c.maxRows {
		c.evictLocked(c.maxRows * 3 / 4)
	}
}

// withMember is the ascending set s with id in it (on) or not, as a new
// slice when that changes s, else s itself.
func withMember(s []int64, id int64, on bool) []int64 {
	i, found := slices.BinarySearch(s, id)
	if found == on {
		return s
	}
	out := make([]int64, 0, len(s)+1)
	out = append(out, s[:i]...)
	if on {
		out = append(out, id)
		return append(out, s[i:]...)
	}
	return append(out, s[i+1:]...)
}

func (c *followerCache) clearLocked(pf *partFollowers) {
	for _, l := range pf.lists {
		c.rows -= l.rows()
	}
	clear(pf.lists)
}

// get returns the author's list in d's partition, or nil.
func (c *followerCache) get(d delivery, author int64) *followerList {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	pf := c.parts[partKey{d.topic, d.partition}]
	if pf == nil {
		return nil
	}
	l := pf.lists[author]
	if l == nil {
		return nil
	}
	now := c.now()
	if now.Sub(l.loaded) > followerCacheMaxAge {
		c.rows -= l.rows()
		delete(pf.lists, author)
		return nil
	}
	l.used = now
	return l
}

// put keeps l as the author's list in d's partition, evicting the least
// recently used lists when over the bound.
func (c *followerCache) put(d delivery, author int64, l *followerList) {
	if c == nil || l.rows() > c.maxList {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	pf, _ := c.partLocked(d)
	if old := pf.lists[author]; old != nil {
		c.rows -= old.rows()
	}
	l.used = c.now()
	pf.lists[author] = l
	c.rows += l.rows()
	if c.rows > c.maxRows {
		c.evictLocked(c.maxRows * 3 / 4)
	}
}

// evictLocked drops the least recently used lists until at most keep rows
// remain (in bulk, so the sort is amortised over many puts).
func (c *followerCache) evictLocked(keep int) {
	type ref struct {
		pf     *partFollowers
		author int64
		l      *followerList
	}
	var all []ref
	for _, pf := range c.parts {
		for a, l := range pf.lists {
			all = append(all, ref{pf, a, l})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].l.used.Before(all[j].l.used) })
	for _, r := range all {
		if c.rows <= keep {
			return
		}
		c.rows -= r.l.rows()
		delete(r.pf.lists, r.author)
	}
}

// rowsHeld is the number of follower rows cached (for tests and metrics).
func (c *followerCache) rowsHeld() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rows
}

// delivery is a message's place in the topic: the runner puts it in the
// handler's context (withDelivery); projections.Apply has none.
type delivery struct {
	topic     string
	partition int32
	offset    int64
}

type deliveryKey struct{}

func withDelivery(ctx context.Context, d delivery) context.Context {
	return context.WithValue(ctx, deliveryKey{}, d)
}

func deliveryFrom(ctx context.Context) (delivery, bool) {
	d, ok := ctx.Value(deliveryKey{}).(delivery)
	return d, ok
}
