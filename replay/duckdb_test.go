package replay

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// duckdb runs SQL statements in DuckDB (npm's @duckdb/node-api under
// tools/duckdb, which scripts/prepare.sh installs) and returns each one's
// rows. Without node or the package it skips, except in CI (CI set),
// where it fails: the suite must run the analysts' queries there.
func duckdb(t *testing.T, stmts ...string) [][]map[string]any {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "tools", "duckdb"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "@duckdb", "node-api"))
	}
	if err != nil {
		msg := "DuckDB is not installed (node and npm's @duckdb/node-api under tools/duckdb; run scripts/prepare.sh): " + err.Error()
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	out, err := exec.CommandContext(context.Background(), node, append([]string{filepath.Join(dir, "query.mjs")}, stmts...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("duckdb: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(stmts) {
		t.Fatalf("duckdb: %d results for %d statements:\n%s", len(lines), len(stmts), out)
	}
	res := make([][]map[string]any, len(lines))
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &res[i]); err != nil {
			t.Fatalf("duckdb result %q: %v", l, err)
		}
	}
	return res
}

// TestDuckDBReadsExports runs the DuckDB queries of docs/replay.md and
// the README against real `feed events` output: a Parquet export partitioned by day
// and type, read with its typed columns (position BIGINT, recorded_at
// TIMESTAMP WITH TIME ZONE, payload JSON) and its partition columns, and
// a JSONL export read with the published schema's types.
func TestDuckDBReadsExports(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dir := t.TempDir()
	parts := filepath.Join(dir, "events")
	w, err := NewPartitionedWriter(parts, Parquet, false, []PartitionKey{ByDay, ByType})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Copy(context.Background(), b.pg(t, Filter{}), w, 0); err != nil {
		t.Fatal(err)
	}
	jsonl := filepath.Join(dir, "events.jsonl")
	if err := os.WriteFile(jsonl, run(t, b.pg(t, Filter{}), JSONL, false, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(parts, "day=2026-11-30", "type=post.created.v1", "part-00000.parquet")); err != nil {
		t.Fatalf("the Hive-style layout: %v", err)
	}

	pq := "read_parquet('" + parts + "/**/*.parquet', hive_partitioning = true)"
	js := "read_json('" + jsonl + "', format = 'newline_delimited', columns = {" +
		"eventId: 'UUID', position: 'BIGINT', streamId: 'VARCHAR', streamVersion: 'BIGINT', type: 'VARCHAR', " +
		"payload: 'JSON', metadata: 'JSON', recordedAt: 'TIMESTAMPTZ', audienceKey: 'BIGINT'})"
	res := duckdb(t,
		"SELECT column_name, column_type FROM (DESCRIBE SELECT position, recorded_at, payload, day, type FROM "+pq+")",
		"SELECT type, day::VARCHAR AS day, count(*) AS events FROM "+pq+" GROUP BY ALL ORDER BY type",
		"SELECT payload->>'authorId' AS author, count(*) AS posts FROM "+pq+
			" WHERE type = 'post.created.v1' GROUP BY ALL ORDER BY posts DESC, author",
		"SELECT column_name, column_type FROM (DESCRIBE SELECT position, recordedAt, payload, audienceKey FROM "+js+")",
		"SELECT audienceKey AS author, count(*) AS posts FROM "+js+
			" WHERE type = 'post.created.v1' GROUP BY ALL ORDER BY posts DESC, author",
		"SELECT date_trunc('day', recordedAt) = TIMESTAMPTZ '2026-11-30 00:00:00+00' AS utc_day, count(*) AS events FROM "+js+" GROUP BY ALL",
		// The README's.
		"SELECT type, count(*) AS n FROM read_json_auto('"+jsonl+"') GROUP BY type ORDER BY type",
		"SELECT day::VARCHAR AS day, type, count(*) AS n FROM "+pq+" GROUP BY ALL ORDER BY ALL",
	)
	check := func(i int, want []map[string]any) {
		t.Helper()
		if !reflect.DeepEqual(res[i], want) {
			t.Errorf("query %d: got %v, want %v", i, res[i], want)
		}
	}
	check(0, []map[string]any{
		{"column_name": "position", "column_type": "BIGINT"},
		{"column_name": "recorded_at", "column_type": "TIMESTAMP WITH TIME ZONE"},
		{"column_name": "payload", "column_type": "JSON"},
		{"column_name": "day", "column_type": "DATE"},
		{"column_name": "type", "column_type": "VARCHAR"},
	})
	check(1, []map[string]any{
		{"type": "post.created.v1", "day": "2026-11-30", "events": "4"},
		{"type": "post.deleted.v1", "day": "2026-11-30", "events": "1"},
		{"type": "post.edited.v1", "day": "2026-11-30", "events": "1"},
		{"type": "user.followed.v1", "day": "2026-11-30", "events": "3"},
		{"type": "user.registered.v1", "day": "2026-11-30", "events": "3"},
		{"type": "user.unfollowed.v1", "day": "2026-11-30", "events": "1"},
	})
	check(2, []map[string]any{{"author": "1", "posts": "2"}, {"author": "2", "posts": "1"}, {"author": "3", "posts": "1"}})
	check(3, []map[string]any{
		{"column_name": "position", "column_type": "BIGINT"},
		{"column_name": "recordedAt", "column_type": "TIMESTAMP WITH TIME ZONE"},
		{"column_name": "payload", "column_type": "JSON"},
		{"column_name": "audienceKey", "column_type": "BIGINT"},
	})
	check(4, []map[string]any{{"author": "1", "posts": "2"}, {"author": "2", "posts": "1"}, {"author": "3", "posts": "1"}})
	check(5, []map[string]any{{"utc_day": true, "events": "13"}})
	perType := []map[string]any{}
	for _, r := range res[1] {
		perType = append(perType, map[string]any{"type": r["type"], "n": r["events"]})
	}
	check(6, perType)
	perDay := []map[string]any{}
	for _, r := range res[1] {
		perDay = append(perDay, map[string]any{"day": r["day"], "type": r["type"], "n": r["events"]})
	}
	check(7, perDay)
}
