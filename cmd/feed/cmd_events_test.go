package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/feedco/feed/testkit/testenv"
)

// TestEventsCommand runs `feed events` in-process over a database holding
// a few events: output, empty matches and exit-2 errors.
func TestEventsCommand(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	for i, q := range []string{
		`('00000000-0000-4000-8000-000000000001', 'user-1', 1, 'user.registered.v1', '{"userId":"1","name":"ada"}', '2026-11-30T09:41:12Z')`,
		`('00000000-0000-4000-8000-000000000002', 'user-2', 1, 'user.registered.v1', '{"userId":"2","name":"bob"}', '2026-11-30T09:41:13Z')`,
		`('00000000-0000-4000-8000-000000000003', 'post-9', 1, 'post.created.v1', '{"postId":"9","authorId":"1","content":"hi","createdAt":"2026-11-30T09:41:14Z","authorFollowers":0}', '2026-11-30T09:41:14Z')`,
	} {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO events (event_id, stream_id, stream_version, type, payload, recorded_at) VALUES `+q); err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
	}
	cfg := Config{DatabaseURL: db.URL, Topic: "feed.events", KafkaAddr: "127.0.0.1:1"}
	run := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		code := execute(cctx, append([]string{"events"}, args...), &out, &errb, func() (Config, error) { return cfg, nil })
		return out.String(), errb.String(), code
	}

	out, stderr, code := run("--author", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := `{"eventId":"00000000-0000-4000-8000-000000000001","position":"1","streamId":"user-1","streamVersion":1,"type":"user.registered.v1","payload":{"name":"ada","userId":"1"},"metadata":{},"recordedAt":"2026-11-30T09:41:12Z","audienceKey":"1"}
{"eventId":"00000000-0000-4000-8000-000000000003","position":"3","streamId":"post-9","streamVersion":1,"type":"post.created.v1","payload":{"postId":"9","content":"hi","authorId":"1","createdAt":"2026-11-30T09:41:14Z","authorFollowers":0},"metadata":{},"recordedAt":"2026-11-30T09:41:14Z","audienceKey":"1"}
`
	if out != want {
		t.Errorf("--author 1:\n got %s\nwant %s", out, want)
	}
	if !strings.HasPrefix(stderr, "events: 2 events in ") {
		t.Errorf("stderr %q: want the count and rate", stderr)
	}

	out, stderr, code = run("--format", "csv", "--type", "user.registered.v1", "--from", "2", "--to", "2")
	wantCSV := "position,event_id,stream_id,stream_version,type,recorded_at,audience_key,correlation_id,causation_id,actor,payload\n" +
		`2,00000000-0000-4000-8000-000000000002,user-2,1,user.registered.v1,2026-11-30T09:41:13Z,2,,,,"{""name"":""bob"",""userId"":""2""}"` + "\n"
	if code != 0 || out != wantCSV {
		t.Errorf("csv: exit %d %s\n got %q\nwant %q", code, stderr, out, wantCSV)
	}

	// A filter that matches nothing prints nothing and succeeds.
	for _, args := range [][]string{{"--author", "42"}, {"--stream", "nope"}, {"--from", "2030-01-01T00:00:00Z"}, {"--format", "csv", "--type", "user.unfollowed.v1"}} {
		out, stderr, code := run(args...)
		if code != 0 || out != "" {
			t.Errorf("%v: out %q exit %d %s, want nothing and no error", args, out, code, stderr)
		}
	}

	// A checkpointed run stopped by its limit, then a run resumed from
	// its token: together what one run prints.
	ckpt := t.TempDir() + "/ckpt"
	all, _, _ := run()
	first, stderr, code := run("--checkpoint", ckpt, "--limit", "2")
	tok, err := os.ReadFile(ckpt)
	if code != 0 || err != nil || !strings.HasPrefix(string(tok), "pg1.") {
		t.Fatalf("--checkpoint: exit %d %s, token %q %v", code, stderr, tok, err)
	}
	rest, stderr, code := run("--resume", string(tok))
	if code != 0 || first+rest != all || strings.Count(all, "\n") != 3 {
		t.Fatalf("--resume: exit %d %s\n%s+\n%s\nwant\n%s", code, stderr, first, rest, all)
	}
	if again, _, _ := run("--resume", string(tok), "--checkpoint", ckpt); again != rest {
		t.Fatalf("a second resume from the same token printed %q, want %q", again, rest)
	}
	if tok2, _ := os.ReadFile(ckpt); string(tok2) == string(tok) {
		t.Fatalf("the resumed run did not move the token on (%s)", tok2)
	}
	if none, _, code := run("--resume", mustRead(t, ckpt)); code != 0 || none != "" {
		t.Fatalf("resuming at the end printed %q (exit %d)", none, code)
	}
	if pq, _, code := run("--format", "parquet"); code != 0 || !strings.HasPrefix(pq, "PAR1") {
		t.Fatalf("--format parquet: exit %d, %d bytes", code, len(pq))
	}
	// Partitioned into a directory: nothing on stdout, one file per type.
	dir := t.TempDir() + "/events"
	if out, stderr, code := run("--format", "parquet", "--partition-by", "type", "--output", dir); code != 0 || out != "" {
		t.Fatalf("--partition-by type: exit %d %s, out %q", code, stderr, out)
	}
	if files, _ := filepath.Glob(dir + "/type=*/part-00000.parquet"); len(files) == 0 {
		t.Fatalf("--partition-by type wrote no type=*/part-00000.parquet under %s", dir)
	}

	// Bad filters and flags: usage errors (exit 2), nothing printed.
	for _, args := range [][]string{
		{"--from", "yesterday"},
		{"--to", "1/zz"},
		{"--from", "16/B374D848"}, // an LSN on the PostgreSQL source
		{"--with-lsn"},
		{"--type", "post.made.v1"},
		{"--author", "bob"},
		{"--author", "0"},
		{"--limit", "-1"},
		{"--from", "5", "--to", "2"},
		{"--follow", "--to", "3"},
		{"--source", "mysql"},
		{"--format", "xml"},
		{"--format", "parquet", "--follow"},
		{"--resume", "x"},
		{"--resume", "pg1.0.1.2", "--from", "3"},
		{"--source", "kafka", "--checkpoint", "ckpt"},
		{"--source", "kafka", "--resume", "pg1.0.1.2"},
		{"--checkpoint-every", "-1s"},
		{"--partition-by", "day"},
		{"--output", "dir"},
		{"--partition-by", "month", "--output", "dir"},
		{"--partition-by", "day,day", "--output", "dir"},
		{"--bogus"},
		{"extra"},
	} {
		out, stderr, code := run(args...)
		if code != exitUsage || out != "" {
			t.Errorf("%v: exit %d %s, out %q: want a usage error and no output", args, code, stderr, out)
		}
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestEventsCommandEPIPE: a reader that goes away (feed events | head)
// ends the replay quietly.
func TestEventsCommandEPIPE(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO events (event_id, stream_id, stream_version, type, payload)
		SELECT gen_random_uuid(), 'user-' || g, 1, 'user.registered.v1', jsonb_build_object('userId', g::text, 'name', 'u')
		FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	if _, err := r.Read(buf[:0]); err != nil {
		t.Fatal(err)
	}
	r.Close() // the reader is gone before the first write
	var errb bytes.Buffer
	code := execute(context.Background(), []string{"events"}, w, &errb, func() (Config, error) { return Config{DatabaseURL: db.URL}, nil })
	w.Close()
	if code != 0 {
		t.Fatalf("closed pipe: exit %d %s, want a quiet 0", code, errb.String())
	}
}
