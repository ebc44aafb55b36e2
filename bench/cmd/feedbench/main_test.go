package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/feedco/feed/bench"
	"github.com/feedco/feed/cdc"
	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/kafkatest"
	"github.com/feedco/feed/testkit/testenv"
)

// runCLI runs the command line in-process with cfg as its configuration
// and returns the exit code, stdout and stderr.
func runCLI(t *testing.T, cfg config, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := execute(ctx, args, &out, &errb, func() (config, error) { return cfg, nil })
	return code, out.String(), errb.String()
}

// --help prints every flag and the environment read, on
// stdout, and exits 0.
func TestHelp(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCLI(t, config{}, "--help")
	if code != 0 || stderr != "" {
		t.Fatalf("--help: exit %d, stderr %q; want 0 and nothing", code, stderr)
	}
	for _, want := range []string{"Usage:", "--duration", "--rate", "--closed-loop", "--clients", "--procs", "--plain-sockets", "--read-ratio", "--post-share",
		"--readers", "--churners", "--visible-rate", "--poll", "--baseline", "--activate", "--vacuum", "--seed", "--out", "--url",
		"Environment:", "DATABASE_URL", "REDIS_URL", "HTTP_ADDR", "FEED_JWT_SECRET", "FEED_SLOT", "KAFKA_BROKERS"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
}

// Usage errors exit 2 and name the command once.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		stderr string // the first line
	}{
		{[]string{"--read-ratio", "-1"}, "feedbench: --read-ratio -1, --post-share 0.8: want at least 0"},
		{[]string{"--bogus"}, "feedbench: unknown flag: --bogus"},
		{[]string{"extra"}, `feedbench: unexpected argument "extra"`},
	} {
		code, out, stderr := runCLI(t, config{}, tc.args...)
		first, _, _ := strings.Cut(stderr, "\n")
		if code != exitUsage || first != tc.stderr || out != "" {
			t.Errorf("feedbench %v: exit %d, stdout %q, stderr %q; want %d and %q", tc.args, code, out, stderr, exitUsage, tc.stderr)
		}
	}
	var out, errb bytes.Buffer
	code := execute(context.Background(), nil, &out, &errb, func() (config, error) { return config{}, errors.New("FEED_KAFKA_TLS=\"maybe\": want true or false") })
	if code != exitUsage || !strings.HasPrefix(errb.String(), "feedbench: FEED_KAFKA_TLS=\"maybe\": want true or false\n") {
		t.Errorf("bad configuration: exit %d, stderr %q", code, errb.String())
	}
}

// --read-ratio 0 and --post-share 0 mean none (the library's "negative"),
// not the library's default for a zero value; negative flags are refused.
func TestNoneFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		read, post         float64
		wantRead, wantPost float64
		bad                bool
	}{
		{20, 0.8, 20, 0.8, false},
		{0, 0.8, -1, 0.8, false},
		{5, 0, 5, -1, false},
		{-1, 0.8, 0, 0, true},
		{20, -0.5, 0, 0, true},
	} {
		c := bench.Config{ReadRatio: tc.read, PostShare: tc.post}
		err := noneFlags(&c)
		var ue usageError
		if tc.bad {
			if !errors.As(err, &ue) {
				t.Errorf("read %g post %g: %v, want a usage error", tc.read, tc.post, err)
			}
			continue
		}
		if err != nil || c.ReadRatio != tc.wantRead || c.PostShare != tc.wantPost {
			t.Errorf("read %g post %g: %g %g %v, want %g %g", tc.read, tc.post, c.ReadRatio, c.PostShare, err, tc.wantRead, tc.wantPost)
		}
	}
}

// `feedbench raw-http-server PAGE` says where it listens, serves PAGE's
// bytes to every request, and stops cleanly when its context ends.
func TestRawHTTPServerCommand(t *testing.T) {
	t.Parallel()
	page := filepath.Join(t.TempDir(), "page.json")
	body := `{"items":[],"nextCursor":null}`
	if err := os.WriteFile(page, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	var errb bytes.Buffer
	go func() {
		done <- execute(ctx, []string{"raw-http-server", page}, pw, &errb, func() (config, error) { return config{}, nil })
		_ = pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		t.Fatalf("first line %q, %v; want listening ADDR", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	for range 3 {
		resp, err := http.Get("http://" + addr + "/api/feed?limit=20")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(got) != body || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("GET: %d %q %q, want 200 with the page as JSON", resp.StatusCode, resp.Header.Get("Content-Type"), got)
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("raw-http-server after its context ended: exit %d, stderr %q", code, errb.String())
	}
}

// open reads the active versions and the inbox version's recorded policy
// (the system's, whatever feedbench's environment says), derives the slot
// from the database, and checks the broker.
func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	broker := kafkatest.Start(t)
	if _, err := db.Pool.Exec(ctx, `UPDATE projection_versions SET version = 2, celebrity_threshold = 77, inbox_max = 300, inbox_layout = $1
		WHERE projection = $2`, homefeed.Layout, readmodel.ProjectionInbox); err != nil {
		t.Fatal(err)
	}
	cfg := config{databaseURL: db.URL, redisURL: testenv.RedisURL(), brokers: []string{broker.Addr}, topic: "feed.events"}
	s, err := open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if s.policy.CelebrityThreshold != 77 || s.policy.InboxMax != 300 {
		t.Errorf("policy %+v, want the recorded threshold 77 and bound 300", s.policy)
	}
	if v := s.versions.Get(readmodel.ProjectionInbox); v != 2 {
		t.Errorf("inbox version %d, want 2", v)
	}
	if want := cdc.DefaultSlot(db.Name); s.slot != want {
		t.Errorf("slot %q, want %q", s.slot, want)
	}
}
