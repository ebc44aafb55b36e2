// Package projections turns the event stream (Kafka, one message per event,
// see docs/architecture.md) into the Redis read models the query side serves:
// inboxes, author timelines, follower counts and the celebrity set, and the
// post cache. Each read model has its own projector in its own consumer
// group, so one can lag, fail or be rebuilt without the others.
//
// Every projector is idempotent under at-least-once delivery: applying a
// message twice, or messages of different partitions in another order, leaves
// the same Redis state (docs/projections.md has the argument per read model
// and the one documented exception: chunked inbox trims).
package projections

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/readmodel"
)

// Consumer groups, one per projector.
// WARNING: a consumer group name is where Kafka keeps the projector's
// committed offsets. Renaming one makes that projector start again from the
// oldest offset and replay the whole topic; bump the version suffix only on
// purpose (a rebuild), never by accident.
const (
	GroupInbox     = "feed.projection.inbox.v1"
	GroupTimelines = "feed.projection.timelines.v1"
	GroupFollowers = "feed.projection.followers.v1"
	GroupPosts     = "feed.projection.posts.v1"
)

// GroupFor is the consumer group of projector name at a projection version:
// version 1 is the historical name above (GroupInbox, ...); a rebuild to
// version n gets a new group, ".v{n}", whose offsets it seeds itself (see
// docs/rebuild.md). WARNING: the same as on GroupInbox.
func GroupFor(name string, version int) string {
	return "feed.projection." + name + ".v" + strconv.Itoa(max(version, 1))
}

// Names of the projectors, as `feed project --only` accepts them.
const (
	NameInbox     = "inbox"
	NameTimelines = "timelines"
	NameFollowers = "followers"
	NamePosts     = "posts"
)

// Names lists every projector name in start order.
func Names() []string { return []string{NamePosts, NameFollowers, NameTimelines, NameInbox} }

// ErrPermanent marks an error that no retry can fix (a message that cannot
// be decoded); such messages go to the poison topic at once.
var ErrPermanent = errors.New("permanent failure")

// Projector applies decoded events to one read model. Apply must be
// idempotent: it is called at least once per message, per partition in
// order, with partitions in parallel.
type Projector interface {
	// Name is the projector's short name ("inbox").
	Name() string
	// Group is its consumer group (see the WARNING on GroupInbox).
	Group() string
	// Apply projects one event. Events it does not care about are no-ops.
	Apply(ctx context.Context, env events.Envelope, ev events.Event) error
}

// Querier is the part of a PostgreSQL pool the projectors read the source
// of truth with (follows, user_activity, posts); *pgxpool.Pool implements it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Config holds the policies the projectors share. Zero fields take the
// defaults of DefaultConfig.
type Config struct {
	// Keys names the Redis keys (a prefix in tests and rebuilds).
	Keys readmodel.Keys
	// CelebrityThreshold: a post is pushed iff its author had fewer
	// followers than this when it was created (FEED_CELEBRITY_THRESHOLD).
	CelebrityThreshold int64
	// InboxMax bounds every inbox (FEED_INBOX_MAX).
	InboxMax int
	// InboxTrimSlack is how far below InboxMax a trim cuts: a trim keeps an
	// inbox's newest InboxMax - InboxTrimSlack real entries (what an inbox
	// guarantees its reader; readers continue below ~floor from
	// PostgreSQL). A sampled push trims an inbox found over InboxMax -
	// InboxTrimSlack + InboxTrimBand (real entries; both sentinels
	// assumed), so no inbox is kept over that by more than the sampling
	// overshoot, and every listpack ZADD, which scans the whole inbox,
	// scans fewer entries than the naive ZADD + ZREMRANGEBYRANK pair's 500
	// (docs/projections.md, "The bound rule"). Follow backfills and the
	// exact path (InboxTrimEvery 1) follow the same rule. 0 trims on every
	// push over InboxMax, back to InboxMax (slower, but byte-for-byte order
	// independent with InboxTrimEvery 1; see docs/projections.md).
	// Negative means 0; it must be below InboxMax. The trim policy
	// defaults as a whole: when both InboxTrimSlack and InboxTrimEvery are
	// zero, they take DefaultConfig's values (64, 16), the slack clamped
	// to InboxMax/4 (so a small FEED_INBOX_MAX keeps most of its bound),
	// and a zero InboxTrimBand half the slack; when InboxTrimEvery is set,
	// InboxTrimSlack is taken as it is and a zero InboxTrimBand means the
	// slack (trims start over InboxMax, the rule before 2026-11-30 17:00).
	InboxTrimSlack int
	// InboxTrimBand is how far above what a trim keeps an inbox may grow
	// before a sampled push trims it: trims start over InboxMax -
	// InboxTrimSlack + InboxTrimBand real entries, 1..InboxTrimSlack (0:
	// the default, see InboxTrimSlack). With the defaults (500, 64, 32, 1
	// in 16 sampled) a trim keeps 436 and starts over 468, and inboxes
	// average ~462 entries. A smaller band trims more often (a trim costs
	// Redis about as much as a push) over smaller inboxes; the reader's
	// guarantee (InboxMax - InboxTrimSlack) does not depend on it.
	InboxTrimBand int
	// InboxTrimEvery: for one (post, follower) pair in this many, chosen by
	// a hash of the pair (so a redelivery samples the same pairs), a push
	// also checks the inbox's size (trimming it with trimScript when over
	// InboxMax, see InboxTrimSlack) and TTL. 1 runs the bounded-add script
	// on every push instead (with InboxTrimSlack 0: exact trims, see
	// docs/projections.md). Default 16.
	InboxTrimEvery int
	// InboxTTLMargin: inboxes the projector creates or trims without a TTL
	// get InactiveAfter minus this margin, and followers seen longer ago
	// than that get the TTL check on every push, so their inbox gets that
	// TTL at once. The query side sets the same TTL on reads. Default 1h.
	InboxTTLMargin time.Duration
	// TimelineMax bounds every author timeline.
	TimelineMax int
	// BackfillPosts is how many of a followee's newest posts a follow copies.
	BackfillPosts int
	// FanoutBatch is the page size of follower queries and the number of
	// inboxes written per Redis pipeline.
	FanoutBatch int
	// FanoutParallel is how many pages of one post's fan-out are written
	// at once (pipelines in flight per message). Default 4.
	FanoutParallel int
	// FanoutInflight bounds the fan-out pipelines in flight at once across
	// the whole inbox projector (every partition's messages). Redis runs
	// one command at a time: past two pipelines in flight (one executing,
	// one queued behind it) more do not write faster, but each one more
	// is another batch of listpack ZADDs that a reader's command, arriving
	// on its own connection, may wait behind. Default 2.
	FanoutInflight int
	// FollowerCacheRows bounds the follower cache of the inbox projector
	// (follower rows held, about 16 bytes each; see followercache.go):
	// an author's followers are read from PostgreSQL once and reused for
	// their next posts. Default 1<<24 (at most ~270 MB: the whole graph of
	// 50,000 users with 300 followers each fits); negative turns the cache
	// off (every post reads its followers again).
	FollowerCacheRows int
	// InactiveAfter: followers who have not read their feed for this long
	// get no pushes (FEED_INACTIVE_AFTER).
	InactiveAfter time.Duration
}

// DefaultConfig returns the defaults of every policy.
func DefaultConfig() Config {
	return Config{
		CelebrityThreshold: 10_000,
		InboxMax:           500,
		InboxTrimSlack:     64,
		InboxTrimEvery:     16,
		InboxTTLMargin:     time.Hour,
		TimelineMax:        1000,
		BackfillPosts:      20,
		FanoutBatch:        1000,
		FanoutParallel:     4,
		FanoutInflight:     2,
		FollowerCacheRows:  1 << 24,
		InactiveAfter:      30 * 24 * time.Hour,
	}
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	// A projector's keys and group never change under it: a version switch
	// restarts it (Supervisor).
	c.Keys = c.Keys.Fixed()
	c.CelebrityThreshold = cmp.Or(c.CelebrityThreshold, d.CelebrityThreshold)
	c.InboxMax = cmp.Or(c.InboxMax, d.InboxMax)
	// Zero slack is a meaningful setting (exact trims), so it defaults only
	// together with the sampling: a caller that sets neither (`feed
	// project`) gets the documented policy, not slack 0, which would run
	// the trim script on nearly every sampled push.
	defaulted := c.InboxTrimSlack == 0 && c.InboxTrimEvery == 0
	if defaulted {
		c.InboxTrimSlack = min(d.InboxTrimSlack, c.InboxMax/4)
	}
	if c.InboxTrimSlack < 0 {
		c.InboxTrimSlack = 0
	}
	if c.InboxTrimBand == 0 {
		// The defaulted policy starts trims halfway between what a trim
		// keeps and InboxMax; an explicit one (tests, exact trims) at
		// InboxMax, as before the band existed.
		c.InboxTrimBand = c.InboxTrimSlack
		if defaulted {
			c.InboxTrimBand = max(c.InboxTrimSlack/2, min(c.InboxTrimSlack, 1))
		}
	}
	c.InboxTrimEvery = cmp.Or(c.InboxTrimEvery, d.InboxTrimEvery)
	c.InboxTTLMargin = cmp.Or(c.InboxTTLMargin, d.InboxTTLMargin)
	c.TimelineMax = cmp.Or(c.TimelineMax, d.TimelineMax)
	c.BackfillPosts = cmp.Or(c.BackfillPosts, d.BackfillPosts)
	c.FanoutBatch = cmp.Or(c.FanoutBatch, d.FanoutBatch)
	c.FanoutParallel = cmp.Or(c.FanoutParallel, d.FanoutParallel)
	c.FanoutInflight = cmp.Or(c.FanoutInflight, d.FanoutInflight)
	c.FollowerCacheRows = cmp.Or(c.FollowerCacheRows, d.FollowerCacheRows)
	c.InactiveAfter = cmp.Or(c.InactiveAfter, d.InactiveAfter)
	return c
}

// Validate reports the first policy that cannot work.
func (c Config) Validate() error {
	switch {
	case c.CelebrityThreshold < 1:
		return fmt.Errorf("celebrity threshold %d: want at least 1", c.CelebrityThreshold)
	case c.InboxMax < 1 || c.TimelineMax < 1:
		return fmt.Errorf("inbox max %d, timeline max %d: want at least 1", c.InboxMax, c.TimelineMax)
	case c.InboxTrimSlack >= c.InboxMax:
		return fmt.Errorf("inbox trim slack %d: want below inbox max %d (a trim keeps max - slack)", c.InboxTrimSlack, c.InboxMax)
	case c.InboxTrimBand < 0 || c.InboxTrimBand > c.InboxTrimSlack:
		return fmt.Errorf("inbox trim band %d: want 1..slack %d (trims start over inbox max - slack + band)", c.InboxTrimBand, c.InboxTrimSlack)
	case c.BackfillPosts < 1 || c.BackfillPosts > c.InboxMax:
		return fmt.Errorf("backfill posts %d: want 1..inbox max", c.BackfillPosts)
	case c.FanoutBatch < 1:
		return fmt.Errorf("fan-out batch %d: want at least 1", c.FanoutBatch)
	case c.FanoutParallel < 1:
		return fmt.Errorf("fan-out parallel %d: want at least 1", c.FanoutParallel)
	case c.FanoutInflight < 1:
		return fmt.Errorf("fan-out in flight %d: want at least 1", c.FanoutInflight)
	case c.InactiveAfter <= 0:
		return fmt.Errorf("inactive after %v: want a positive duration", c.InactiveAfter)
	case c.InboxTrimEvery < 1:
		return fmt.Errorf("inbox trim every %d: want at least 1", c.InboxTrimEvery)
	case c.InboxTTLMargin <= 0 || c.InactiveAfter-c.InboxTTLMargin < time.Second:
		return fmt.Errorf("inbox TTL margin %v: want a positive duration below inactive after %v", c.InboxTTLMargin, c.InactiveAfter)
	}
	return nil
}

// New returns the projectors named (all of Names when names is empty).
func New(cfg Config, pg Querier, rdb redis.UniversalClient, m *Metrics, names ...string) ([]Projector, error) {
	if len(names) == 0 {
		names = Names()
	}
	var out []Projector
	for _, n := range names {
		var (
			p   Projector
			err error
		)
		switch n {
		case NameInbox:
			p, err = NewInbox(cfg, pg, rdb, m)
		case NameTimelines:
			p, err = NewTimelines(cfg, rdb)
		case NameFollowers:
			p, err = NewFollowers(cfg, rdb)
		case NamePosts:
			p, err = NewPosts(cfg, rdb)
		default:
			return nil, fmt.Errorf("unknown projector %q (want one of %v)", n, Names())
		}
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// inboxKeep is how many real entries a trim keeps: InboxMax - slack (see
// InboxTrimSlack).
func (c Config) inboxKeep() int { return c.InboxMax - c.InboxTrimSlack }

// inboxTrimOver is the number of real entries over which a sampled push
// trims an inbox: InboxMax - slack + band (see InboxTrimBand).
func (c Config) inboxTrimOver() int { return c.inboxKeep() + c.InboxTrimBand }

// inboxTTL is the TTL the projector gives inboxes that have none.
func (c Config) inboxTTL() time.Duration { return c.InactiveAfter - c.InboxTTLMargin }

// millis is the sorted-set score of a post: its created_at in epoch ms.
func millis(t time.Time) int64 { return t.UnixMilli() }

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
