package main

import (
	"context"
	"strings"
	"testing"

	"github.com/feedco/feed/testkit/testenv"
)

// `feed migrate` creates CDC's replication slot and its progress row on
// CDC's first start, so a writer started before `feed cdc` has its writes
// streamed; a second run finds the slot and changes nothing; --skip-slot
// leaves it alone.
func TestMigrateCreatesTheSlot(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	slots := func() (n, rows int) {
		t.Helper()
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = $1`, db.Name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM cdc_state`).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		return n, rows
	}
	cfg := Config{DatabaseURL: db.URL, Slot: "feed_cdc_" + db.Name, Topic: "feed.events", LagWarnBytes: 1 << 30}

	code, stdout, stderr := runCLI(t, cfg, "migrate", "--skip-slot")
	if n, rows := slots(); code != 0 || n != 0 || rows != 0 || strings.Contains(stdout, "slot") {
		t.Fatalf("migrate --skip-slot: exit %d, %d slots, %d progress rows, stdout %q stderr %q", code, n, rows, stdout, stderr)
	}
	for run := range 2 {
		code, stdout, stderr := runCLI(t, cfg, "migrate")
		if n, rows := slots(); code != 0 || n != 1 || rows != 1 || !strings.Contains(stdout, "replication slot "+cfg.Slot+" ready") {
			t.Fatalf("migrate (run %d): exit %d, %d slots, %d progress rows, stdout %q stderr %q", run+1, code, n, rows, stdout, stderr)
		}
	}
}
