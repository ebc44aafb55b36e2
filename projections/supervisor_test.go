package projections_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
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
