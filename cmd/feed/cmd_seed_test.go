package main

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/testkit/testenv"
)

// `feed seed` on a fresh database (no migration applied) migrates first,
// as docs/bench.md runs it: the faster path seeds before CDC exists.
func TestSeedMigratesAFreshDatabase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, testenv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	name := testenv.RandomName("feedtest_")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, testenv.AdminURL()); err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = c.Close(ctx)
		}
	})
	u, err := url.Parse(testenv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	cfg := Config{DatabaseURL: u.String(), Slot: "feed_cdc_" + name, Topic: "feed.events", LagWarnBytes: 1 << 30, CelebrityThreshold: 10_000}

	code, stdout, stderr := runCLI(t, cfg, "seed", "--users", "20", "--avg-follows", "3", "--posts", "30", "--no-slot-check",
		"--end", "2026-12-01T00:00:00Z")
	if code != 0 || !strings.Contains(stdout, "users 20") {
		t.Fatalf("seed on a fresh database: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	c, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var users, posts int
	if err := c.QueryRow(ctx, `SELECT (SELECT count(*) FROM users), (SELECT count(*) FROM events WHERE type LIKE 'post.created.%')`).Scan(&users, &posts); err != nil {
		t.Fatal(err)
	}
	if users != 20 || posts != 30 {
		t.Fatalf("seeded %d users and %d posts, want 20 and 30", users, posts)
	}
}
