package readmodel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"
)

// LiveVersionsConfig configures a LiveVersions. Zero fields take defaults.
type LiveVersionsConfig struct {
	// Prefix is the key namespace of the Redis registry.
	Prefix string
	// Interval is how often the Redis registry is read (default 1 s).
	Interval time.Duration
	// VerifyInterval is how often the versions are read from PostgreSQL
	// even when the Redis registry agrees with them, in case a switch
	// committed in PostgreSQL never reached Redis (default 30 s).
	VerifyInterval time.Duration
	// MaxStale is the age past which the versions in memory are not
	// served without a refresh: a read that finds them last refreshed
	// longer ago (a process that served nothing for a while) waits for a
	// refresh, bounded by MaxStaleWait, instead of starting one in the
	// background (default 2 × Interval). It bounds how long after a switch
	// any read can still use the old version, which `feed rebuild`'s
	// cleanup delay must exceed.
	MaxStale time.Duration
	// MaxStaleWait bounds that wait (default 1 s; a background refresh
	// already in flight is waited for to its own end). When that refresh
	// fails, the read uses the versions in memory, and the next reads
	// refresh in the background again until one succeeds (a Redis or
	// PostgreSQL that does not answer stalls one read, not one a second).
	MaxStaleWait time.Duration
	// Logger reports a restored registry and failed refreshes (nil:
	// slog.Default()).
	Logger *slog.Logger
}

// LiveVersions follows the active projection versions for the query side
// and the projectors' supervisor. PostgreSQL (projection_versions) is the
// truth and the Redis registry its cache: the versions are read from
// PostgreSQL at start-up, then the Redis registry once per Interval (in
// the background of the reads, by Run, or synchronously by the first read
// after MaxStale without a refresh: no read uses versions older than
// that); when
// the registry lacks a projection or disagrees with the versions in use
// (a switch, or a Redis that lost or rolled back the hash), and every
// VerifyInterval, PostgreSQL is read again, its versions are used, and the
// registry is rewritten from them where it differs. Nobody falls back to
// version 1 when Redis lost the hash, and in the steady state nothing but
// Redis is read.
type LiveVersions struct {
	cfg LiveVersionsConfig
	rdb redis.UniversalClient
	db  VersionQuerier
	reg Registry

	mu       sync.Mutex // one Refresh at a time
	verifyAt time.Time  // guarded by mu

	cur        atomic.Pointer[Active]
	base       time.Time          // when l was made: next and fresh are monotonic nanos since
	next       atomic.Int64       // of the next background refresh
	fresh      atomic.Int64       // of the last successful refresh
	waitFailed atomic.Bool        // the last synchronous refresh failed; cleared by a success
	refreshing atomic.Bool        // a background refresh is asked for (wake) or running
	lostPosts  atomic.Int64       // the posts version whose keys Redis lost (Registry.MarkLost), 0: none
	wake       chan struct{}      // the reads' requests of a background refresh, served by Run
	stale      singleflight.Group // the synchronous refreshes of reads that found the versions stale
}

// NewLiveVersions reads the versions from PostgreSQL (after adopting, once,
// the later versions a pre-upgrade Redis registry holds: adoptCached),
// restores the Redis registry from them where it differs, and returns the follower (so the
// first read already uses the active versions). It fails when either
// server cannot be read, and with ErrNoVersion, naming the projection,
// when PostgreSQL lacks one. The background refreshes the reads ask for
// run in Run; without it, a read refreshes the versions itself once they
// are stale (MaxStale).
func NewLiveVersions(ctx context.Context, cfg LiveVersionsConfig, rdb redis.UniversalClient, db VersionQuerier) (*LiveVersions, error) {
	if rdb == nil || db == nil {
		return nil, errors.New("live versions: nil Redis or PostgreSQL")
	}
	cfg.Interval = cmp.Or(cfg.Interval, time.Second)
	cfg.VerifyInterval = cmp.Or(cfg.VerifyInterval, 30*time.Second)
	cfg.MaxStale = cmp.Or(cfg.MaxStale, 2*cfg.Interval)
	cfg.MaxStaleWait = cmp.Or(cfg.MaxStaleWait, time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := &LiveVersions{cfg: cfg, rdb: rdb, db: db, reg: NewRegistry(cfg.Prefix), base: time.Now(), wake: make(chan struct{}, 1)}
	cached, lost, err := l.reg.cachedAll(ctx, rdb)
	if err != nil {
		return nil, err
	}
	l.lostPosts.Store(int64(lost[ProjectionPosts]))
	adopted, err := adoptCached(ctx, db, cached)
	if err != nil {
		return nil, err
	}
	if len(adopted) > 0 {
		cfg.Logger.Warn("readmodel: took the Redis registry's projection versions into PostgreSQL (the first start after the upgrade that moved the registry there)",
			"projections", adopted, "versions", cached)
	}
	if err := l.resolve(ctx, cached); err != nil {
		return nil, err
	}
	l.next.Store(l.clock() + int64(cfg.Interval))
	return l, nil
}

// clock is the monotonic time since l was made, in nanos: cheaper than
// the wall clock, and every read asks it (follow).
func (l *LiveVersions) clock() int64 { return int64(time.Since(l.base)) }

// Version implements VersionSource. It answers from memory and, at most
// once per Interval, asks Run for a Refresh in the background: a read of a
// process that reads often never waits on Redis or PostgreSQL for the
// versions. Only when the versions were last refreshed more than MaxStale
// ago (nothing read them since: an idle process, which a switch and the
// old version's cleanup may have passed by) does the read wait for the
// refresh (at most MaxStaleWait), so that it never reads the keys of a
// version that was switched away from longer ago than MaxStale.
func (l *LiveVersions) Version(projection string) int {
	l.follow()
	return l.cur.Load().Versions.Version(projection)
}

// follow refreshes the versions when due: in the background, or, when
// they are stale, before it returns.
func (l *LiveVersions) follow() {
	now := l.clock()
	if now < l.next.Load() {
		return
	}
	if now-l.fresh.Load() > int64(l.cfg.MaxStale) && !l.waitFailed.Load() {
		// One refresh for every read that found them stale at once.
		_, _, _ = l.stale.Do("", func() (any, error) {
			if l.clock() < l.next.Load() {
				return nil, nil // a refresh ended meanwhile
			}
			ctx, cancel := context.WithTimeout(context.Background(), l.cfg.MaxStaleWait)
			defer cancel()
			if !l.refresh(ctx) {
				l.waitFailed.Store(true)
			}
			return nil, nil
		})
		return
	}
	if l.refreshing.CompareAndSwap(false, true) {
		l.wake <- struct{}{} // never blocks: one request at a time (refreshing)
	}
}

// Run serves the reads' requests of a background refresh until ctx ends,
// and returns once none runs. A request made while Run does not run (not
// started yet, or stopped) waits for the next Run; until then the reads
// refresh the versions themselves once they are stale (MaxStale).
func (l *LiveVersions) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.wake:
		}
		l.refreshBackground(ctx)
	}
}

// Current returns the versions in use now (refreshed first when stale, as
// Version).
func (l *LiveVersions) Current() Versions {
	l.follow()
	return l.cur.Load().Versions
}

// EngagementLost reports whether the active posts version's keys were
// lost (Registry.MarkLost): its counts, viewer state and reposts of an
// original are then read from PostgreSQL. Refreshed as Version.
func (l *LiveVersions) EngagementLost() bool {
	l.follow()
	v := l.lostPosts.Load()
	return v != 0 && int(v) == l.cur.Load().Versions.Version(ProjectionPosts)
}

// Active returns the versions in use now with their records (the policy
// each was built with), read together: a reader that takes a version's
// keys from it takes that version's layout too. Refreshed first when
// stale, as Version.
func (l *LiveVersions) Active() Active {
	l.follow()
	return *l.cur.Load()
}

// Active is every projection's active version with its row of
// projection_versions, as read at once.
type Active struct {
	Versions Versions
	Records  []VersionRecord
}

// Record returns projection's record (zero when it has none).
func (a Active) Record(projection string) VersionRecord {
	for _, r := range a.Records {
		if r.Projection == projection {
			return r
		}
	}
	return VersionRecord{}
}

// Refresh reads the Redis registry and, when it lacks a projection, differs
// from the versions in use, or VerifyInterval has passed, takes the
// versions from PostgreSQL and restores the registry from them. On an
// error the versions in use stay.
func (l *LiveVersions) Refresh(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	cached, lost, err := l.reg.cachedAll(ctx, l.rdb)
	if err != nil {
		return err
	}
	l.lostPosts.Store(int64(lost[ProjectionPosts]))
	if cached == l.cur.Load().Versions && time.Now().Before(l.verifyAt) {
		l.markFresh()
		return nil
	}
	return l.resolve(ctx, cached)
}

// resolve takes the versions from PostgreSQL and rewrites the registry
// fields that differ from them (cached is what the registry held).
// Callers hold mu, or own l alone.
func (l *LiveVersions) resolve(ctx context.Context, cached Versions) error {
	recs, err := LoadVersionRecords(ctx, l.db)
	if err != nil {
		return err
	}
	var truth Versions
	for _, r := range recs {
		truth = truth.With(r.Projection, r.Version)
	}
	l.cur.Store(&Active{Versions: truth, Records: recs})
	l.markFresh()
	l.verifyAt = time.Now().Add(l.cfg.VerifyInterval)
	if cached == truth {
		return nil
	}
	wrote, err := l.reg.restore(ctx, l.rdb, cached, truth)
	if err != nil {
		return err
	}
	if wrote && cached == (Versions{}) {
		// The registry was gone. With events in the log, Redis lost the
		// read models under a running system (or was never given them):
		// the posts projection's keys that cannot tell lost from never
		// written are not trusted at this version (LostField).
		var logged bool
		rows, err := l.db.Query(ctx, `SELECT EXISTS (SELECT 1 FROM events)`)
		if err != nil {
			return fmt.Errorf("read whether the event log has events: %w", err)
		}
		for rows.Next() {
			if err := rows.Scan(&logged); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if logged {
			v := truth.Version(ProjectionPosts)
			if err := l.reg.MarkLost(ctx, l.rdb, ProjectionPosts, v); err != nil {
				return err
			}
			l.lostPosts.Store(int64(v))
			l.cfg.Logger.Warn("projection versions: Redis lost the read models under a running system; counts, likes and reposts are read from PostgreSQL until `feed rebuild posts`",
				"posts version", v)
		}
	}
	if wrote && cached == (Versions{}) && truth == DefaultVersions() {
		// A new deployment's first start, or a Redis without the hash while
		// every projection is at version 1: nothing was read wrong.
		l.cfg.Logger.Info("projection versions: wrote the Redis registry from PostgreSQL (every projection at version 1)")
	} else if wrote && !l.switched(cached, truth) {
		l.cfg.Logger.Warn("projection versions: the Redis registry lost or disagreed with PostgreSQL; restored it from PostgreSQL",
			"redis", fmt.Sprintf("%+v", cached), "postgres", fmt.Sprintf("%+v", truth))
	}
	return nil
}

// switched reports whether the registry differs from PostgreSQL only the
// way a switch in progress leaves it (PostgreSQL committed a newer version,
// its mirror to Redis not yet written): nothing worth a warning.
func (l *LiveVersions) switched(cached, truth Versions) bool {
	for _, p := range Projections() {
		if c := cached.Get(p); c == 0 || c > truth.Get(p) {
			return false
		}
	}
	return true
}

// markFresh records that the versions in use were just read.
func (l *LiveVersions) markFresh() {
	l.fresh.Store(l.clock())
	l.waitFailed.Store(false)
}

// refreshBackground runs one refresh a read asked for, bounded by 2 s.
func (l *LiveVersions) refreshBackground(ctx context.Context) {
	defer l.refreshing.Store(false)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	l.refresh(ctx)
}

// refresh runs Refresh for a read (in the background or not): it logs a
// failure and schedules the next refresh an Interval later either way,
// and reports whether it succeeded.
func (l *LiveVersions) refresh(ctx context.Context) bool {
	err := l.Refresh(ctx)
	if err != nil {
		// The old versions stay; try again after the interval. A missing
		// row is worth a warning every time; an unreachable server is
		// seen by every other read anyway.
		level := slog.LevelDebug
		if errors.Is(err, ErrNoVersion) {
			level = slog.LevelWarn
		}
		l.cfg.Logger.Log(ctx, level, "projection versions: refresh", "err", err)
	}
	l.next.Store(l.clock() + int64(l.cfg.Interval))
	return err == nil
}
