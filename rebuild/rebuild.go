// Package rebuild rebuilds a projection's read model from scratch, blue/green,
// with no downtime (`feed rebuild NAME`, docs/rebuild.md): it builds the
// next version of the projection's keys beside the live ones, catches the
// new version up with the topic through a new consumer group seeded at
// offsets taken before the build, switches the active version in
// PostgreSQL and mirrors it into the Redis registry (the query side and
// running projectors follow within about a second), and deletes the old
// version's keys.
package rebuild

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/verify"
)

// All is the name that rebuilds every projection, one after the other.
const All = "all"

// ErrUnknown is returned for a projection name that does not exist.
var ErrUnknown = errors.New("unknown projection")

// ErrVerify is returned when the verification of a new version found
// differences: the rebuild did not switch to it.
var ErrVerify = errors.New("the new version differs from the truth")

// Config configures a rebuild. Zero fields take defaults.
type Config struct {
	// Projections holds the policies the live projectors use; its
	// Keys.Prefix selects the namespace (Keys.Versions is ignored).
	Projections projections.Config
	// Runner configures the catch-up consumer: Brokers and Topic are
	// required; GroupPrefix must be the live projectors' (normally "").
	Runner projections.RunnerConfig
	// CatchUpLag: the switch happens once the new group's lag (committed
	// offsets; they are committed every second) is at most this (default
	// 1000). The catch-up consumer keeps running through the switch, so
	// nothing is skipped either way.
	CatchUpLag int64
	// CatchUpTimeout bounds the catch-up (default 10 min).
	CatchUpTimeout time.Duration
	// Handover is how long the catch-up consumer keeps running after the
	// switch, so that running projectors (which poll the registry every
	// second) have joined the new group (default 3 s).
	Handover time.Duration
	// CleanupDelay is how long after the switch the old keys are kept for
	// readers still on the old version (default 3 s; a reader uses a
	// version at most readmodel.LiveVersionsConfig.MaxStale, 2 s, after
	// it was switched away from).
	CleanupDelay time.Duration
	// GroupEmptyTimeout bounds the wait for the old group's consumers to
	// leave before the old keys are deleted (default 1 min).
	GroupEmptyTimeout time.Duration
	// Verify, when set, verifies a sample of users on the new version
	// after the catch-up, before the switch (verify.Run, docs/rebuild.md
	// "Verification before the switch"): a difference refuses the switch
	// (ErrVerify) unless Force. Its Prefix, Versions, Policy, Kafka, Topic
	// and GroupPrefix are set by the rebuild.
	Verify *verify.Config
	// Force switches even when the verification found differences.
	Force bool
	// Progress shows progress (nil: nothing).
	Progress *Progress
	// OnPhase, if set, is called as each phase of a projection's rebuild
	// begins (prepare, build, catch-up, verify, handover, cleanup), on the
	// rebuild's goroutine: for tools and tests.
	OnPhase func(projection, phase string)
	// Logger receives warnings (nil: slog.Default()).
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.CatchUpLag = cmp.Or(c.CatchUpLag, 1000)
	c.CatchUpTimeout = cmp.Or(c.CatchUpTimeout, 10*time.Minute)
	c.Handover = cmp.Or(c.Handover, 3*time.Second)
	c.CleanupDelay = cmp.Or(c.CleanupDelay, 3*time.Second)
	c.GroupEmptyTimeout = cmp.Or(c.GroupEmptyTimeout, time.Minute)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Runner.Logger == nil {
		c.Runner.Logger = c.Logger
	}
	c.Runner.LagInterval = -1
	return c
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case len(c.Runner.Brokers) == 0 || c.Runner.Topic == "":
		return errors.New("rebuild: Kafka brokers and topic are required")
	case c.CatchUpLag < 0:
		return fmt.Errorf("rebuild: catch-up lag %d", c.CatchUpLag)
	}
	return nil
}

// Result describes one projection's rebuild.
type Result struct {
	Projection string
	From, To   int // versions
	// Built counts what the build wrote (posts, authors, users or events).
	Built    int64
	Unit     string
	BuildFor time.Duration
	// CatchUpFor is the time from the start of the catch-up to the switch.
	CatchUpFor time.Duration
	// Total is from the lock to the switch (cleanup runs after).
	Total time.Duration
	// Verify is the verification of the new version before the switch
	// (nil: not verified).
	Verify *verify.Report
}

// Rebuilder runs rebuilds. Safe to reuse; one rebuild at a time per key
// namespace across all processes (an advisory lock in PostgreSQL).
type Rebuilder struct {
	cfg    Config
	pool   *pgxpool.Pool
	rdb    redis.UniversalClient
	prefix string
	reg    readmodel.Registry
}

// New returns a Rebuilder.
func New(cfg Config, pool *pgxpool.Pool, rdb redis.UniversalClient) (*Rebuilder, error) {
	if pool == nil || rdb == nil {
		return nil, errors.New("rebuild: nil PostgreSQL or Redis")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Fail early on bad policies.
	if _, err := projections.New(cfg.Projections, pool, rdb, nil); err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	r := &Rebuilder{cfg: cfg, pool: pool, rdb: rdb, prefix: cfg.Projections.Keys.Prefix,
		reg: readmodel.NewRegistry(cfg.Projections.Keys.Prefix)}
	// The build's counts also go to the rebuild's self-description, for
	// `feed status` in any process (readmodel's projection:rebuild hash).
	r.cfg.Progress = cfg.Progress.Recording(func(stage, unit string, done, total int64) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = r.reg.SetRebuildInfo(ctx, r.rdb, "stage", stage, "unit", unit, "done", done, "total", total,
			"updated", time.Now().UTC().Format(time.RFC3339))
	})
	return r, nil
}

// Names returns the projections name stands for, or ErrUnknown.
func Names(name string) ([]string, error) {
	if name == All {
		return readmodel.Projections(), nil
	}
	if slices.Contains(readmodel.Projections(), name) {
		return []string{name}, nil
	}
	return nil, fmt.Errorf("%w %q (want one of %v or %s)", ErrUnknown, name, readmodel.Projections(), All)
}

// Run rebuilds name (a projection or "all"). It returns ErrBusy (wrapped,
// with what the running rebuild says about itself) when another rebuild of
// the namespace is running. Cancelling ctx stops it: before a switch the
// live version is untouched and the next run starts over; after a switch
// the next run finishes the cleanup.
func (r *Rebuilder) Run(ctx context.Context, name string) ([]Result, error) {
	names, err := Names(name)
	if err != nil {
		return nil, err
	}
	l, err := acquire(ctx, r.pool, r.prefix)
	if errors.Is(err, ErrBusy) {
		info, _ := r.reg.RebuildInfo(ctx, r.rdb)
		return nil, fmt.Errorf("%w (%s)", ErrBusy, describe(info))
	}
	if err != nil {
		return nil, err
	}
	defer l.release(ctx)
	adm, err := newAdmin(r.cfg.Runner.Conn())
	if err != nil {
		return nil, err
	}
	defer adm.close()

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		cleanErr error
	)
	defer wg.Wait() // cleanups finish before the lock is released
	var out []Result
	for _, n := range names {
		res, err := r.one(ctx, adm, n, func(clean func(context.Context) error) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := clean(ctx); err != nil {
					mu.Lock()
					cleanErr = errors.Join(cleanErr, err)
					mu.Unlock()
				}
			}()
		})
		if err != nil {
			return out, err
		}
		out = append(out, res)
	}
	wg.Wait()
	_ = r.reg.ClearRebuildInfo(context.WithoutCancel(ctx), r.rdb)
	if cleanErr != nil {
		return out, fmt.Errorf("switched, but cleanup failed (the next rebuild finishes it): %w", cleanErr)
	}
	return out, nil
}

// describe renders the running rebuild's self-description.
func describe(info map[string]string) string {
	if len(info) == 0 {
		return "no details recorded"
	}
	return fmt.Sprintf("%s to version %s, phase %s, started %s", info["projection"], info["version"], info["phase"], info["started"])
}

// phase records what the rebuild is doing, for `feed status`; the
// counts of the previous phase's stages and its catch-up lag are cleared.
func (r *Rebuilder) phase(ctx context.Context, name string, version int, phase string) {
	_ = r.reg.SetRebuildInfo(ctx, r.rdb, "projection", name, "version", version, "phase", phase,
		"stage", "", "unit", "", "done", 0, "total", 0, "lag", -1,
		"updated", time.Now().UTC().Format(time.RFC3339))
	if r.cfg.OnPhase != nil {
		r.cfg.OnPhase(name, phase)
	}
}

// one rebuilds one projection up to the switch and hands its cleanup to
// background.
func (r *Rebuilder) one(ctx context.Context, adm *admin, name string, background func(func(context.Context) error)) (Result, error) {
	start := time.Now()
	prog := r.cfg.Progress
	// PostgreSQL holds the active versions; the Redis registry is
	// restored from it first, so that readers which lost it follow the
	// same version this rebuild builds on.
	lv, err := readmodel.NewLiveVersions(ctx, readmodel.LiveVersionsConfig{Prefix: r.prefix, Logger: r.cfg.Logger}, r.rdb, r.pool)
	if err != nil {
		return Result{}, err
	}
	vs := lv.Current()
	cur := vs.Version(name)
	next := cur + 1
	res := Result{Projection: name, From: cur, To: next}
	_ = r.reg.SetRebuildInfo(ctx, r.rdb, "started", start.UTC().Format(time.RFC3339))
	r.phase(ctx, name, next, "prepare")

	// A run killed before (or during the cleanup after) its switch left
	// keys of versions other than the active one: delete them first.
	dirty, err := r.reg.Dirty(ctx, r.rdb, name)
	if err != nil {
		return res, err
	}
	if dirty {
		prog.Printf("%s: deleting keys left by an earlier, interrupted rebuild (keeping version %d)", name, cur)
		if err := r.reg.Sweep(ctx, r.rdb, name, cur); err != nil {
			return res, err
		}
	}
	// From here on keys of version next exist until a cleanup ran.
	if err := r.reg.MarkDirty(ctx, r.rdb, name, next); err != nil {
		return res, fmt.Errorf("mark rebuild: %w", err)
	}

	// T0: every event the build may miss is at or above these offsets.
	t0, err := adm.endOffsets(ctx, r.cfg.Runner.Topic)
	if err != nil {
		return res, err
	}

	pcfg := r.cfg.Projections
	pcfg.Keys = readmodel.Keys{Prefix: r.prefix, Versions: readmodel.Versions{}.With(name, next)}
	ps, err := projections.New(pcfg, r.pool, r.rdb, nil, name)
	if err != nil {
		return res, err
	}
	r.phase(ctx, name, next, "build")
	buildStart := time.Now()
	if res.Built, res.Unit, err = r.build(ctx, ps[0], prog, next); err != nil {
		return res, fmt.Errorf("build %s version %d: %w", name, next, err)
	}
	res.BuildFor = time.Since(buildStart)

	// Catch up from T0 in the new version's own group.
	r.phase(ctx, name, next, "catch-up")
	catchStart := time.Now()
	group := r.cfg.Runner.GroupPrefix + ps[0].Group()
	if err := adm.seed(ctx, group, t0); err != nil {
		return res, err
	}
	runner, err := projections.NewRunner(r.cfg.Runner, ps...)
	if err != nil {
		return res, err
	}
	rctx, stopRunner := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- runner.Run(rctx) }()
	stop := func() error {
		stopRunner()
		return <-done
	}
	if err := r.catchUp(ctx, group, done, prog, name, next); err != nil {
		_ = stop()
		return res, err
	}
	res.CatchUpFor = time.Since(catchStart)
	if r.cfg.Verify != nil {
		r.phase(ctx, name, next, "verify")
		rep, err := r.verify(ctx, vs.With(name, next))
		if err != nil {
			_ = stop()
			return res, fmt.Errorf("verify %s version %d: %w", name, next, err)
		}
		res.Verify = &rep
		prog.Printf("%s v%d verify: %s", name, next, rep.Summary())
		if !rep.OK() {
			if !r.cfg.Force {
				_ = stop()
				return res, fmt.Errorf("%w: %s version %d has %d differences, not switched (version %d stays active; the next rebuild deletes version %d's keys; --force switches anyway); the first: %s",
					ErrVerify, name, next, len(rep.Differences), cur, next, rep.Differences[0])
			}
			prog.Printf("%s v%d: %d differences, switching anyway (forced)", name, next, len(rep.Differences))
		}
	}

	// The switch: PostgreSQL first (the truth, with the policy the
	// version was built with), then its mirror in the Redis registry,
	// which readers and projectors follow.
	if err := readmodel.ActivateVersion(ctx, r.pool, name, cur, next, r.cfg.Projections.Policy()); err != nil {
		_ = stop()
		return res, fmt.Errorf("switch %s to version %d: %w", name, next, err)
	}
	if err := r.reg.Activate(context.WithoutCancel(ctx), r.rdb, name, next); err != nil {
		// PostgreSQL switched: readers see it at their next verification
		// against PostgreSQL (LiveVersionsConfig.VerifyInterval).
		r.cfg.Logger.Warn("rebuild: switched in PostgreSQL, but the Redis registry was not updated; readers follow within their verification interval",
			"projection", name, "version", next, "err", err)
	}
	res.Total = time.Since(start)
	prog.Printf("%s: switched to version %d (build %v, catch-up %v)", name, next,
		res.BuildFor.Round(time.Millisecond), res.CatchUpFor.Round(time.Millisecond))
	r.phase(ctx, name, next, "handover")
	select {
	case <-time.After(r.cfg.Handover):
	case <-ctx.Done():
	}
	if err := stop(); err != nil {
		r.cfg.Logger.Warn("rebuild: catch-up consumer", "projection", name, "err", err)
	}

	oldGroup := r.cfg.Runner.GroupPrefix + projections.GroupFor(name, cur)
	background(func(ctx context.Context) error {
		r.phase(ctx, name, next, "cleanup")
		select {
		case <-time.After(r.cfg.CleanupDelay):
		case <-ctx.Done():
			return ctx.Err()
		}
		if !adm.waitEmpty(ctx, oldGroup, r.cfg.GroupEmptyTimeout) {
			r.cfg.Logger.Warn("rebuild: consumers of the old group are still running; deleting its keys anyway (restart them: they write keys nobody reads)",
				"group", oldGroup)
		}
		if err := r.reg.Sweep(ctx, r.rdb, name, next); err != nil {
			return err
		}
		if err := adm.deleteGroup(ctx, oldGroup); err != nil {
			r.cfg.Logger.Warn("rebuild: delete old consumer group", "group", oldGroup, "err", err)
		}
		if err := r.reg.ClearDirty(ctx, r.rdb, name); err != nil {
			return fmt.Errorf("unmark rebuild of %s: %w", name, err)
		}
		prog.Printf("%s: deleted version %d", name, cur)
		return nil
	})
	return res, nil
}

// verify runs the verification on versions vs (the active ones with the
// new one) and the policy the new version is built with.
func (r *Rebuilder) verify(ctx context.Context, vs readmodel.Versions) (verify.Report, error) {
	vc := *r.cfg.Verify
	vc.Prefix = r.prefix
	vc.Versions = vs
	vc.Policy = r.cfg.Projections.Policy()
	vc.Kafka, vc.Topic, vc.GroupPrefix = r.cfg.Runner.Conn(), r.cfg.Runner.Topic, r.cfg.Runner.GroupPrefix
	if vc.Logger == nil {
		vc.Logger = r.cfg.Logger
	}
	return verify.Run(ctx, vc, r.pool, r.rdb)
}

// build writes the projection's next version.
func (r *Rebuilder) build(ctx context.Context, p projections.Projector, prog *Progress, next int) (int64, string, error) {
	label := fmt.Sprintf("%s v%d build", p.Name(), next)
	count := func(q string, args ...any) int64 {
		var n int64
		_ = r.pool.QueryRow(ctx, q, args...).Scan(&n)
		return n
	}
	var (
		n    int64
		unit string
		err  error
	)
	switch p := p.(type) {
	case *projections.Posts:
		unit = "posts"
		prog.Start(label, unit, count(`SELECT count(*) FROM posts`))
		n, err = p.BuildPosts(ctx, r.pool, prog.Add)
	case *projections.Timelines:
		unit = "authors"
		prog.Start(label, unit, count(`SELECT count(*) FROM users`))
		n, err = p.BuildTimelines(ctx, r.pool, prog.Add)
	case *projections.Inbox:
		unit = "active users"
		n, err = p.BuildInboxes(ctx, r.pool, stages{prog, label})
	case *projections.Followers:
		unit = "follow events"
		var horizon uint64
		if horizon, err = r.startHorizon(ctx); err != nil {
			return 0, unit, err
		}
		n, err = p.BuildFollowers(ctx, r.pool, horizon, stages{prog, label})
	default:
		return 0, "", fmt.Errorf("no build for %T", p)
	}
	if err == nil {
		prog.Finish()
	}
	return n, unit, err
}

// stages shows each stage of a build as a phase of the progress display
// ("inbox v2 build: read posts", then "... write inboxes").
type stages struct {
	prog  *Progress
	label string
}

func (s stages) Stage(name, unit string, total int64) {
	if s.prog.Started() {
		s.prog.Finish()
	}
	s.prog.Start(s.label+": "+name, unit, total)
}

func (s stages) Add(n int) { s.prog.Add(n) }

// catchUp waits until the group's lag is at most CatchUpLag.
func (r *Rebuilder) catchUp(ctx context.Context, group string, done chan error, prog *Progress, name string, next int) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CatchUpTimeout)
	defer cancel()
	var told time.Time
	for {
		lags, err := projections.ConsumerLag(ctx, r.cfg.Runner.Conn(), r.cfg.Runner.Topic, []string{group})
		if err == nil {
			lag := lags[group]
			_ = r.reg.SetRebuildInfo(ctx, r.rdb, "lag", lag, "updated", time.Now().UTC().Format(time.RFC3339))
			if time.Since(told) >= 2*time.Second || lag <= r.cfg.CatchUpLag {
				prog.Printf("%s v%d catch-up: %d messages behind", name, next, lag)
				told = time.Now()
			}
			if lag <= r.cfg.CatchUpLag {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("catch up %s version %d: %w", name, next, ctx.Err())
		case err := <-done:
			if err == nil {
				err = errors.New("consumer stopped")
			}
			done <- err
			return fmt.Errorf("catch up %s version %d: %w", name, next, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
