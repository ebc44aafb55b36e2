package migrations_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/feedco/feed/migrations"
	"github.com/feedco/feed/testkit/testenv"
)

// Versions may have gaps (a number reserved by a change written
// elsewhere); Check reports any embedded version the database lacks, also
// one below the newest applied.
func TestVersionGapsAndCheck(t *testing.T) {
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Version <= all[i-1].Version {
			t.Fatalf("versions out of order: %d after %d", all[i].Version, all[i-1].Version)
		}
	}
	db := testenv.NewDB(t) // migrated with Up
	ctx := context.Background()
	if err := migrations.Check(ctx, db.Pool); err != nil {
		t.Fatalf("check after Up: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, `DELETE FROM schema_migrations WHERE version = $1`, all[0].Version); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Check(ctx, db.Pool); !errors.Is(err, migrations.ErrPending) {
		t.Fatalf("check with version %d missing below the newest: %v, want ErrPending", all[0].Version, err)
	}
}

// Migration 008 records the sorted set for the inbox version of a
// deployment that has already run (here: a recorded policy, or an event
// in the log) with no layout recorded, so it stays on sorted sets when
// packed became the default; a fresh database keeps NULL, for its first
// process to record its own.
func TestInboxLayoutOfRunningDeployments(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, setup string
		want        *string
	}{
		{"fresh", ``, nil},
		{"policy recorded", `UPDATE projection_versions SET celebrity_threshold = 10000, inbox_max = 500`, ptr("zset")},
		{"events", `INSERT INTO events (event_id, stream_id, stream_version, type, payload)
			VALUES (gen_random_uuid(), 'user-1', 1, 'user.registered.v1', '{"userId":"1","name":"a"}')`, ptr("zset")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := testenv.NewDB(t)
			exec := func(sql string) {
				t.Helper()
				if sql == "" {
					return
				}
				if _, err := db.Pool.Exec(ctx, sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			// The database as migration 007 left it.
			exec(`UPDATE projection_versions SET inbox_layout = NULL`)
			exec(`DELETE FROM schema_migrations WHERE version = 8`)
			exec(tc.setup)
			if _, err := migrations.Up(ctx, db.Pool); err != nil {
				t.Fatal(err)
			}
			var got *string
			if err := db.Pool.QueryRow(ctx, `SELECT inbox_layout FROM projection_versions WHERE projection = 'inbox'`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Fatalf("inbox layout after migration 008: %v, want %v", deref(got), deref(tc.want))
			}
		})
	}
}

func ptr(s string) *string { return &s }

func deref(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}

// A migration marked to run outside a transaction builds the event log's
// follow index concurrently; when such a build was interrupted, its index
// is left invalid, and the next Up drops and builds it again instead of
// recording the migration over it.
func TestNoTxMigrationRedoesInvalidIndex(t *testing.T) {
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	var m migrations.Migration
	for _, x := range all {
		if x.Name == "events_followee_index" {
			m = x
		}
	}
	if !m.NoTx {
		t.Fatalf("migration %03d_events_followee_index: NoTx false, want true", m.Version)
	}
	db := testenv.NewDB(t)
	ctx := context.Background()
	valid := func() (exists, valid bool) {
		t.Helper()
		err := db.Pool.QueryRow(ctx, `SELECT count(*) > 0, coalesce(bool_and(indisvalid), false) FROM pg_index
			WHERE indexrelid = to_regclass('events_followee_position_idx')`).Scan(&exists, &valid)
		if err != nil {
			t.Fatal(err)
		}
		return exists, valid
	}
	if e, v := valid(); !e || !v {
		t.Fatalf("after Up: index exists %v, valid %v", e, v)
	}
	// What an interrupted CREATE INDEX CONCURRENTLY leaves: the index,
	// invalid, and the migration not recorded.
	if _, err := db.Pool.Exec(ctx, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'events_followee_position_idx'::regclass`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `DELETE FROM schema_migrations WHERE version = $1`, m.Version); err != nil {
		t.Fatal(err)
	}
	applied, err := migrations.Up(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 1 || applied[0] != m.Version {
		t.Fatalf("Up applied %v, want [%d]", applied, m.Version)
	}
	if e, v := valid(); !e || !v {
		t.Fatalf("after the second Up: index exists %v, valid %v", e, v)
	}
	// Run again over a valid index (a crash after the build, before the
	// record): a no-op that records it.
	if _, err := db.Pool.Exec(ctx, `DELETE FROM schema_migrations WHERE version = $1`, m.Version); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Up(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Check(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
}

// Migration 016 lowers follows' autovacuum thresholds, so that the
// follower-list loads stay index-only under follow churn.
func TestFollowsAutovacuumThresholds(t *testing.T) {
	db := testenv.NewDB(t)
	var opts []string
	if err := db.Pool.QueryRow(context.Background(), `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = 'follows'::regclass`).Scan(&opts); err != nil {
		t.Fatal(err)
	}
	want := []string{"autovacuum_vacuum_scale_factor=0.001", "autovacuum_vacuum_threshold=1000",
		"autovacuum_vacuum_insert_scale_factor=0.001", "autovacuum_vacuum_insert_threshold=1000"}
	if !slices.Equal(opts, want) {
		t.Fatalf("follows' reloptions %v, want %v", opts, want)
	}
}
