package readmodel

import (
	"cmp"
	"fmt"
	"time"
)

// Policy is the feed policy every writer and reader of the inboxes and
// timelines must agree on: who is a celebrity, how many entries an inbox
// keeps and when it is trimmed, and how long an inbox outlives its
// owner's last read. It is built once (cmd/feed, from the environment) and
// handed to the projectors, the query side and `feed rebuild`, so they
// cannot disagree; zero fields take their defaults in WithDefaults, the
// only place they are defaulted.
type Policy struct {
	// CelebrityThreshold: a post is pushed iff its author had fewer
	// followers than this when it was created (FEED_CELEBRITY_THRESHOLD);
	// the followers projector keeps the celebrity set by the same rule.
	CelebrityThreshold int64
	// CelebrityBand is the hysteresis under the threshold
	// (FEED_CELEBRITY_BAND, default 0: none): an author becomes a
	// celebrity when their follower count reaches CelebrityThreshold and
	// stops being one only when it falls below CelebrityThreshold -
	// CelebrityBand. Inside the band [threshold - band, threshold) the
	// state the author's newest follow event outside it decided holds
	// (Decided, CelebrityBefore), so an author hovering at the threshold
	// no longer flips between push and pull, with a backfill of every
	// follower on each way down, on every follow. 0 <= band < threshold;
	// it belongs to the followers and inbox versions with the threshold.
	CelebrityBand int64
	// InboxMax bounds every inbox (FEED_INBOX_MAX); a cold rebuild and the
	// bulk build write at most this many posts into one.
	InboxMax int
	// InboxTrimSlack is how far below InboxMax a trim cuts: a trim keeps an
	// inbox's newest InboxMax - InboxTrimSlack real entries (what an inbox
	// guarantees its reader; readers continue below ~floor from
	// PostgreSQL). A merge (every PackedMergeAt pushes to an inbox, and
	// every backfill) trims an inbox found over InboxMax - InboxTrimSlack +
	// InboxTrimBand real entries (docs/projections.md, "The bound rule"). 0
	// trims at every merge over InboxMax, back to InboxMax. Negative means
	// 0; it must be below InboxMax. The trim policy defaults as a whole:
	// when both InboxTrimSlack and InboxTrimEvery are zero, the slack
	// takes its default (64) clamped to InboxMax/4 (so a small
	// FEED_INBOX_MAX keeps most of its bound), and a zero InboxTrimBand
	// half the slack; when InboxTrimEvery is set, InboxTrimSlack is taken
	// as it is and a zero InboxTrimBand means the slack (trims start over
	// InboxMax).
	InboxTrimSlack int
	// InboxTrimBand is how far above what a trim keeps an inbox may grow
	// before a merge trims it: trims start over InboxMax - InboxTrimSlack +
	// InboxTrimBand real entries, 1..InboxTrimSlack (0: the default, see
	// InboxTrimSlack). With the defaults (500, 64, 32) a trim keeps 436 and
	// starts over 468. The reader's guarantee (InboxMax - InboxTrimSlack)
	// does not depend on it.
	InboxTrimBand int
	// InboxTrimEvery only says that the trim fields are set explicitly
	// (InboxTrimSlack; default 16): the sorted-set inboxes that sampled
	// one push in this many for a trim are gone.
	InboxTrimEvery int
	// InactiveAfter: followers who have not read their feed for this long
	// get no pushes (FEED_INACTIVE_AFTER, default 30 days), so their inbox
	// must be gone by then.
	InactiveAfter time.Duration
	// InboxTTLMargin: every activity write and every cold rebuild sets the
	// reader's inbox to expire after InactiveAfter minus this margin, and
	// the inbox projector gives inboxes it creates or trims without a TTL
	// the same, so an inbox disappears before fan-out stops pushing to its
	// owner (default max(1h, 2×ActivityWriteInterval)).
	InboxTTLMargin time.Duration
	// ActivityWriteInterval is the least time between two user_activity
	// writes for one user from one query process (default 5 min): the
	// inbox TTL is moved at most this often, so the margin covers two of
	// them.
	ActivityWriteInterval time.Duration
	// PostHorizon (FEED_POST_CACHE_TTL, default 4 days) is how long after
	// its creation a post's keys of the posts projection live: its body,
	// counts and the viewers' day buckets of it (Horizon); a post older
	// than now - PostHorizon is read from PostgreSQL. It is a little
	// beyond the inbox horizon: an inbox keeps ~463 entries, about three
	// days at ~150 entries a day, so nearly every post a home page
	// hydrates from an inbox is inside it. Not recorded with the
	// versions: a reader with a shorter horizon than the writers only
	// reads PostgreSQL more; one with a longer horizon finds absent keys,
	// which it reads as a miss (PostgreSQL) as well.
	PostHorizon time.Duration
	// NotificationsMax bounds each user's notifications
	// (FEED_NOTIFICATIONS_MAX, default DefaultNotificationsMax). It is
	// recorded with the notifications version, as InboxMax is with the
	// inbox version (ResolvePolicy); a new bound is built blue/green
	// (`feed rebuild notifications --notifications-max N`).
	NotificationsMax int
}

// The defaults, applied by WithDefaults only.
const (
	defaultCelebrityThreshold    = 10_000
	defaultInboxMax              = 500
	defaultInboxTrimSlack        = 64
	defaultInboxTrimEvery        = 16
	defaultInactiveAfter         = 30 * 24 * time.Hour
	defaultInboxTTLMargin        = time.Hour
	defaultActivityWriteInterval = 5 * time.Minute
	defaultPostHorizon           = 4 * 24 * time.Hour
)

// DefaultPolicy returns the default policy, every derived field filled:
// Policy{}.WithDefaults().
func DefaultPolicy() Policy { return Policy{}.WithDefaults() }

// WithDefaults fills p's zero fields with the defaults (see
// InboxTrimSlack for how the trim fields default together). It is
// idempotent.
func (p Policy) WithDefaults() Policy {
	p.CelebrityThreshold = cmp.Or(p.CelebrityThreshold, defaultCelebrityThreshold)
	p.InboxMax = cmp.Or(p.InboxMax, defaultInboxMax)
	// Zero slack is a meaningful setting (exact trims), so it defaults only
	// together with the sampling: a caller that sets neither (`feed
	// project`) gets the documented policy, not slack 0, which would run
	// the trim script on nearly every sampled push.
	defaulted := p.InboxTrimSlack == 0 && p.InboxTrimEvery == 0
	if defaulted {
		p.InboxTrimSlack = min(defaultInboxTrimSlack, p.InboxMax/4)
	}
	if p.InboxTrimSlack < 0 {
		p.InboxTrimSlack = 0
	}
	if p.InboxTrimBand == 0 {
		// The defaulted policy starts trims halfway between what a trim
		// keeps and InboxMax; an explicit one (tests, exact trims) at
		// InboxMax.
		p.InboxTrimBand = p.InboxTrimSlack
		if defaulted {
			p.InboxTrimBand = max(p.InboxTrimSlack/2, min(p.InboxTrimSlack, 1))
		}
	}
	p.InboxTrimEvery = cmp.Or(p.InboxTrimEvery, defaultInboxTrimEvery)
	p.InactiveAfter = cmp.Or(p.InactiveAfter, defaultInactiveAfter)
	p.ActivityWriteInterval = cmp.Or(p.ActivityWriteInterval, defaultActivityWriteInterval)
	p.InboxTTLMargin = cmp.Or(p.InboxTTLMargin, max(defaultInboxTTLMargin, 2*p.ActivityWriteInterval))
	p.PostHorizon = cmp.Or(p.PostHorizon, defaultPostHorizon)
	p.NotificationsMax = cmp.Or(p.NotificationsMax, DefaultNotificationsMax)
	return p
}

// Validate reports the first policy that cannot work.
func (p Policy) Validate() error {
	switch {
	case p.CelebrityThreshold < 1:
		return fmt.Errorf("celebrity threshold %d: want at least 1", p.CelebrityThreshold)
	case p.CelebrityBand < 0 || p.CelebrityBand >= p.CelebrityThreshold:
		return fmt.Errorf("celebrity band %d: want 0..threshold-1 (%d); a celebrity stops being one below threshold - band", p.CelebrityBand, p.CelebrityThreshold-1)
	case p.InboxMax < 1:
		return fmt.Errorf("inbox max %d: want at least 1", p.InboxMax)
	case p.InboxTrimSlack >= p.InboxMax:
		return fmt.Errorf("inbox trim slack %d: want below inbox max %d (a trim keeps max - slack)", p.InboxTrimSlack, p.InboxMax)
	case p.InboxTrimBand < 0 || p.InboxTrimBand > p.InboxTrimSlack:
		return fmt.Errorf("inbox trim band %d: want 1..slack %d (trims start over inbox max - slack + band)", p.InboxTrimBand, p.InboxTrimSlack)
	case p.InboxTrimEvery < 1:
		return fmt.Errorf("inbox trim every %d: want at least 1", p.InboxTrimEvery)
	case p.InactiveAfter <= 0:
		return fmt.Errorf("inactive after %v: want a positive duration", p.InactiveAfter)
	case p.ActivityWriteInterval <= 0 || p.ActivityWriteInterval > 24*time.Hour:
		return fmt.Errorf("activity write interval %v: want (0, 24h]", p.ActivityWriteInterval)
	case p.InboxTTLMargin <= 0 || p.InactiveAfter-p.InboxTTLMargin < time.Second:
		return fmt.Errorf("inbox TTL margin %v: want a positive duration below inactive after %v", p.InboxTTLMargin, p.InactiveAfter)
	case p.PostHorizon < time.Second || p.PostHorizon > 365*24*time.Hour:
		return fmt.Errorf("post horizon %v: want 1s..365 days", p.PostHorizon)
	case p.NotificationsMax < 1 || p.NotificationsMax > MaxNotificationsMax:
		return fmt.Errorf("notifications max %d: want 1..%d", p.NotificationsMax, MaxNotificationsMax)
	}
	return nil
}

// Horizon is the horizon of the posts projection's keys (PostHorizon),
// judged by the clock now (nil: time.Now).
func (p Policy) Horizon(now func() time.Time) Horizon { return Horizon{H: p.PostHorizon, Now: now} }

// Notifications returns the notifications read model under keys with
// p's bound and horizon (PostHorizon), judged by the clock now (nil:
// time.Now): what the projector, the rebuild, the query side and the
// verification all read and write with.
func (p Policy) Notifications(keys Keys, now func() time.Time) Notifications {
	return NewNotifications(keys, p.NotificationsMax, 0).WithHorizon(p.Horizon(now))
}

// InboxKeep is how many real entries a trim keeps: InboxMax - slack (see
// InboxTrimSlack).
func (p Policy) InboxKeep() int { return p.InboxMax - p.InboxTrimSlack }

// InboxTrimOver is the number of real entries over which a merge trims an
// inbox: InboxMax - slack + band (see InboxTrimBand).
func (p Policy) InboxTrimOver() int { return p.InboxKeep() + p.InboxTrimBand }

// InboxTTL is how long an inbox lives after its owner's last activity
// write (and the TTL the projector gives inboxes that have none): it must
// be gone before fan-out stops pushing to the owner (InactiveAfter after
// that write), or a user coming back after InactiveAfter would be served
// an inbox that says ~built but missed every post since. Gone (or
// recreated by late pushes, without ~built), it is cold and rebuilt on
// the next read.
func (p Policy) InboxTTL() time.Duration { return p.InactiveAfter - p.InboxTTLMargin }

// IsCelebrity reports whether an author with this many followers is a
// celebrity by the count alone: at or over the threshold. With a band, an
// author under it may still be one (Decided).
func (p Policy) IsCelebrity(followers int64) bool { return followers >= p.CelebrityThreshold }

// Decided reports the state an author's follower count decides by itself:
// a celebrity at or over the threshold, not one below threshold - band
// (their posts are pushed). Inside the band ok is false: the state is the
// one the author's newest follow event outside the band decided
// (CelebrityBefore). Without a band every count decides.
func (p Policy) Decided(followers int64) (celebrity, ok bool) {
	switch {
	case followers >= p.CelebrityThreshold:
		return true, true
	case followers < p.CelebrityThreshold-p.CelebrityBand:
		return false, true
	}
	return false, false
}

// CrossedDown reports whether an Unfollowed that leaves the followee this
// many followers may have taken them out of the celebrities: the count
// fell to threshold - band - 1 (counts move by one per follow event).
// Without a band it did (the count before was the threshold); with one
// only when the author was a celebrity before the event
// (CelebrityBefore), as an author that came up into the band from below
// and went back never was. Their recent posts were never pushed, so their
// active followers get a backfill.
func (p Policy) CrossedDown(followers int64) bool {
	return followers == p.CelebrityThreshold-p.CelebrityBand-1
}
