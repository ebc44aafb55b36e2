package projections

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

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
	// PollInterval is how often the version registry is read (default 1 s).
	PollInterval time.Duration
}

// Supervisor runs each projector at its projection's active version and
// follows the version registry (docs/rebuild.md): when `feed rebuild`
// switches a projection to a new version, the supervisor drains that
// projector (its offsets are committed) and starts it again with the new
// version's keys and consumer group, within about one PollInterval. The
// other projectors are not interrupted.
type Supervisor struct {
	cfg SupervisorConfig
	pg  Querier
	rdb redis.UniversalClient
	m   *Metrics
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
	return &Supervisor{cfg: cfg, pg: pg, rdb: rdb, m: m}, nil
}

// Run runs every projector until ctx ends (then drains them and returns
// nil) or one fails (then stops the others and returns its error).
func (s *Supervisor) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, n := range s.cfg.Names {
		g.Go(func() error { return s.follow(gctx, n) })
	}
	err := g.Wait()
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
		return nil
	}
	return err
}

// version reads the projection's active version, retrying while Redis is
// unreachable (the projector cannot work without it anyway).
func (s *Supervisor) version(ctx context.Context, name string) (int, error) {
	for {
		v, err := readmodel.LoadVersions(ctx, s.rdb, s.cfg.Projections.Keys.Prefix)
		if err == nil {
			return v.Version(name), nil
		}
		s.cfg.Runner.Logger.Warn("projectors: read versions", "err", err)
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(s.cfg.PollInterval):
		}
	}
}

// follow runs projector name at the active version, restarting it on every
// switch.
func (s *Supervisor) follow(ctx context.Context, name string) error {
	log := s.cfg.Runner.Logger
	v, err := s.version(ctx, name)
	if err != nil {
		return err
	}
	for {
		pcfg := s.cfg.Projections
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
		next, err := s.watch(rctx, name, v, done)
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
		v = next
	}
}

// watch polls the registry until the projection's version differs from v
// (returns it), ctx ends (returns 0), or the runner stops by itself (its
// error).
func (s *Supervisor) watch(ctx context.Context, name string, v int, done chan error) (int, error) {
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
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
		cur, err := readmodel.LoadVersions(ctx, s.rdb, s.cfg.Projections.Keys.Prefix)
		if err != nil {
			continue // transient; the next tick tries again
		}
		if n := cur.Version(name); n != v {
			return n, nil
		}
	}
}
