// Package service is the one lifecycle of the background components a
// process runs (CDC, the projectors, the HTTP servers, the embedded broker,
// the pprof server, periodic checks): a component's work is a function
// that runs until its context ends and returns only once every goroutine it
// started has returned; a Service starts it (Start), says when it serves
// (Ready), and stops it within a bound (Stop). Nothing runs before Start:
// constructors only build.
//
// Run starts a process's services together, waits until each is ready,
// and stops them all, in reverse order, when the context ends or one of
// them fails.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"
)

// DefaultStopTimeout bounds Stop when New is not given StopTimeout. It is
// longer than the components' own drain bounds (the API's shutdown, CDC's
// flush, the projectors' drain), which they honour before returning.
const DefaultStopTimeout = time.Minute

// ErrStopTimeout is returned by Stop when the component did not return
// within its stop timeout.
var ErrStopTimeout = errors.New("did not stop in time")

// ErrStarted is returned by a second Start.
var ErrStarted = errors.New("already started")

// Service runs one component. Its zero value is not usable; see New.
type Service struct {
	name    string
	run     func(context.Context) error
	readyOn <-chan struct{}
	timeout time.Duration

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	ready   chan struct{}
	done    chan struct{}
	err     error
}

// Option sets a property of a Service.
type Option func(*Service)

// ReadyWhen makes the service ready when ch is closed: the component's own
// signal that it serves (a router running, a listener bound). Without it
// a service is ready once started.
func ReadyWhen(ch <-chan struct{}) Option { return func(s *Service) { s.readyOn = ch } }

// StopTimeout bounds Stop (DefaultStopTimeout otherwise).
func StopTimeout(d time.Duration) Option { return func(s *Service) { s.timeout = d } }

// New returns the service called name that runs run: run must return when
// its context ends, after every goroutine it started returned, with nil
// (or context.Canceled) for a clean stop.
func New(name string, run func(ctx context.Context) error, opts ...Option) *Service {
	s := &Service{name: name, run: run, timeout: DefaultStopTimeout, ready: make(chan struct{}), done: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Name is the service's name.
func (s *Service) Name() string { return s.name }

// Start runs the component in a goroutine until ctx ends or Stop. It
// returns ErrStarted when called twice.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("start %s: %w", s.name, ErrStarted)
	}
	s.started = true
	ctx, s.cancel = context.WithCancel(ctx)
	if s.readyOn == nil {
		close(s.ready)
	}
	go func() {
		defer close(s.done)
		defer s.cancel()
		err := s.run(ctx)
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			err = nil
		}
		s.err = err
	}()
	return nil
}

// Ready is closed when the component serves: at Start, or at its own
// signal (ReadyWhen). A component that fails before it is ready never
// closes it: wait on Done too.
func (s *Service) Ready() <-chan struct{} {
	if s.readyOn != nil {
		return s.readyOn
	}
	return s.ready
}

// Done is closed when the component has returned.
func (s *Service) Done() <-chan struct{} { return s.done }

// Err is the component's error once Done is closed: nil for a clean stop.
func (s *Service) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// Stop cancels the component and waits for it to return, at most its stop
// timeout (then ErrStopTimeout). It returns the component's error; a
// service never started stops at once.
func (s *Service) Stop() error {
	s.mu.Lock()
	started, cancel := s.started, s.cancel
	s.mu.Unlock()
	if !started {
		return nil
	}
	cancel()
	t := time.NewTimer(s.timeout)
	defer t.Stop()
	select {
	case <-s.done:
		return s.err
	case <-t.C:
		return fmt.Errorf("stop %s: %w after %v", s.name, ErrStopTimeout, s.timeout)
	}
}

// Run is a process's services' whole life: it starts them in order,
// each once the one before is ready, logs "<role>: ready", and runs them
// until ctx ends or one fails; then it stops them in reverse order (the
// last started, typically the one taking requests, first), each within
// its stop timeout, and logs the shutdown. A service that returns nil
// before then has finished its work and the others go on. Run returns the
// first failure, named after its service (a stop past its timeout is
// one); an end of ctx is a clean stop. The services' contexts keep ctx's
// values but end only by Stop, so the order holds on a signal too.
func Run(ctx context.Context, log *slog.Logger, role string, svcs ...*Service) error {
	var first error
	fail := func(err error) {
		if first == nil {
			first = err
		}
	}
	base := context.WithoutCancel(ctx)
	started := 0
	for _, s := range svcs {
		if err := s.Start(base); err != nil {
			fail(err)
			break
		}
		started++
		select {
		case <-s.Ready():
		case <-s.Done():
			if err := s.Err(); err != nil {
				fail(fmt.Errorf("%s: %w", s.name, err))
			}
		case <-ctx.Done():
		}
		if first != nil || ctx.Err() != nil {
			break
		}
	}
	if first == nil && ctx.Err() == nil {
		log.Info(role + ": ready")
		first = watch(ctx, log, role, svcs)
	}
	for i := started - 1; i >= 0; i-- {
		s := svcs[i]
		if err := s.Stop(); err != nil {
			if errors.Is(err, ErrStopTimeout) {
				fail(err)
			}
			log.Warn(role+": stopped with an error", "component", s.name, "err", err)
			continue
		}
		log.Debug(role+": stopped", "component", s.name)
	}
	if first != nil {
		log.Error(role+": shut down after a failure", "err", first)
		return first
	}
	log.Info(role + ": shut down")
	return nil
}

// watch waits until ctx ends (nil) or one of svcs fails (its error); a
// service that returns nil is logged and no longer watched.
func watch(ctx context.Context, log *slog.Logger, role string, svcs []*Service) error {
	left := append([]*Service(nil), svcs...)
	for len(left) > 0 {
		cases := make([]reflect.SelectCase, 0, len(left)+1)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
		for _, s := range left {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.Done())})
		}
		i, _, _ := reflect.Select(cases)
		if i == 0 {
			return nil
		}
		s := left[i-1]
		if err := s.Err(); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		log.Debug(role+": finished", "component", s.name)
		left = append(left[:i-1], left[i:]...)
	}
	<-ctx.Done()
	return nil
}
