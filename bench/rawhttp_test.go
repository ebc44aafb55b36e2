package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/feedco/feed/testkit/testenv"
)

const rawHTTPChildEnv = "FEED_BENCH_RAW_HTTP_CHILD"

func TestMain(m *testing.M) {
	testenv.ChildMain(m, rawHTTPChildEnv, func() int {
		body, err := os.ReadFile(os.Getenv("FEED_BENCH_RAW_HTTP_PAGE"))
		if err != nil {
			return 2
		}
		ctx, stop := context.WithTimeout(context.Background(), time.Minute)
		defer stop()
		if err := ServeRawHTTP(ctx, body, os.Stdout); err != nil {
			return 1
		}
		return 0
	})
}

// The raw HTTP baseline serves the API's own page from a process of its
// own at the asked rate and measures that process's CPU; compare sets the
// API's CPU per read beside it for a reads-only phase, and not otherwise.
func TestRawHTTP(t *testing.T) {
	t.Parallel()
	page := []byte(`{"items":[{"id":"1","authorId":"2","content":"x","createdAt":"2026-11-30T10:00:00.000Z"}],"nextCursor":null,"prevCursor":"c"}`)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(page) }))
	t.Cleanup(api.Close)
	var child *exec.Cmd
	cfg := Config{BaseURL: api.URL, BaselineDuration: 2 * time.Second, Clients: 8,
		RawHTTPServer: func(ctx context.Context, file string) *exec.Cmd {
			child = exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			child.Env = append(os.Environ(), rawHTTPChildEnv+"=1", "FEED_BENCH_RAW_HTTP_PAGE="+file)
			return child
		}}
	r, err := New(cfg, &Population{Authors: []int64{1, 2}, Readers: []int64{1}}, func(int64) string { return "t" }, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := r.runRawHTTP(context.Background(), 200)
	if err != nil {
		t.Fatal(err)
	}
	if h.BodyBytes != len(page) || h.Errors != 0 || h.Requests < 300 || h.Requests > 401 || h.ServerUsPer <= 0 {
		t.Fatalf("raw HTTP at 200/s for 2 s: %+v, want ~400 requests of %d bytes, no errors, a CPU cost", h, len(page))
	}
	if child.ProcessState == nil {
		t.Error("the raw HTTP server is still running after the baseline")
	}

	m := &Mixed{Reads: Summary{Count: 1000}, SystemCPU: &CPU{Seconds: 10, Percent: map[string]float64{cpuFeed: 5}}}
	h.compare(m)
	if want := 0.05 * 10 / 1000 * 1e6; h.PerReadFeed != want || h.PerReadRatio != want/h.ServerUsPer {
		t.Errorf("reads only: feed per read %.1f (%.2fx), want %.1f", h.PerReadFeed, h.PerReadRatio, want)
	}
	h.PerReadFeed, h.PerReadRatio = 0, 0
	m.Posts.Count = 20 // 2% of the reads: the feed's CPU is the fan-out's too
	h.compare(m)
	if h.PerReadFeed != 0 {
		t.Errorf("with writes, feed per read %.1f, want none", h.PerReadFeed)
	}
}
