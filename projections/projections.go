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
	"github.com/jackc/pgx/v5/pgconn"
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
func Names() []string {
	return []string{NamePosts, NameFollowers, NameTimelines, NameInbox, NameNotifications}
}

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

// Selective is implemented by a projector that ignores some event types
// entirely: the runner acknowledges a message of such a type (by its name
// metadata) without decoding it. Ignores answers true only for current
// types the projector's Apply does nothing with; an unknown type is
// decoded as before, so that it fails and goes to the poison queue.
type Selective interface {
	Ignores(typ string) bool
}

// Querier is the part of a PostgreSQL pool the projectors read the source
// of truth with (follows, user_activity, posts); *pgxpool.Pool implements it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Config holds the policies the projectors share. Zero fields take the
// defaults of DefaultConfig.
type Config struct {
	// Keys names the Redis keys (a prefix in tests and rebuilds).
	Keys readmodel.Keys
	// CelebrityThreshold, CelebrityBand, InboxMax, InboxTrimSlack,
	// InboxTrimBand, InboxTrimEvery, InactiveAfter and InboxTTLMargin are the feed
	// policy (readmodel.Policy documents each, and defaults them): set
	// them with WithPolicy from the one policy the process built, or
	// field by field in tests.
	CelebrityThreshold int64
	CelebrityBand      int64
	InboxMax           int
	InboxTrimSlack     int
	InboxTrimBand      int
	InboxTrimEvery     int
	InboxTTLMargin     time.Duration
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
	// is another batch of APPENDs that a reader's command, arriving
	// on its own connection, may wait behind. Default 2.
	FanoutInflight int
	// FollowerCacheRows bounds the follower cache of the inbox projector
	// (follower rows held, 8 bytes each; see followercache.go): an
	// author's followers are read from PostgreSQL once and reused for
	// their next posts. It also bounds the users its activity index holds
	// (activity.go, about 40 bytes each). Default 1<<24 (at most ~135 MB
	// of lists: the whole graph of 50,000 users with 300 followers each
	// fits); negative turns both off (every post reads its followers and
	// their activity again).
	FollowerCacheRows int
	// InactiveAfter is the policy's (see CelebrityThreshold).
	InactiveAfter time.Duration
	// OnlineRefresh is how old the inbox projector's copy of the users
	// with an open live stream may get before a push reads it again
	// (live.go; default 1 s); negative reads it at every push (tests).
	OnlineRefresh time.Duration
	// PostHorizon is the policy's (readmodel.Policy.PostHorizon): how long
	// the posts projection's per-post keys live after the post's creation.
	PostHorizon time.Duration
	// Now is the clock the posts projector judges an expiry past by (nil:
	// time.Now); tests set it.
	Now func() time.Time
	// NotificationsMax bounds each user's notifications: the policy's
	// (readmodel.Policy.NotificationsMax, FEED_NOTIFICATIONS_MAX, recorded
	// with the notifications version; readmodel.DefaultNotificationsMax
	// when 0).
	NotificationsMax int
	// Notifier is told of each notification the notifications projector
	// added; nil is the live streams' own (live.go: wake:n:{u} for the
	// users with an open stream).
	Notifier Notifier
}

// DefaultConfig returns the defaults of every setting: the feed policy's
// (readmodel.DefaultPolicy) and the projectors' own.
func DefaultConfig() Config {
	return Config{
		TimelineMax:       readmodel.DefaultTimelineMax,
		BackfillPosts:     20,
		FanoutBatch:       1000,
		FanoutParallel:    4,
		FanoutInflight:    2,
		FollowerCacheRows: 1 << 24,
		OnlineRefresh:     time.Second,
	}.WithPolicy(readmodel.DefaultPolicy())
}

// Policy returns the feed policy c carries, as it is (not defaulted).
func (c Config) Policy() readmodel.Policy {
	return readmodel.Policy{
		CelebrityThreshold: c.CelebrityThreshold,
		CelebrityBand:      c.CelebrityBand,
		InboxMax:           c.InboxMax,
		InboxTrimSlack:     c.InboxTrimSlack,
		InboxTrimBand:      c.InboxTrimBand,
		InboxTrimEvery:     c.InboxTrimEvery,
		InactiveAfter:      c.InactiveAfter,
		InboxTTLMargin:     c.InboxTTLMargin,
		PostHorizon:        c.PostHorizon,
		NotificationsMax:   c.NotificationsMax,
	}
}

// WithPolicy returns c carrying the feed policy p: the projectors then
// apply the same policy as every other component given p.
func (c Config) WithPolicy(p readmodel.Policy) Config {
	c.CelebrityThreshold = p.CelebrityThreshold
	c.CelebrityBand = p.CelebrityBand
	c.InboxMax = p.InboxMax
	c.InboxTrimSlack = p.InboxTrimSlack
	c.InboxTrimBand = p.InboxTrimBand
	c.InboxTrimEvery = p.InboxTrimEvery
	c.InactiveAfter = p.InactiveAfter
	c.InboxTTLMargin = p.InboxTTLMargin
	c.PostHorizon = p.PostHorizon
	c.NotificationsMax = p.NotificationsMax
	return c
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	// A projector's keys and group never change under it: a version switch
	// restarts it (Supervisor).
	c.Keys = c.Keys.Fixed()
	c = c.WithPolicy(c.Policy().WithDefaults())
	c.TimelineMax = cmp.Or(c.TimelineMax, d.TimelineMax)
	c.BackfillPosts = cmp.Or(c.BackfillPosts, d.BackfillPosts)
	c.FanoutBatch = cmp.Or(c.FanoutBatch, d.FanoutBatch)
	c.FanoutParallel = cmp.Or(c.FanoutParallel, d.FanoutParallel)
	c.FanoutInflight = cmp.Or(c.FanoutInflight, d.FanoutInflight)
	c.FollowerCacheRows = cmp.Or(c.FollowerCacheRows, d.FollowerCacheRows)
	c.OnlineRefresh = cmp.Or(c.OnlineRefresh, d.OnlineRefresh)
	return c
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	// The policy's query-side field (ActivityWriteInterval) is not the
	// projectors': only it takes its default here.
	if err := c.Policy().WithDefaults().Validate(); err != nil {
		return err
	}
	switch {
	case c.TimelineMax < 1:
		return fmt.Errorf("timeline max %d: want at least 1", c.TimelineMax)
	case c.BackfillPosts < 1 || c.BackfillPosts > c.InboxMax:
		return fmt.Errorf("backfill posts %d: want 1..inbox max", c.BackfillPosts)
	case c.FanoutBatch < 1:
		return fmt.Errorf("fan-out batch %d: want at least 1", c.FanoutBatch)
	case c.FanoutParallel < 1:
		return fmt.Errorf("fan-out parallel %d: want at least 1", c.FanoutParallel)
	case c.FanoutInflight < 1:
		return fmt.Errorf("fan-out in flight %d: want at least 1", c.FanoutInflight)
	}
	return nil
}

// projectorConfig checks a Redis projector's client and returns cfg with
// its defaults, validated.
func projectorConfig(name string, cfg Config, rdb redis.UniversalClient) (Config, error) {
	if rdb == nil {
		return Config{}, fmt.Errorf("new %s projector: nil Redis", name)
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("new %s projector: %w", name, err)
	}
	return cfg, nil
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
		case NameNotifications:
			p, err = NewNotifications(cfg, pg, rdb)
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

// inboxTTL is the TTL the projector gives inboxes that have none.
func (c Config) inboxTTL() time.Duration { return c.Policy().InboxTTL() }

// millis is the sorted-set score of a post: its created_at in epoch ms.
func millis(t time.Time) int64 { return t.UnixMilli() }

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// isPostEvent reports whether typ is a post event's current type.
func isPostEvent(typ string) bool {
	return typ == events.TypePostCreated || typ == events.TypePostDeleted || typ == events.TypePostEdited
}

// isCurrentType reports whether typ is a current event type (Selective
// ignores no other: those are decoded, upcast or poisoned).
func isCurrentType(typ string) bool {
	switch typ {
	case events.TypeUserRegistered, events.TypePostCreated, events.TypePostDeleted, events.TypePostEdited, events.TypeFollowed, events.TypeUnfollowed,
		events.TypeMuted, events.TypeUnmuted, events.TypeBlocked, events.TypeUnblocked,
		events.TypePostReposted, events.TypePostUnreposted, events.TypePostLiked, events.TypePostUnliked:
		return true
	}
	return false
}
