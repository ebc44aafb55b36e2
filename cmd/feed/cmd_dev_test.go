package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/testkit/testenv"
)

// TestDev runs `feed dev` in-process over a keyword-form DATABASE_URL
// with the embedded broker: the API answers, CDC streams a write to the
// projections (its metrics on the admin listener's /metrics), and an interrupt stops
// every part cleanly with exit code 0.
func TestDev(t *testing.T) {
	db := testenv.NewDB(t)
	// The roles write unprefixed keys: a Redis database of this test's own.
	const redisURL = "redis://127.0.0.1:6379/13"
	opt, _ := redis.ParseURL(redisURL)
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	flush := func() { _ = rdb.FlushDB(context.Background()).Err() }
	flush()
	defer flush()

	t.Setenv("DATABASE_URL", fmt.Sprintf("host=127.0.0.1 port=5432 user=postgres dbname=%s sslmode=disable", db.Name))
	t.Setenv("REDIS_URL", redisURL)
	t.Setenv("KAFKA_BROKERS", "")
	t.Setenv("HTTP_ADDR", "127.0.0.1:0")
	t.Setenv("FEED_KAFKA_ADDR", "127.0.0.1:0")
	t.Setenv("FEED_STATE_DIR", t.TempDir())
	t.Setenv("FEED_JWT_SECRET", "")
	t.Setenv("FEED_ALLOW_DEV_SECRET", "")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr testenv.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- execute(ctx, []string{"dev"}, &stdout, &stderr, LoadConfig) }()

	listening := regexp.MustCompile(`api: listening on (http://\S+)`)
	adminListening := regexp.MustCompile(`admin: listening on (http://\S+)`)
	var api, admin string
	testenv.Eventually(t, 60*time.Second, "feed dev listens", func() bool {
		select {
		case code := <-done:
			t.Fatalf("feed dev exited with %d:\n%s", code, stderr.String())
		default:
		}
		if m := listening.FindStringSubmatch(stdout.String()); m != nil {
			api = m[1]
		}
		if m := adminListening.FindStringSubmatch(stdout.String()); m != nil {
			admin = m[1]
		}
		return api != "" && admin != ""
	})
	// Ready once CDC streams, every projector consumes and the API serves.
	testenv.Eventually(t, 60*time.Second, "feed dev ready", func() bool {
		return strings.Contains(stderr.String(), "dev: ready")
	})
	get := func(path string) (int, string) {
		base := api
		if path == "/metrics" || path == "/status" {
			base = admin // the operators' pages are on the admin listener only
		}
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	// The public port serves the API, /healthz and /readyz only.
	for _, p := range []string{"/metrics", "/status", "/debug/pprof/"} {
		resp, err := http.Get(api + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s on the API's port: %d, want 404", p, resp.StatusCode)
		}
	}
	if code, body := get("/status"); code != http.StatusOK || !strings.Contains(body, "<html") {
		t.Errorf("/status on the admin listener: %d %.200s", code, body)
	}
	register := func() {
		resp, err := http.Post(api+"/api/users", "application/json", strings.NewReader(`{"name":"ana"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
			t.Fatalf("register: %s", resp.Status)
		}
	}
	var metrics string
	defer func() {
		if t.Failed() {
			t.Logf("stderr:\n%s\nmetrics (cdc, projection):\n%s", stderr.String(), grepLines(metrics, "feed_cdc_", "feed_projection_messages"))
		}
	}()
	// Writes committed before CDC's slot is ready are never streamed:
	// register users until one is.
	testenv.Eventually(t, 60*time.Second, "CDC publishes a registration", func() bool {
		register()
		_, body := get("/metrics")
		metrics = body
		return regexp.MustCompile(`(?m)^feed_cdc_events_published_total [1-9]`).MatchString(body) &&
			strings.Contains(body, "feed_projection_messages_total")
	})
	if info := `feed_build_info{goversion="` + runtime.Version() + `",`; !strings.Contains(metrics, info) {
		t.Errorf("/metrics lacks %s...} 1:\n%s", info, grepLines(metrics, "feed_build_info"))
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("feed dev after an interrupt: exit %d:\n%s", code, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("feed dev did not stop:\n%s", stderr.String())
	}
	for _, want := range []string{"dev: starting", "http=" + api, "dev: ready", "dev: shut down"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}

// grepLines returns the lines of s that start with one of the prefixes.
func grepLines(s string, prefixes ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
