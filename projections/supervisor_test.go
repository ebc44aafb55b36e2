package projections_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/kafkatest"
	"github.com/feedco/feed/testkit/testenv"
)

// A supervisor whose database has no active version for a projection
// stops at start-up with an error that names it, instead of running that
// projector at version 1.
func TestSupervisorRefusesMissingVersion(t *testing.T) {
	t.Parallel()
	db, r := testenv.NewDB(t), testenv.NewRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := db.Pool.Exec(ctx, `DELETE FROM projection_versions WHERE projection = 'inbox'`); err != nil {
		t.Fatal(err)
	}
	s, err := projections.NewSupervisor(projections.SupervisorConfig{
		Projections: projections.Config{Keys: readmodel.Keys{Prefix: r.Prefix}},
		Runner:      projections.RunnerConfig{Brokers: []string{"127.0.0.1:1"}, Topic: "unused", Logger: testenv.Logger()},
	}, db.Pool, r.Client, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Run(ctx)
	if !errors.Is(err, readmodel.ErrNoVersion) || !strings.Contains(err.Error(), "inbox") {
		t.Fatalf("Run: %v, want ErrNoVersion naming inbox", err)
	}
}

// A supervisor's Ready closes once every projector's runner consumes the
// topic, and Run returns, every goroutine it started done, once stopped.
func TestSupervisorReady(t *testing.T) {
	t.Parallel()
	db, r, b := testenv.NewDB(t), testenv.NewRedis(t), kafkatest.Start(t)
	topic := b.Topic(t, 2)
	s, err := projections.NewSupervisor(projections.SupervisorConfig{
		Projections: projections.Config{Keys: readmodel.Keys{Prefix: r.Prefix}},
		Runner:      projections.RunnerConfig{Brokers: b.Addrs(), Topic: topic, GroupPrefix: topic + ".", Logger: testenv.Logger()},
	}, db.Pool, r.Client, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("Run before Ready: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after the end of its context: %v", err)
	}
}
