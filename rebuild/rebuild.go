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
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/internal/service"
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
	// rebuild's goroutine: for tools and tests. Projections that switch
	// together (a threshold change) report as one, their names joined by
	// "+" ("followers+inbox").
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
//
// When Projections' celebrity threshold or band is not the one the active
// followers or inbox version recorded, a rebuild of either (or of all)
// builds both at the new one and switches them together, in one
// transaction (readmodel.ActivateVersions): the two decide both the
// inbox contents (whose posts are pushed) and the celebrity set (whose
// timelines readers pull), and a reader must never take one version's
// pull set with the other's inboxes.
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
	groups, err := r.groups(ctx, names)
	if err != nil {
		return nil, err
	}
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
	for _, g := range groups {
		res, err := r.group(ctx, adm, g, func(clean func(context.Context) error) {
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
		out = append(out, res...)
	}
	wg.Wait()
	_ = r.reg.ClearRebuildInfo(context.WithoutCancel(ctx), r.rdb)
	if cleanErr != nil {
		return out, fmt.Errorf("switched, but cleanup failed (the next rebuild finishes it): %w", cleanErr)
	}
	return out, nil
}

// groups splits names into the sets of projections that switch together:
// one each, but the followers and the inbox projections together when the
// rebuild's celebrity threshold or band is not the one an active version
// of theirs recorded (see Run). The pair takes the place of the first of
// them in names.
func (r *Rebuilder) groups(ctx context.Context, names []string) ([][]string, error) {
	recs, err := readmodel.LoadVersionRecords(ctx, r.pool)
	if err != nil {
		return nil, err
	}
	pol := r.cfg.Projections.Policy().WithDefaults()
	pair := false
	for _, rec := range recs {
		// (0 or not recorded: nothing recorded yet, so nothing to
		// disagree with: the switch records the rebuild's.)
		if (rec.Projection == readmodel.ProjectionInbox || rec.Projection == readmodel.ProjectionFollowers) &&
			(rec.CelebrityThreshold != 0 && rec.CelebrityThreshold != pol.CelebrityThreshold ||
				rec.BandRecorded && rec.CelebrityBand != pol.CelebrityBand) {
			pair = true
		}
	}
	var out [][]string
	paired := false
	for _, n := range names {
		isPair := n == readmodel.ProjectionInbox || n == readmodel.ProjectionFollowers
		switch {
		case pair && isPair && paired:
		case pair && isPair:
			out = append(out, []string{readmodel.ProjectionFollowers, readmodel.ProjectionInbox})
			paired = true
		default:
			out = append(out, []string{n})
		}
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

// pending is one projection of a group being rebuilt.
type pending struct {
	name      string
	cur, next int
	p         projections.Projector
	group     string // the new version's consumer group
	res       *Result
}

// group rebuilds the projections of names up to their switch, which
// writes all of them at once, and hands their cleanups to background. A
// group of several reports its phases under the names joined by "+"
// ("followers+inbox"), with the last one's new version.
func (r *Rebuilder) group(ctx context.Context, adm *admin, names []string, background func(func(context.Context) error)) ([]Result, error) {
	start := time.Now()
	prog := r.cfg.Progress
	label := strings.Join(names, "+")
	// PostgreSQL holds the active versions; the Redis registry is
	// restored from it first, so that readers which lost it follow the
	// same version this rebuild builds on.
	lv, err := readmodel.NewLiveVersions(ctx, readmodel.LiveVersionsConfig{Prefix: r.prefix, Logger: r.cfg.Logger}, r.rdb, r.pool)
	if err != nil {
		return nil, err
	}
	vs := lv.Current()
	ps := make([]*pending, len(names))
	results := make([]Result, len(names))
	next := vs
	for i, name := range names {
		cur := vs.Version(name)
		results[i] = Result{Projection: name, From: cur, To: cur + 1}
		ps[i] = &pending{name: name, cur: cur, next: cur + 1, res: &results[i]}
		next = next.With(name, cur+1)
	}
	last := ps[len(ps)-1].next
	_ = r.reg.SetRebuildInfo(ctx, r.rdb, "started", start.UTC().Format(time.RFC3339))
	r.phase(ctx, label, last, "prepare")

	for _, x := range ps {
		// A run killed before (or during the cleanup after) its switch left
		// keys of versions other than the active one: delete them first.
		dirty, err := r.reg.Dirty(ctx, r.rdb, x.name)
		if err != nil {
			return results, err
		}
		if dirty {
			prog.Printf("%s: deleting keys left by an earlier, interrupted rebuild (keeping version %d)", x.name, x.cur)
			if err := r.reg.Sweep(ctx, r.rdb, x.name, x.cur); err != nil {
				return results, err
			}
		}
		// From here on keys of version next exist until a cleanup ran.
		if err := r.reg.MarkDirty(ctx, r.rdb, x.name, x.next); err != nil {
			return results, fmt.Errorf("mark rebuild: %w", err)
		}
	}

	// T0: every event the builds may miss is at or above these offsets.
	t0, err := adm.endOffsets(ctx, r.cfg.Runner.Topic)
	if err != nil {
		return results, err
	}

	r.phase(ctx, label, last, "build")
	var all []projections.Projector
	for _, x := range ps {
		pcfg := r.cfg.Projections
		// The versions after the switch: x at its new version, the others
		// as they will be (the inbox build reads the followers version's
		// downward crossings, readmodel.Backfilled).
		pcfg.Keys = readmodel.Keys{Prefix: r.prefix, Versions: next}
		built, err := projections.New(pcfg, r.pool, r.rdb, nil, x.name)
		if err != nil {
			return results, err
		}
		x.p = built[0]
		buildStart := time.Now()
		if x.res.Built, x.res.Unit, err = r.build(ctx, x.p, prog, x.next); err != nil {
			return results, fmt.Errorf("build %s version %d: %w", x.name, x.next, err)
		}
		x.res.BuildFor = time.Since(buildStart)
		all = append(all, built...)
	}

	// Catch up from T0 in the new versions' own groups, one consumer for
	// all of them.
	r.phase(ctx, label, last, "catch-up")
	catchStart := time.Now()
	for _, x := range ps {
		x.group = r.cfg.Runner.GroupPrefix + x.p.Group()
		if err := adm.seed(ctx, x.group, t0); err != nil {
			return results, err
		}
	}
	runner, err := projections.NewRunner(r.cfg.Runner, all...)
	if err != nil {
		return results, err
	}
	// The catch-up consumer runs until the handover ends; it outlives a
	// cancellation of ctx only by its drain.
	consumer := service.New("catch-up", runner.Run)
	if err := consumer.Start(context.WithoutCancel(ctx)); err != nil {
		return results, err
	}
	stop := consumer.Stop
	for _, x := range ps {
		if err := r.catchUp(ctx, x.group, consumer, prog, x.name, x.next); err != nil {
			_ = stop()
			return results, err
		}
	}
	for _, x := range ps {
		x.res.CatchUpFor = time.Since(catchStart)
	}
	if r.cfg.Verify != nil {
		r.phase(ctx, label, last, "verify")
		rep, err := r.verify(ctx, next)
		if err != nil {
			_ = stop()
			return results, fmt.Errorf("verify %s: %w", describeNext(ps), err)
		}
		for _, x := range ps {
			x.res.Verify = &rep
		}
		prog.Printf("%s verify: %s", describeNext(ps), rep.Summary())
		if !rep.OK() {
			if !r.cfg.Force {
				_ = stop()
				return results, fmt.Errorf("%w: %s has %d differences, not switched (the active versions stay; the next rebuild deletes the new version's keys; --force switches anyway); the first: %s",
					ErrVerify, describeNext(ps), len(rep.Differences), rep.Differences[0])
			}
			prog.Printf("%s: %d differences, switching anyway (forced)", describeNext(ps), len(rep.Differences))
		}
	}

	// The switch: PostgreSQL first (the truth, with the policy the
	// versions were built with, all of them in one transaction), then its
	// mirror in the Redis registry (one HSET), which readers and
	// projectors follow.
	sw := make([]readmodel.Switch, len(ps))
	for i, x := range ps {
		sw[i] = readmodel.Switch{Projection: x.name, From: x.cur, To: x.next}
	}
	if err := readmodel.ActivateVersions(ctx, r.pool, r.cfg.Projections.Policy(), sw...); err != nil {
		_ = stop()
		return results, fmt.Errorf("switch to %s: %w", describeNext(ps), err)
	}
	if err := r.reg.ActivateAll(context.WithoutCancel(ctx), r.rdb, sw...); err != nil {
		// PostgreSQL switched: readers see it at their next verification
		// against PostgreSQL (LiveVersionsConfig.VerifyInterval).
		r.cfg.Logger.Warn("rebuild: switched in PostgreSQL, but the Redis registry was not updated; readers follow within their verification interval",
			"projection", label, "version", last, "err", err)
	}
	for _, x := range ps {
		x.res.Total = time.Since(start)
		prog.Printf("%s: switched to version %d (build %v, catch-up %v)", x.name, x.next,
			x.res.BuildFor.Round(time.Millisecond), x.res.CatchUpFor.Round(time.Millisecond))
	}
	r.phase(ctx, label, last, "handover")
	select {
	case <-time.After(r.cfg.Handover):
	case <-ctx.Done():
	}
	if err := stop(); err != nil {
		r.cfg.Logger.Warn("rebuild: catch-up consumer", "projection", label, "err", err)
	}

	background(func(ctx context.Context) error {
		r.phase(ctx, label, last, "cleanup")
		select {
		case <-time.After(r.cfg.CleanupDelay):
		case <-ctx.Done():
			return ctx.Err()
		}
		var errs []error
		for _, x := range ps {
			if err := r.cleanup(ctx, adm, x); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
	return results, nil
}

// cleanup deletes x's old version: its keys, once its consumer group is
// empty, and the group.
func (r *Rebuilder) cleanup(ctx context.Context, adm *admin, x *pending) error {
	oldGroup := r.cfg.Runner.GroupPrefix + projections.GroupFor(x.name, x.cur)
	if !adm.waitEmpty(ctx, oldGroup, r.cfg.GroupEmptyTimeout) {
		r.cfg.Logger.Warn("rebuild: consumers of the old group are still running; deleting its keys anyway (restart them: they write keys nobody reads)",
			"group", oldGroup)
	}
	if err := r.reg.Sweep(ctx, r.rdb, x.name, x.next); err != nil {
		return err
	}
	if err := adm.deleteGroup(ctx, oldGroup); err != nil {
		r.cfg.Logger.Warn("rebuild: delete old consumer group", "group", oldGroup, "err", err)
	}
	if err := r.reg.ClearDirty(ctx, r.rdb, x.name); err != nil {
		return fmt.Errorf("unmark rebuild of %s: %w", x.name, err)
	}
	r.cfg.Progress.Printf("%s: deleted version %d", x.name, x.cur)
	return nil
}

// describeNext names the new versions of a group ("followers version 3
// and inbox version 2").
func describeNext(ps []*pending) string {
	parts := make([]string, len(ps))
	for i, x := range ps {
		parts[i] = fmt.Sprintf("%s version %d", x.name, x.next)
	}
	return strings.Join(parts, " and ")
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
	case *projections.Notifications:
		unit = "users"
		n, err = p.BuildNotifications(ctx, r.pool, prog.Add)
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
func (r *Rebuilder) catchUp(ctx context.Context, group string, consumer *service.Service, prog *Progress, name string, next int) error {
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
		case <-consumer.Done():
			err := consumer.Err()
			if err == nil {
				err = errors.New("consumer stopped")
			}
			return fmt.Errorf("catch up %s version %d: %w", name, next, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
