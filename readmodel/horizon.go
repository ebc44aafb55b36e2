package readmodel

import (
	"time"

	"github.com/feedco/feed/internal/snowflake"
)

// Horizon bounds the per-post keys of the posts projection in time: a
// post's body (post:{p}), its counts (counts:{p}) and what the viewers'
// day buckets (liked:{u}:<day>, reposted:{u}:<day>) say of it live until
// the post's creation millisecond plus H, read off its Snowflake id (the
// id's high bits are that millisecond), and the query side reads a post
// older than now - H from PostgreSQL instead. Policy.PostHorizon is H
// (FEED_POST_CACHE_TTL). A write whose expiry is already past writes
// nothing, so a redelivered old event never brings a key back and a
// rebuild writes only the horizon.
//
// The zero Horizon keeps every key without expiry and writes everything
// (readers and tests that do not write the projection).
type Horizon struct {
	// H is the horizon; 0 is none.
	H time.Duration
	// Now is the clock the writes' "already past" is judged by (nil:
	// time.Now).
	Now func() time.Time
}

// dayMs is a day in milliseconds: day buckets are UTC days of the Unix
// epoch.
const dayMs = 24 * 60 * 60 * 1000

// On reports whether keys expire.
func (h Horizon) On() bool { return h.H > 0 }

func (h Horizon) nowMs() int64 {
	if h.Now != nil {
		return h.Now().UnixMilli()
	}
	return time.Now().UnixMilli()
}

// PostMs is the creation millisecond (Unix) of the post, repost or any
// Snowflake id.
func PostMs(id int64) int64 { return snowflake.Time(id).UnixMilli() }

// DayOf is the day bucket of a post: its creation day, in days since the
// Unix epoch (UTC).
func DayOf(id int64) int64 { return PostMs(id) / dayMs }

// ExpiryOf is when id's keys expire (Unix ms): its creation ms + H; 0
// without a horizon.
func (h Horizon) ExpiryOf(id int64) int64 {
	if !h.On() {
		return 0
	}
	return PostMs(id) + h.H.Milliseconds()
}

// DayExpiry is when the day bucket day expires (Unix ms): the day's end
// + H, so it outlives every post of the day; 0 without a horizon.
func (h Horizon) DayExpiry(day int64) int64 {
	if !h.On() {
		return 0
	}
	return (day+1)*dayMs + h.H.Milliseconds()
}

// past reports whether an expiry (Unix ms, 0: none) has passed: a write
// that would set it writes nothing.
func (h Horizon) past(at int64) bool { return at != 0 && at <= h.nowMs() }

// Within reports whether id is inside the horizon at now: its keys may
// be read (always, without a horizon). The query side reads a post
// outside it from PostgreSQL.
func (h Horizon) Within(id int64, now time.Time) bool {
	return !h.On() || PostMs(id)+h.H.Milliseconds() > now.UnixMilli()
}

// FirstID is the smallest Snowflake id inside the horizon at now (0
// without a horizon): the rebuild's lower bound.
func (h Horizon) FirstID(now time.Time) int64 {
	if !h.On() {
		return 0
	}
	ms := now.Add(-h.H).Sub(snowflake.Epoch).Milliseconds() + 1
	if ms <= 0 {
		return 0
	}
	return ms << 22
}
