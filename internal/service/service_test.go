package service

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// blocking runs until its context ends.
func blocking(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestStartReadyStop(t *testing.T) {
	t.Parallel()
	ran := make(chan struct{})
	s := New("x", func(ctx context.Context) error {
		close(ran)
		<-ctx.Done()
		return ctx.Err()
	})
	select {
	case <-ran:
		t.Fatal("ran before Start")
	default:
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start: %v, want ErrStarted", err)
	}
	<-s.Ready()
	<-ran
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v (a canceled run is a clean stop)", err)
	}
	<-s.Done()
	if s.Err() != nil {
		t.Fatalf("Err: %v", s.Err())
	}
}

func TestReadyWhen(t *testing.T) {
	t.Parallel()
	serving := make(chan struct{})
	s := New("x", func(ctx context.Context) error {
		close(serving)
		return blocking(ctx)
	}, ReadyWhen(serving))
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-s.Ready() // closed by the component
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
}

func TestStopIsBounded(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	s := New("stuck", func(context.Context) error {
		<-release // ignores its context
		return nil
	}, StopTimeout(50*time.Millisecond))
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); !errors.Is(err, ErrStopTimeout) {
		t.Fatalf("Stop: %v, want ErrStopTimeout", err)
	}
	close(release)
	<-s.Done()
}

// recorder records the order in which services stop.
type recorder struct {
	mu      sync.Mutex
	stopped []string
}

func (r *recorder) service(name string, opts ...Option) *Service {
	return New(name, func(ctx context.Context) error {
		<-ctx.Done()
		r.mu.Lock()
		r.stopped = append(r.stopped, name)
		r.mu.Unlock()
		return nil
	}, opts...)
}

func TestRunStopsInReverseOrder(t *testing.T) {
	t.Parallel()
	var r recorder
	ctx, cancel := context.WithCancel(context.Background())
	svcs := []*Service{r.service("a"), r.service("b"), r.service("c")}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, quiet(), "test", svcs...) }()
	for _, s := range svcs {
		<-s.Ready()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if want := []string{"c", "b", "a"}; !slices.Equal(r.stopped, want) {
		t.Fatalf("stopped %v, want %v", r.stopped, want)
	}
}

func TestRunStartsEachAfterTheOneBeforeIsReady(t *testing.T) {
	t.Parallel()
	gate, running := make(chan struct{}), make(chan struct{})
	first := New("first", func(ctx context.Context) error {
		close(running)
		return blocking(ctx)
	}, ReadyWhen(gate))
	var r recorder
	second := r.service("second")
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), quiet(), "test", first, second) }()
	<-running
	// first runs but is not ready: Run has not started second, so this
	// Start is the first, and Run's own, once first is ready, is refused.
	if err := second.Start(context.Background()); err != nil {
		t.Fatalf("second started before first was ready: %v", err)
	}
	close(gate)
	if err := <-done; !errors.Is(err, ErrStarted) {
		t.Fatalf("Run: %v, want the second Start refused", err)
	}
	_ = second.Stop()
}

func TestRunReturnsTheFirstFailure(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	var r recorder
	a := r.service("a")
	fail := make(chan struct{})
	b := New("b", func(ctx context.Context) error {
		select {
		case <-fail:
			return boom
		case <-ctx.Done():
			return nil
		}
	})
	finished := New("one-shot", func(context.Context) error { return nil })
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), quiet(), "test", a, finished, b) }()
	<-b.Ready()
	<-finished.Done() // a service that finishes its work does not end the others
	close(fail)
	err := <-done
	if !errors.Is(err, boom) || err.Error() != "b: boom" {
		t.Fatalf("Run: %v, want b: boom", err)
	}
	if !slices.Equal(r.stopped, []string{"a"}) {
		t.Fatalf("stopped %v, want a stopped", r.stopped)
	}
}

func TestRunFailsOnAServiceFailingBeforeReady(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	never := make(chan struct{})
	var r recorder
	a := r.service("a")
	b := New("b", func(context.Context) error { return boom }, ReadyWhen(never))
	c := r.service("c")
	err := Run(context.Background(), quiet(), "test", a, b, c)
	if !errors.Is(err, boom) {
		t.Fatalf("Run: %v, want boom", err)
	}
	if !slices.Equal(r.stopped, []string{"a"}) {
		t.Fatalf("stopped %v, want only a (c never started)", r.stopped)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("c was started: %v", err)
	}
	_ = c.Stop()
}
