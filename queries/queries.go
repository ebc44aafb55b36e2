// Package queries is the read side: the hybrid home feed (pushed inbox,
// pulled celebrity timelines, the caller's own posts, and PostgreSQL below
// what Redis is sure of) and an author's posts, both paged with an opaque
// cursor. See docs/queries.md.
package queries

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/semaphore"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/service"
	"github.com/feedco/feed/readmodel"
)

// MaxLimit is the largest page size; the api rejects larger ones with 400.
const MaxLimit = 50

// ErrInvalidLimit is returned for a page size outside 1..MaxLimit. The api
// validates first; this is the defensive second check.
var ErrInvalidLimit = errors.New("limit out of range 1..50")

// ErrInvalidID is returned for a user or author id that is not positive.
var ErrInvalidID = errors.New("id must be positive")

// DB is what the read side needs from PostgreSQL; *pgxpool.Pool has it.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Config tunes the read side. Zero values take the defaults.
type Config struct {
	// Keys names the Redis read models (the prefix selects a namespace).
	// With Versions nil the projection versions follow the active ones
	// (readmodel.LiveVersions).
	Keys readmodel.Keys
	// InboxMax, ActivityWriteInterval, InactiveAfter and InboxTTLMargin
	// are the query side's part of the feed policy (readmodel.Policy
	// documents each, and defaults them): set them with WithPolicy from the
	// one policy the process built, or field by field in tests.
	InboxMax int
	// CelebrityCacheTTL is how long the celebrity set and each celebrity's
	// timeline head are served from process memory (default 3 s, at most
	// 5 s): a hot celebrity then costs Redis one read per TTL per instance,
	// and celebrity posts show up to one TTL late.
	CelebrityCacheTTL time.Duration
	// RefreshSettle is how far behind the clock a refresh page (HomeAfter,
	// AuthorPostsAfter) stops: it shows only posts created at least this
	// long ago, so that posts still on their way to the read models (the
	// projectors' lag, the celebrity cache's TTL) land before a refresh
	// moves past their place (default 8 s; it must exceed
	// CelebrityCacheTTL). A post that reaches the read
	// models later than this after its creation can be missed by a
	// refresh; a reread from the top still shows it.
	RefreshSettle time.Duration
	// TimelineCacheSize is how many of a celebrity's newest posts are kept
	// in that cache (default 200). Deeper pages read Redis directly.
	TimelineCacheSize     int
	ActivityWriteInterval time.Duration
	InactiveAfter         time.Duration
	InboxTTLMargin        time.Duration
	// PostHorizon is the policy's (readmodel.Policy.PostHorizon,
	// FEED_POST_CACHE_TTL): a post older than now - PostHorizon is read
	// from PostgreSQL with its counts and the viewer's state, never from
	// Redis, whose keys of it have expired; an edit written through from
	// here expires with the post's other keys.
	PostHorizon time.Duration
	// NotificationsMax is the policy's notifications bound
	// (readmodel.Policy.NotificationsMax): a set the query side completes
	// from PostgreSQL holds at most this many.
	NotificationsMax int
	// PostCacheSize bounds the in-process cache of post bodies, in posts
	// (default 100,000; about 300 bytes each with 100-character content).
	PostCacheSize int
	// PostCacheTTL is how long a cached post is trusted to be live before
	// the next page that shows it asks Redis again, when the deletion feed
	// is not fresh (default 1 s, at most 5 s): a deletion is then hidden at
	// most this long after the posts projector wrote its tombstone. While
	// the feed is fresh (its last poll started less than PostCacheTTL ago)
	// cached bodies are trusted up to a minute and deletions are hidden
	// from the first poll after their commit. Bodies themselves never
	// expire (they are immutable); a known deletion is final.
	PostCacheTTL time.Duration
	// DeletionPollInterval is how often the process reads new post
	// deletions from the event log while it serves reads (default 200 ms,
	// or PostCacheTTL/2 if that is shorter; it must be below PostCacheTTL). See docs/queries.md "Post body cache".
	DeletionPollInterval time.Duration
	// RebuildTimeout bounds one background rebuild of a read model from
	// PostgreSQL (default 10 s), and the drain of the queued background
	// work when Run ends.
	RebuildTimeout time.Duration
	// RebuildConcurrency bounds the rebuilds from PostgreSQL a process runs
	// at once (inboxes, following states, timelines; default 4): after
	// Redis lost everything, its load on PostgreSQL while readers heal the
	// read models (cold_rebuild.go).
	RebuildConcurrency int
	// CelebrityThreshold is the feed policy's (readmodel.Policy): the
	// follower count from which the celebrity set, when the query side
	// rebuilds it from PostgreSQL, holds an author.
	CelebrityThreshold int64
	// CelebrityBand is the feed policy's too: with it, the rebuilt set
	// also holds the authors inside the band whose follow events last
	// left it at the threshold (readmodel.LoadCelebrities).
	CelebrityBand int64
	// ReadCacheKeys bounds the server-assisted client-side cache of the
	// per-reader Redis reads of home pages (Redis CLIENT TRACKING, see
	// read_cache.go and docs/queries.md "Read cache"), in Redis keys. Zero
	// means 40,000 (about 10,000 readers); negative turns it off. A
	// *redis.Client or a *redis.ClusterClient (a tracker per master) gets
	// the cache.
	ReadCacheKeys int
	// ReadCacheBarrier makes a read that the cache would answer first wait
	// for a barrier ping on its node's invalidation connection (see
	// readHome), so that a write another API instance had acknowledged
	// before the read began is never answered stale: read-your-writes
	// across instances behind a balancer without affinity. One instance
	// does not need it (its own PostCreated drops its own cached
	// marker). It costs a shared round trip per cached read
	// (FEED_READ_CACHE_BARRIER; docs/queries.md, Read cache).
	ReadCacheBarrier bool
	// StreamPlainReads sends each live stream's home read (HomeAbove's
	// inbox, own timeline and markers, read from Redis itself) in a
	// pipeline of its own. By default a read made while other streams'
	// reads are under way goes through go-redis's asynchronous
	// autopipeliner, in pipelines shared with them: under the full mix a
	// delivered event then costs 0.4x the CPU (docs/benchmarks.md, "CPU
	// per delivered stream event").
	StreamPlainReads bool
	// RedisBreakerFailures is how many consecutive Redis connection
	// failures open a circuit (reads and the post commands' writes each
	// have one;
	// default 3).
	RedisBreakerFailures int
	// RedisBreakerOpen is how long an open circuit skips Redis before one
	// probe is let through (default 1 s).
	RedisBreakerOpen time.Duration
	// FallbackReads bounds the reads a process answers from PostgreSQL at
	// once while Redis is unavailable (default 8); a read that finds no
	// slot within 100 ms fails with ErrFallbackBusy.
	FallbackReads int
	// invalDial, when set (tests), dials the read cache's invalidation
	// connection.
	invalDial func(ctx context.Context, network, addr string) (net.Conn, error)
	// dataDial, when set (tests), dials the read cache's data connections.
	dataDial func(ctx context.Context, network, addr string) (net.Conn, error)
	// noDeletionFeed (tests) keeps Run from polling the deletion feed:
	// cached bodies then always fall back to PostCacheTTL.
	noDeletionFeed bool
	// ReadOnly makes the Feed change nothing, for `feed verify`: no
	// activity write (a verified user does not become active), no rebuild
	// of a read model found incomplete (the page is served from
	// PostgreSQL, and Page.Cold says so), no write of the celebrity set.
	ReadOnly bool
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger reports background failures; nil means slog.Default().
	Logger *slog.Logger
}

// Policy returns the part of the feed policy c carries, as it is (not
// defaulted).
func (c Config) Policy() readmodel.Policy {
	return readmodel.Policy{
		CelebrityThreshold:    c.CelebrityThreshold,
		CelebrityBand:         c.CelebrityBand,
		InboxMax:              c.InboxMax,
		ActivityWriteInterval: c.ActivityWriteInterval,
		InactiveAfter:         c.InactiveAfter,
		InboxTTLMargin:        c.InboxTTLMargin,
		PostHorizon:           c.PostHorizon,
		NotificationsMax:      c.NotificationsMax,
	}
}

// WithPolicy returns c carrying the query side's part of the feed policy
// p, so it reads and rebuilds inboxes by the rules the projectors write
// them by.
func (c Config) WithPolicy(p readmodel.Policy) Config {
	c.CelebrityThreshold = p.CelebrityThreshold
	c.CelebrityBand = p.CelebrityBand
	c.InboxMax = p.InboxMax
	c.ActivityWriteInterval = p.ActivityWriteInterval
	c.InactiveAfter = p.InactiveAfter
	c.InboxTTLMargin = p.InboxTTLMargin
	c.PostHorizon = p.PostHorizon
	c.NotificationsMax = p.NotificationsMax
	return c
}

func (c Config) withDefaults() Config {
	c = c.WithPolicy(c.Policy().WithDefaults())
	c.CelebrityCacheTTL = cmp.Or(c.CelebrityCacheTTL, 3*time.Second)
	c.RefreshSettle = cmp.Or(c.RefreshSettle, 8*time.Second)
	c.TimelineCacheSize = cmp.Or(c.TimelineCacheSize, 200)
	c.RebuildTimeout = cmp.Or(c.RebuildTimeout, 10*time.Second)
	c.RebuildConcurrency = cmp.Or(c.RebuildConcurrency, 4)
	c.PostCacheSize = cmp.Or(c.PostCacheSize, 100_000)
	c.PostCacheTTL = cmp.Or(c.PostCacheTTL, time.Second)
	c.DeletionPollInterval = cmp.Or(c.DeletionPollInterval, min(200*time.Millisecond, c.PostCacheTTL/2))
	c.RedisBreakerFailures = cmp.Or(c.RedisBreakerFailures, 3)
	c.RedisBreakerOpen = cmp.Or(c.RedisBreakerOpen, time.Second)
	c.FallbackReads = cmp.Or(c.FallbackReads, 8)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate rejects a configuration the read path cannot honour.
func (c Config) Validate() error {
	if err := c.Policy().WithDefaults().Validate(); err != nil {
		return fmt.Errorf("queries: %w", err)
	}
	switch {
	case c.CelebrityCacheTTL <= 0 || c.CelebrityCacheTTL > 5*time.Second:
		return fmt.Errorf("queries: CelebrityCacheTTL %v must be in (0, 5s]", c.CelebrityCacheTTL)
	case c.RefreshSettle <= c.CelebrityCacheTTL:
		return fmt.Errorf("queries: RefreshSettle %v must exceed CelebrityCacheTTL %v", c.RefreshSettle, c.CelebrityCacheTTL)
	case c.TimelineCacheSize < MaxLimit+1:
		return fmt.Errorf("queries: TimelineCacheSize %d must be at least %d", c.TimelineCacheSize, MaxLimit+1)
	case c.InactiveAfter-c.InboxTTLMargin < c.ActivityWriteInterval:
		return fmt.Errorf("queries: InboxTTLMargin %v must be positive and leave InactiveAfter %v minus it at least ActivityWriteInterval", c.InboxTTLMargin, c.InactiveAfter)
	case c.RebuildTimeout <= 0 || c.RebuildConcurrency < 1:
		return fmt.Errorf("queries: RebuildTimeout %v and RebuildConcurrency %d must be positive", c.RebuildTimeout, c.RebuildConcurrency)
	case c.PostCacheSize < 2*(MaxLimit+1):
		return fmt.Errorf("queries: PostCacheSize %d must be at least %d", c.PostCacheSize, 2*(MaxLimit+1))
	case c.PostCacheTTL <= 0 || c.PostCacheTTL > 5*time.Second:
		return fmt.Errorf("queries: PostCacheTTL %v must be in (0, 5s]", c.PostCacheTTL)
	case c.RedisBreakerFailures < 1 || c.RedisBreakerOpen <= 0 || c.FallbackReads < 1:
		return fmt.Errorf("queries: RedisBreakerFailures %d, RedisBreakerOpen %v and FallbackReads %d must be positive", c.RedisBreakerFailures, c.RedisBreakerOpen, c.FallbackReads)
	case c.DeletionPollInterval <= 0 || c.DeletionPollInterval >= c.PostCacheTTL:
		return fmt.Errorf("queries: DeletionPollInterval %v must be positive and below PostCacheTTL %v", c.DeletionPollInterval, c.PostCacheTTL)
	}
	return nil
}

// Page is one page of a feed. NextCursor is nil when nothing older exists
// (and on a refresh page, which is read upwards: see HomeAfter).
// PrevCursor is the cursor of the newest item, nil on an empty page: the
// `after` of the refresh that continues upwards from this page.
type Page struct {
	Items      []Post  `json:"items"`
	NextCursor *string `json:"nextCursor"`
	PrevCursor *string `json:"prevCursor"`
	// Degraded says the page was read from PostgreSQL alone because Redis
	// was unavailable (the api sends Feed-Degraded: true): the same posts,
	// at the cost of the source of truth; or, with Partial, that it is a
	// degraded page of HomeDegraded.
	Degraded bool `json:"-"`
	// Cold says a read model of the reader's (the inbox, the following
	// state, the own timeline) was not built: the page, from there on, was
	// read from PostgreSQL (and that read model's rebuild started, unless
	// the Feed is ReadOnly).
	Cold bool `json:"-"`
	// Partial says the page is HomeDegraded's: the inbox and own posts
	// only, its NextCursor a resume cursor that continues the full merge
	// without repeating or skipping a post.
	Partial bool `json:"-"`

	// buf is the recycled array Items was made in (makePage), given back
	// by Release; nil for a page made elsewhere.
	buf *[]Post
}

// Release gives the page's items back to be reused by a later page: the
// caller must not use the page, or anything of its items, afterwards. A
// page never released is collected as any value; releasing is for a
// caller that is done with the page once it is encoded (the API).
func (p *Page) Release() {
	b := p.buf
	if b == nil {
		return
	}
	p.buf, p.Items = nil, nil
	if cap(*b) > maxPooledPosts {
		return // do not keep a rare deep page's array
	}
	clear((*b)[:cap(*b)]) // keep no post alive
	postBufs.Put(b)
}

// postBufs recycles pages' item arrays (Page.Release): a 20-post page's
// is 3.7 KB, allocated by every read otherwise.
var postBufs = sync.Pool{New: func() any { return new([]Post) }}

const maxPooledPosts = 128

// Feed answers the read-side queries. Safe for concurrent use.
type Feed struct {
	cfg     Config
	db      DB
	rdb     redis.UniversalClient
	metrics *Metrics

	// the read models, under cfg.Keys (live versions); the inboxes
	// through view (inboxes(), inbox_view.go), which follows the inbox
	// version's bound from live (nil with fixed versions); ownLive: New
	// made live, so Run runs its refreshes
	live    *readmodel.LiveVersions
	ownLive bool
	view    atomic.Pointer[inboxView]
	tl      readmodel.Timelines
	follows readmodel.Follows
	bodies  readmodel.PostCache
	// engagement and userNames are the posts projection's counts, viewer
	// state, reposts of originals and names; names the process's names.
	engagement readmodel.Engagement
	userNames  readmodel.Names
	names      *nameCache

	log   *slog.Logger
	clock atomic.Pointer[func() time.Time] // now's source (tests set it: setClock); nil: time.Now
	// refreshScan is refresh.go's refreshScan (tests lower it).
	refreshScan int

	celebs    celebrityCache
	posts     *postCache
	timelines timelineCache
	activity  recentSet // activity writes of this process (ActivityWriteInterval)
	flights   rebuildFlights
	work      *workQueues  // activity writes and rebuilds, for Run's workers
	deletions deletionFeed // post deletions from the event log (deletion_feed.go)
	hints     *followHints // per reader, the authors to ask about in the first pipeline
	cache     *readCache   // per-reader Redis reads (read_cache.go); nil when off
	// streamReads carries the live streams' direct home reads made while
	// others are under way (streamReadsOut counts them); nil with
	// Config.StreamPlainReads: each its own pipeline.
	streamReads    *redis.AutoPipeliner
	streamReadsOut atomic.Int32

	readCircuit, writeCircuit *breaker            // Redis circuits (degraded.go)
	fallback                  *semaphore.Weighted // concurrent PostgreSQL fallbacks of reads
	rebuildSlots              *semaphore.Weighted // concurrent rebuilds from PostgreSQL (cold_rebuild.go)

	ran   atomic.Bool   // Run was called
	ready chan struct{} // closed when Run takes work
}

// nameCacheSize bounds the users whose names a process keeps (names never
// change: an entry is dropped only to bound memory).
const nameCacheSize = 100_000

// followHintUsers bounds the readers whose follow hints a process keeps
// (a few hundred bytes each).
const followHintUsers = 50_000

// New returns the read side over PostgreSQL (the source of truth) and Redis
// (the read models). It reads the active projection versions (when
// cfg.Keys has none) and builds; its background work runs in Run.
func New(cfg Config, db DB, rdb redis.UniversalClient) (*Feed, error) {
	if db == nil {
		return nil, errors.New("queries: nil PostgreSQL pool")
	}
	if rdb == nil {
		return nil, errors.New("queries: nil Redis client")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ownLive := false
	if cfg.Keys.Versions == nil {
		// Follow the projection versions `feed rebuild` switches, without
		// a restart: read from PostgreSQL now, then from the Redis
		// registry at most once a second in the background (Run), and from
		// PostgreSQL again when the registry lost or changed them
		// (docs/rebuild.md).
		vctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		lv, err := readmodel.NewLiveVersions(vctx, readmodel.LiveVersionsConfig{Prefix: cfg.Keys.Prefix, Logger: cfg.Logger}, rdb, db)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("queries: %w", err)
		}
		cfg.Keys.Versions = lv
		ownLive = true
	}
	live, _ := cfg.Keys.Versions.(*readmodel.LiveVersions)
	cacheKeys, err := readCacheKeys(cfg.ReadCacheKeys)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	f := &Feed{cfg: cfg, db: db, rdb: rdb, metrics: m, log: cfg.Logger, refreshScan: refreshScan, live: live, ownLive: ownLive,
		ready:   make(chan struct{}),
		tl:      readmodel.NewTimelines(cfg.Keys, readmodel.DefaultTimelineMax),
		follows: readmodel.NewFollows(cfg.Keys), bodies: readmodel.NewPostCache(cfg.Keys),
		engagement: readmodel.NewEngagement(cfg.Keys), userNames: readmodel.NewNames(cfg.Keys), names: newNameCache(nameCacheSize)}
	if live == nil {
		f.view.Store(newInboxView(db, rdb, cfg.Keys, cfg.Keys.Version(readmodel.ProjectionFollowers), readmodel.VersionRecord{}, cfg.Policy()))
	}
	f.inboxes()
	f.celebs.ttl = cfg.CelebrityCacheTTL
	f.timelines.ttl = cfg.CelebrityCacheTTL
	f.timelines.size = cfg.TimelineCacheSize
	f.activity.window = cfg.ActivityWriteInterval
	f.posts = newPostCache(cfg.PostCacheSize, cfg.PostCacheTTL)
	f.bodies = f.bodies.WithHorizon(f.horizon())
	f.engagement = f.engagement.WithHorizon(f.horizon())
	f.hints = newFollowHints(followHintUsers)
	f.deletions = deletionFeed{interval: cfg.DeletionPollInterval, scanLimit: deletionScanLimit, wake: make(chan struct{}, 1)}
	f.readCircuit = newBreaker("reads", cfg.RedisBreakerFailures, cfg.RedisBreakerOpen, readFailed, cfg.Logger, m.Circuits)
	f.writeCircuit = newBreaker("writes", cfg.RedisBreakerFailures, cfg.RedisBreakerOpen, writeFailed, cfg.Logger, m.Circuits)
	f.fallback = newFallback(cfg.FallbackReads)
	f.rebuildSlots = semaphore.NewWeighted(int64(cfg.RebuildConcurrency))
	f.work = newWorkQueues(cfg.RebuildConcurrency)
	f.cache = newReadCache(rdb, cacheKeys, cfg.Logger, cfg.invalDial, cfg.dataDial)
	if !cfg.StreamPlainReads {
		if c, ok := rdb.(interface {
			AsyncAutoPipeline() (*redis.AutoPipeliner, error)
		}); ok {
			if f.streamReads, err = c.AsyncAutoPipeline(); err != nil {
				return nil, fmt.Errorf("queries: the streams' autopipeliner: %w", err)
			}
		}
	}
	if err := m.registerReadCache(cfg.Registerer, f.cache); err != nil {
		return nil, err
	}
	return f, nil
}

// ErrRunTwice is returned by a second Run of a Feed.
var ErrRunTwice = errors.New("queries: Run called twice")

// Run is the Feed's background work, until ctx ends: the workers of the
// activity writes (activity.go) and of the rebuilds from PostgreSQL
// (cold_rebuild.go) that reads queue, the deletion feed's poller, the
// read cache's invalidation connections, and, when New made the live
// versions, their refreshes. Ready is closed once it takes work. When ctx
// ends the queues close, the work queued before runs to its end (what
// has not started within RebuildTimeout is cancelled), and Run returns
// once every goroutine it started has. A Feed runs once (ErrRunTwice).
//
// Reads are served before Run and after it, without that work: an
// incomplete read model is read from PostgreSQL and its rebuild not
// queued (counted "deferred"), no activity is written (the first read
// after Run writes it), cached post bodies fall back to PostCacheTTL, the
// read cache is off, and the live versions are refreshed by the reads
// themselves once stale (readmodel.LiveVersions).
func (f *Feed) Run(ctx context.Context) error {
	if !f.ran.CompareAndSwap(false, true) {
		return ErrRunTwice
	}
	var wg sync.WaitGroup
	spawn := func(run func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run()
		}()
	}
	if f.ownLive {
		spawn(func() { _ = f.live.Run(ctx) })
	}
	if f.cache != nil {
		spawn(func() { f.cache.run(ctx) })
	}
	if !f.cfg.noDeletionFeed {
		spawn(func() { f.runDeletionFeed(ctx) })
	}

	// The queued work runs under jobs, which outlives ctx by the drain.
	jobs, stopJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer stopJobs()
	var workers sync.WaitGroup
	for range activityWorkers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			f.runActivityWorker(jobs)
		}()
	}
	for range f.cfg.RebuildConcurrency {
		workers.Add(1)
		go func() {
			defer workers.Done()
			f.runRebuildWorker(jobs)
		}()
	}
	f.work.open()
	close(f.ready)

	<-ctx.Done()
	f.work.close() // the workers end once the queues are empty
	drained := make(chan struct{})
	spawn(func() {
		workers.Wait()
		close(drained)
	})
	drain := time.NewTimer(f.cfg.RebuildTimeout)
	select {
	case <-drained:
	case <-drain.C:
		stopJobs() // what runs ends within its own bound; what is queued fails at once
	}
	drain.Stop()
	wg.Wait()
	return nil
}

// horizon is the post horizon by the Feed's clock (Config.PostHorizon).
func (f *Feed) horizon() readmodel.Horizon {
	return readmodel.Horizon{H: f.cfg.PostHorizon, Now: f.now}
}

// notifications is the notifications read model as the projector writes
// it: the policy's bound, the post horizon by the Feed's clock.
func (f *Feed) notifications() readmodel.Notifications {
	return f.cfg.Policy().Notifications(f.cfg.Keys, f.now)
}

// now is the time by the Feed's clock.
func (f *Feed) now() time.Time {
	if c := f.clock.Load(); c != nil {
		return (*c)()
	}
	return time.Now()
}

// setClock makes now read c (tests), safely while Run runs.
func (f *Feed) setClock(c func() time.Time) { f.clock.Store(&c) }

// Ready is closed once Run takes work.
func (f *Feed) Ready() <-chan struct{} { return f.ready }

// Service returns a service that runs f (Run), ready when Run takes work,
// its stop bounded by the drain of the queued work and one rebuild.
func (f *Feed) Service() *service.Service {
	return service.New("queries", f.Run, service.ReadyWhen(f.ready),
		service.StopTimeout(2*f.cfg.RebuildTimeout+10*time.Second))
}

// useDeletionFeed is called by every read that hydrates: it records that
// a read wants the feed (the poller skips its polls while none did) and
// reports whether the feed vouches for cached bodies now.
func (f *Feed) useDeletionFeed(now time.Time) bool {
	d := &f.deletions
	d.touch(now, f.cfg.PostCacheTTL)
	return d.fresh(now, f.cfg.PostCacheTTL)
}

// Metrics exposes the counters, for tests and for the api's own dashboards.
func (f *Feed) Metrics() *Metrics { return f.metrics }

func checkArgs(id int64, limit int) error {
	if id <= 0 {
		return ErrInvalidID
	}
	if limit < 1 || limit > MaxLimit {
		return ErrInvalidLimit
	}
	return nil
}

// item is a feed entry on its way to a page: its key and, once known, the
// post to show.
type item struct {
	key  key
	post Post
}

// makePage makes the page of items' first limit, its items in an array
// recycled by Release.
func makePage(items []item, limit int) Page {
	n := min(len(items), limit)
	pb := postBufs.Get().(*[]Post)
	if *pb == nil || cap(*pb) < n { // never nil: an empty page's items are [], not null
		*pb = make([]Post, 0, n)
	}
	p := Page{Items: (*pb)[:0], buf: pb}
	for i := 0; i < n; i++ {
		p.Items = append(p.Items, items[i].post)
	}
	if len(items) == 0 {
		return p
	}
	// Both cursors are made in two allocations: their bytes in one string,
	// and the two strings the pointers point to.
	var b [2 * cursorV1EncLen]byte
	buf := appendCursor(b[:0], items[0].key)
	prevLen := len(buf)
	if len(items) > limit {
		buf = appendCursor(buf, items[limit-1].key)
	}
	s := string(buf)
	cs := &[2]string{s[:prevLen], s[prevLen:]}
	p.PrevCursor = &cs[0]
	if len(items) > limit {
		p.NextCursor = &cs[1]
	}
	return p
}

// formatTime renders the feed's millisecond as the API's createdAt.
func formatTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format(events.CreatedAtLayout)
}
