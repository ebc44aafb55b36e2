package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/testkit/kafkatest"
	"github.com/feedco/feed/testkit/testenv"
)

// feedChildEnv runs the test binary as the feed binary: the command line
// is FEED_TEST_CHILD_ARGS (split on spaces), the configuration the
// environment's.
const feedChildEnv = "FEED_TEST_CHILD"

func TestMain(m *testing.M) {
	// Many feed processes run at once here: none takes the admin
	// listener's default port.
	if os.Getenv("FEED_ADMIN_ADDR") == "" {
		_ = os.Setenv("FEED_ADMIN_ADDR", "127.0.0.1:0")
	}
	testenv.ChildMain(m, feedChildEnv, func() int {
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		return execute(ctx, strings.Fields(os.Getenv("FEED_TEST_CHILD_ARGS")), os.Stdout, os.Stderr, LoadConfig)
	})
}

// runFeed runs `feed args...` as a separate process with the extra
// environment vars and returns its exit code and output.
func runFeed(t *testing.T, args string, vars ...string) (int, string) {
	t.Helper()
	var out testenv.SyncBuffer
	cmd := testenv.StartChild(t, feedChildEnv, &out, append(vars, "FEED_TEST_CHILD_ARGS="+args)...)
	err := cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	default:
		t.Fatalf("feed %s: %v", args, err)
		return -1, ""
	}
}

// startFeed starts `feed args...` as a separate process and returns the
// first match of the submatch of re in its output once it appears.
func startFeed(t *testing.T, args string, re *regexp.Regexp, vars ...string) string {
	t.Helper()
	var out testenv.SyncBuffer
	cmd := testenv.StartChild(t, feedChildEnv, &out, append(vars, "FEED_TEST_CHILD_ARGS="+args)...)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("feed %s did not stop on SIGINT", args)
		}
		if t.Failed() {
			t.Logf("feed %s output:\n%s", args, out.String())
		}
	})
	var m []string
	testenv.Eventually(t, 60*time.Second, "feed "+args+" starts", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("feed %s exited: %v\n%s", args, err, out.String())
		default:
		}
		m = re.FindStringSubmatch(out.String())
		return m != nil
	})
	return m[1]
}

// oneLine checks that a failing healthcheck printed one line naming the
// command, containing want.
func oneLine(t *testing.T, what, out, want string) {
	t.Helper()
	if strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "feed healthcheck: ") || !strings.Contains(out, want) {
		t.Errorf("%s: want one line `feed healthcheck: ...%s...`, got %q", what, want, out)
	}
}

// `feed healthcheck` against a real `feed api` and a real `feed project`,
// each a process of its own: exit 0 while healthy (the API degraded
// without Redis is still ready), 1 with a one-line reason when the API
// answers 503 (PostgreSQL unreachable), nothing listens or no answer comes
// within --timeout, 2 for a bad --url.
func TestHealthcheck(t *testing.T) {
	db := testenv.NewDB(t)
	rs := testenv.StartRedisServer(t)
	b := kafkatest.Start(t)
	env := []string{
		"DATABASE_URL=" + db.URL, "REDIS_URL=redis://" + rs.Addr() + "/0",
		"KAFKA_BROKERS=" + strings.Join(b.Addrs(), ","), "FEED_TOPIC=" + b.Topic(t, 1),
		"FEED_ALLOW_DEV_SECRET=1", "FEED_JWT_SECRET=", "FEED_PPROF_ADDR=", "FEED_LOG_LEVEL=info",
	}
	apiURL := startFeed(t, "api", regexp.MustCompile(`api: listening on (http://\S+)`), append(env, "HTTP_ADDR=127.0.0.1:0")...)
	metricsURL := startFeed(t, "project --metrics-addr 127.0.0.1:0", regexp.MustCompile(`project: starting.* health=(http://\S+)`), env...)

	// Healthy: the readiness of the API, asked by URL and from HTTP_ADDR
	// (an unspecified host is asked on loopback), and the projector's
	// /healthz.
	if code, out := runFeed(t, "healthcheck --url "+apiURL+"/readyz"); code != 0 || !strings.Contains(out, "200 OK") || !strings.Contains(out, `"status":"ok"`) {
		t.Errorf("API ready: exit %d, %q; want 0", code, out)
	}
	port := apiURL[strings.LastIndex(apiURL, ":")+1:]
	if code, out := runFeed(t, "healthcheck", append(env, "HTTP_ADDR=0.0.0.0:"+port)...); code != 0 || !strings.Contains(out, "http://127.0.0.1:"+port+"/readyz: 200 OK") {
		t.Errorf("API ready, default URL: exit %d, %q; want 0", code, out)
	}
	if code, out := runFeed(t, "healthcheck --url "+metricsURL); code != 0 || !strings.Contains(out, "200 OK") {
		t.Errorf("projector: exit %d, %q; want 0", code, out)
	}

	// Redis down: the API answers from PostgreSQL, degraded but ready.
	rs.Stop()
	if code, out := runFeed(t, "healthcheck --url "+apiURL+"/readyz"); code != 0 || !strings.Contains(out, `"status":"degraded"`) {
		t.Errorf("API without Redis: exit %d, %q; want 0 and degraded", code, out)
	}

	// PostgreSQL refuses the API's connections: /readyz is 503.
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, testenv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+db.Name+" ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "ALTER DATABASE "+db.Name+" ALLOW_CONNECTIONS true") })
	db.Pool.Close()
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", db.Name); err != nil {
		t.Fatal(err)
	}
	code, out := runFeed(t, "healthcheck --url "+apiURL+"/readyz")
	if code != exitFailure {
		t.Errorf("API without PostgreSQL: exit %d, want 1", code)
	}
	oneLine(t, "API without PostgreSQL", out, "503 Service Unavailable")
	if !strings.Contains(out, `"status":"unavailable"`) {
		t.Errorf("API without PostgreSQL: %q does not say unavailable", out)
	}

	// Nothing listens.
	dead := "http://" + kafkatest.FreeAddr(t) + "/healthz"
	code, out = runFeed(t, "healthcheck --url "+dead)
	if code != exitFailure {
		t.Errorf("nothing listening: exit %d, want 1", code)
	}
	oneLine(t, "nothing listening", out, "connection refused")

	// No answer within --timeout.
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer stuck.Close()
	start := time.Now()
	code, out = runFeed(t, "healthcheck --timeout 300ms --url "+stuck.URL+"/readyz")
	if code != exitFailure || time.Since(start) > 20*time.Second {
		t.Errorf("stuck server: exit %d after %v, want 1 soon", code, time.Since(start))
	}
	oneLine(t, "stuck server", out, "no answer within 300ms")

	// A bad invocation is a usage error.
	if code, out := runFeed(t, "healthcheck --url ftp://x/y"); code != exitUsage || !strings.Contains(out, "--url") {
		t.Errorf("--url ftp://x/y: exit %d, %q; want 2", code, out)
	}
}
