package projections

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
)

// SupervisorConfig configures a Supervisor.
type SupervisorConfig struct {
	// Projections holds the policies; its Keys.Prefix selects the namespace
	// (its Versions are ignored: the registry decides).
	Projections Config
	// Runner configures each projector's consumption.
	Runner RunnerConfig
	// Names are the projectors to run (all of Names when empty).
	Names []string
	// PollInterval is how often the Redis version registry is read
	// (default 1 s).
	PollInterval time.Duration
	// Poison, when set, is counted into the feed_poison_messages gauge
	// every Runner.LagInterval.
	Poison *PoisonQueue
}

// Supervisor runs each projector at its projection's active version and
// follows it (readmodel.LiveVersions: PostgreSQL is the truth, the Redis
// registry its cache, restored from PostgreSQL when lost; docs/rebuild.md):
// when `feed rebuild` switches a projection to a new version, the supervisor drains that
// projector (its offsets are committed) and starts it again with the new
// version's keys, consumer group and recorded policy (an inbox version
// built in another layout or bound runs in it), within about one
// PollInterval. The other projectors are not interrupted.
type Supervisor struct {
	cfg SupervisorConfig
	pg  Querier
	rdb redis.UniversalClient
	m   *Metrics

	// ready is closed once every projector's first runner is running
	// (Ready); waiting counts the projectors not running yet.
	ready   chan struct{}
	waiting atomic.Int32
}

// NewSupervisor returns a supervisor; m may be nil.
func NewSupervisor(cfg SupervisorConfig, pg Querier, rdb redis.UniversalClient, m *Metrics) (*Supervisor, error) {
	if pg == nil || rdb == nil {
		return nil, errors.New("new supervisor: nil PostgreSQL or Redis")
	}
	cfg.PollInterval = cmp.Or(cfg.PollInterval, time.Second)
	if len(cfg.Names) == 0 {
		cfg.Names = Names()
	}
	for _, n := range cfg.Names {
		if _, err := New(cfg.Projections, pg, rdb, nil, n); err != nil {
			return nil, err
		}
	}
	cfg.Runner = cfg.Runner.withDefaults()
	if err := cfg.Runner.Validate(); err != nil {
		return nil, err
	}
	s := &Supervisor{cfg: cfg, pg: pg, rdb: rdb, m: m, ready: make(chan struct{})}
	s.waiting.Store(int32(len(cfg.Names)))
	return s, nil
}

// Ready is closed once every projector's first runner is Running. A Run
// that fails before never closes it.
func (s *Supervisor) Ready() <-chan struct{} { return s.ready }

// projectorRunning counts one projector's first runner running.
func (s *Supervisor) projectorRunning() {
	if s.waiting.Add(-1) == 0 {
		close(s.ready)
	}
}

// Run runs every projector until ctx ends (then drains them and returns
// nil) or one fails (then stops the others and returns its error); it
// returns once every goroutine it started returned. It fails at once when
// PostgreSQL has no active version for a projection
// (readmodel.ErrNoVersion): a projector never guesses version 1. It must
// be called once.
func (s *Supervisor) Run(ctx context.Context) error {
	lv, err := s.versions(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, n := range s.cfg.Names {
		g.Go(func() error { return s.follow(gctx, lv, n) })
	}
	if s.cfg.Poison != nil && s.cfg.Runner.LagInterval > 0 {
		g.Go(func() error {
			s.countPoison(gctx)
			return nil
		})
	}
	err = g.Wait()
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
		return nil
	}
	return err
}

// countPoison refreshes the poison gauge until ctx ends; a failed count
// keeps the last values (and is logged at debug level).
func (s *Supervisor) countPoison(ctx context.Context) {
	t := time.NewTicker(s.cfg.Runner.LagInterval)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		counts, err := s.cfg.Poison.Counts(cctx)
		cancel()
		if err == nil {
			s.m.setPoison(counts)
		} else if ctx.Err() == nil {
			s.cfg.Runner.Logger.Debug("projectors: count the poison queue", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// versions starts following the active versions (PostgreSQL, with the
// Redis registry restored from it), retrying while either server is
// unreachable (the projectors cannot work without them anyway).
func (s *Supervisor) versions(ctx context.Context) (*readmodel.LiveVersions, error) {
	for {
		lv, err := readmodel.NewLiveVersions(ctx, readmodel.LiveVersionsConfig{
			Prefix: s.cfg.Projections.Keys.Prefix, Interval: s.cfg.PollInterval, Logger: s.cfg.Runner.Logger,
		}, s.rdb, s.pg)
		if err == nil {
			return lv, nil
		}
		if errors.Is(err, readmodel.ErrNoVersion) {
			return nil, fmt.Errorf("projectors: %w", err)
		}
		s.cfg.Runner.Logger.Warn("projectors: read versions", "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(s.cfg.PollInterval):
		}
	}
}

// follow runs projector name at the active version, with the policy that
// version was recorded with (policyAt), restarting it on every switch.
func (s *Supervisor) follow(ctx context.Context, lv *readmodel.LiveVersions, name string) error {
	log := s.cfg.Runner.Logger
	var prev readmodel.Policy
	var first sync.Once
	for started := false; ; started = true {
		act := lv.Active()
		v := act.Versions.Version(name)
		pcfg := s.cfg.Projections
		if name == NameInbox {
			// A version an earlier release built in sorted sets: this one
			// cannot write it (`feed rebuild inbox` moves it).
			if err := homefeed.CheckVersion(act.Record(readmodel.ProjectionInbox)); err != nil {
				return fmt.Errorf("projectors: %w", err)
			}
		}
		pol := policyAt(act, name, pcfg.Policy())
		if started && pol != prev {
			log.Info("projectors: the new version has another policy; adopting it", "projector", name, "version", v,
				"from", describePolicy(prev), "to", describePolicy(pol))
		}
		prev = pol
		pcfg = pcfg.WithPolicy(pol)
		pcfg.Keys = readmodel.Keys{Prefix: pcfg.Keys.Prefix, Versions: readmodel.Versions{}.With(name, v)}
		ps, err := New(pcfg, s.pg, s.rdb, s.m, name)
		if err != nil {
			return err
		}
		r, err := NewRunner(s.cfg.Runner, ps...)
		if err != nil {
			return err
		}
		log.Info("projectors: running", "projector", name, "version", v, "group", r.Groups()[0])
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		next, err := s.watch(rctx, lv, name, v, done, r.Running(), func() { first.Do(s.projectorRunning) })
		stop()
		if rerr := <-done; rerr != nil && err == nil {
			err = rerr
		}
		if err != nil {
			return err
		}
		if next == 0 { // ctx ended
			return nil
		}
		log.Info("projectors: version switched; restarting", "projector", name, "from", v, "to", next)
	}
}

// policyAt is the policy projector name runs by at the active version
// act: base with what that version recorded in place (the inbox version's
// threshold, band and bound for the inbox projector, the followers
// version's threshold and band for the followers projector, the
// notifications version's bound for the notifications projector; the
// others use no recorded field).
func policyAt(act readmodel.Active, name string, base readmodel.Policy) readmodel.Policy {
	switch name {
	case NameInbox:
		return act.Record(readmodel.ProjectionInbox).Apply(base)
	case NameFollowers:
		rec := act.Record(readmodel.ProjectionFollowers)
		if t := rec.CelebrityThreshold; t > 0 {
			base.CelebrityThreshold = t
		}
		if rec.BandRecorded {
			base.CelebrityBand = rec.CelebrityBand
		}
	case NameNotifications:
		if m := act.Record(readmodel.ProjectionNotifications).NotificationsMax; m > 0 {
			base.NotificationsMax = m
		}
	}
	return base
}

// describePolicy renders the recorded fields of p for a log line.
func describePolicy(p readmodel.Policy) string {
	p = p.WithDefaults()
	return fmt.Sprintf("inbox max %d, celebrity threshold %d, band %d, notifications max %d", p.InboxMax, p.CelebrityThreshold, p.CelebrityBand, p.NotificationsMax)
}

// watch refreshes the versions every PollInterval until the projection's
// version differs from v (returns it), ctx ends (returns 0), or the runner
// stops by itself (its error).
func (s *Supervisor) watch(ctx context.Context, lv *readmodel.LiveVersions, name string, v int, done chan error, running <-chan struct{}, onRunning func()) (int, error) {
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-running:
			onRunning()
			running = nil
			continue
		case <-ctx.Done():
			return 0, nil
		case err := <-done:
			done <- err // for the caller
			if err == nil {
				err = errors.New("runner stopped")
			}
			return 0, fmt.Errorf("projector %s: %w", name, err)
		case <-t.C:
		}
		if err := lv.Refresh(ctx); err != nil {
			// The projector keeps its version; the next tick tries again.
			if errors.Is(err, readmodel.ErrNoVersion) {
				s.cfg.Runner.Logger.Warn("projectors: read versions", "projector", name, "err", err)
			}
			continue
		}
		if n := lv.Current().Version(name); n != v {
			return n, nil
		}
	}
}
