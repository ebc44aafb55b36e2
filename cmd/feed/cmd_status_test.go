package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/feedco/feed/internal/testenv"
	"github.com/feedco/feed/readmodel"
)

// The CDC section of `feed status` says when the slot is missing, and
// otherwise shows it inactive (no CDC running) with its lag and the
// progress not yet recorded.
func TestCDCStatusSection(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	a := &App{Cfg: Config{Slot: "feed_cdc_" + db.Name, Topic: "feed.events", LagWarnBytes: 1 << 30}, Pool: db.Pool}
	var out bytes.Buffer
	if err := printCDCStatus(ctx, a, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "missing") {
		t.Fatalf("no slot yet:\n%s", out.String())
	}
	if _, err := db.Pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, a.Cfg.Slot); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := printCDCStatus(ctx, a, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"INACTIVE", "confirmed LSN", " bytes, ", "none recorded yet"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("want %q in:\n%s", want, out.String())
		}
	}
}

// The projections section of `feed status` shows the active versions from
// PostgreSQL (this database), whatever the Redis registry holds.
func TestProjectionStatusSectionReadsPostgreSQL(t *testing.T) {
	t.Parallel()
	db, r := testenv.NewDB(t), testenv.NewRedis(t)
	ctx := context.Background()
	if err := readmodel.ActivateVersion(ctx, db.Pool, readmodel.ProjectionTimelines, 1, 2, readmodel.Policy{}); err != nil {
		t.Fatal(err)
	}
	a := &App{Cfg: Config{Topic: "feed.events", KafkaAddr: "127.0.0.1:1"}, Pool: db.Pool, Redis: r.Client}
	var out bytes.Buffer
	_ = printProjectionStatus(ctx, a, &out) // the lag is unknown without Kafka
	for _, want := range []string{"timelines  v2 ", "feed.projection.timelines.v2", "posts      v1 "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("want %q in:\n%s", want, out.String())
		}
	}
}
