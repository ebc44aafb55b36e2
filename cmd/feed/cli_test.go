package main

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
)

// runCLI runs the command line in-process with cfg as its configuration
// and returns the exit code, stdout and stderr.
func runCLI(t *testing.T, cfg Config, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := execute(ctx, args, &out, &errb, func() (Config, error) { return cfg, nil })
	return code, out.String(), errb.String()
}

// Every command's --help (and `feed help CMD`) prints its usage with its
// flags spelled --flag and the environment it reads, on stdout, and exits 0.
func TestHelp(t *testing.T) {
	t.Parallel()
	commands := map[string][]string{ // a flag each must list
		"":                {"--version"},
		"dev":             nil,
		"migrate":         nil,
		"api":             nil,
		"cdc":             {"--metrics-addr"},
		"cdc drop-slot":   nil,
		"cdc reseed":      {"--from", "--topic"},
		"project":         {"--only", "--metrics-addr"},
		"kafka":           {"--brokers", "--sasl-user", "--sasl-password", "--tls-cert", "--tls-key"},
		"token":           {"--user", "--ttl"},
		"events":          {"--source", "--format", "--from", "--to", "--type", "--stream", "--author", "--limit", "--follow", "--with-lsn", "--checkpoint", "--checkpoint-every", "--resume"},
		"rebuild":         {"--catch-up-lag", "--handover", "--verify-users", "--force", "--inbox-layout", "--inbox-max", "--celebrity-threshold", "--celebrity-band"},
		"verify":          {"--users", "--user", "--depth", "--settle-timeout"},
		"seed":            {"--users", "--seed", "--avg-follows", "--posts", "--celebrities", "--days", "--end", "--batch", "--force", "--no-slot-check", "--dry-run"},
		"status":          nil,
		"poison":          nil,
		"poison list":     {"--group", "--all"},
		"poison show":     nil,
		"poison replay":   {"--group", "--id", "--all"},
		"poison discard":  {"--group", "--id", "--all"},
		"healthcheck":     {"--url", "--timeout"},
		"config":          {"--output"},
		"version":         nil,
		"completion bash": nil,
	}
	envs := map[string]string{"api": "FEED_READ_CACHE_KEYS", "dev": "KAFKA_BROKERS", "cdc": "FEED_SLOT", "token": "FEED_JWT_SECRET", "status": "DATABASE_URL", "kafka": "FEED_KAFKA_ADDR", "verify": "FEED_SLOT", "project": "FEED_VERIFY_EVERY", "healthcheck": "HTTP_ADDR"}
	for name, flags := range commands {
		args := strings.Fields(name)
		for _, form := range [][]string{append(append([]string{}, args...), "--help"), append([]string{"help"}, args...)} {
			code, out, stderr := runCLI(t, Config{}, form...)
			if code != 0 || stderr != "" {
				t.Errorf("feed %v: exit %d, stderr %q; want 0 and nothing", form, code, stderr)
			}
			for _, want := range append([]string{"Usage:", "--help"}, flags...) {
				if !strings.Contains(out, want) {
					t.Errorf("feed %v: stdout lacks %q:\n%s", form, want, out)
				}
			}
			if env, ok := envs[name]; ok && (!strings.Contains(out, "Environment:") || !strings.Contains(out, env)) {
				t.Errorf("feed %v: stdout does not list %s under Environment:\n%s", form, env, out)
			}
		}
	}
}

// `feed --version` and `feed version` print the build: module version,
// VCS revision and time, Go version.
func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--version"}, {"version"}} {
		code, out, stderr := runCLI(t, Config{}, args...)
		if code != 0 || stderr != "" {
			t.Errorf("feed %v: exit %d, stderr %q", args, code, stderr)
		}
		for _, want := range []string{"feed ", "module   github.com/feedco/feed", "revision ", "time ", "go       " + runtime.Version()} {
			if !strings.Contains(out, want) {
				t.Errorf("feed %v: lacks %q:\n%s", args, want, out)
			}
		}
	}
	if _, out, _ := runCLI(t, Config{}, "completion", "bash"); !strings.Contains(out, "bash completion") {
		t.Errorf("completion bash:\n%.300s", out)
	}
}

// Usage errors exit 2 and name the command once; runtime errors exit 1.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		stderr string // the first line
	}{
		{nil, "feed: a command is required"},
		{[]string{"bogus"}, `feed: unknown command "bogus"`},
		{[]string{"statsu"}, `feed: unknown command "statsu" (did you mean "status"?)`},
		{[]string{"--bogus"}, "feed: unknown flag: --bogus"},
		{[]string{"cdc", "bogus"}, `feed cdc: unexpected argument "bogus"`},
		{[]string{"help", "bogus"}, `feed help: unknown help topic "bogus"`},
		{[]string{"cdc", "drop-slot", "x"}, `feed cdc drop-slot: unexpected argument "x"`},
		{[]string{"status", "extra"}, `feed status: unexpected argument "extra"`},
		{[]string{"seed", "-users", "5"}, "feed seed: unknown shorthand flag: 'u' in -users"},
		{[]string{"seed", "--users", "many"}, `feed seed: invalid argument "many" for "--users" flag: strconv.ParseInt: parsing "many": invalid syntax`},
		{[]string{"token"}, "feed token: --user ID is required (a positive integer)"},
		{[]string{"token", "--user", "1", "--ttl", "-1s"}, "feed token: --ttl: must be positive"},
		{[]string{"rebuild"}, "feed rebuild: want one projection name: inbox, timelines, followers, posts, notifications or all"},
		{[]string{"rebuild", "nope"}, "feed rebuild: "},
		{[]string{"rebuild", "--catch-up-lag", "-1", "all"}, "feed rebuild: --catch-up-lag: must not be negative"},
		{[]string{"events", "--source", "mysql"}, `feed events: --source "mysql": want pg or kafka`},
		{[]string{"project", "--only", "nope"}, "feed project: "},
		{[]string{"verify", "--users", "5", "--user", "7"}, "feed verify: --users and --user: give one"},
		{[]string{"verify", "--users", "0"}, "feed verify: --users: want at least 1, got 0"},
		{[]string{"verify", "--user", "-3"}, "feed verify: --user: want a positive id, got -3"},
		{[]string{"verify", "--depth", "0"}, "feed verify: --depth: want 1..10000, got 0"},
		{[]string{"verify", "extra"}, `feed verify: unexpected argument "extra"`},
		{[]string{"rebuild", "--verify-users", "0", "inbox"}, "feed rebuild: --verify-users: want at least 1, got 0"},
		{[]string{"healthcheck", "--timeout", "0s"}, "feed healthcheck: --timeout: must be positive"},
		{[]string{"healthcheck", "--url", "localhost:8080"}, `feed healthcheck: --url: "localhost:8080": want an http:// or https:// URL`},
		{[]string{"healthcheck", "extra"}, `feed healthcheck: unexpected argument "extra"`},
	} {
		code, out, stderr := runCLI(t, Config{}, tc.args...)
		first, _, _ := strings.Cut(stderr, "\n")
		if code != exitUsage || !strings.HasPrefix(first, tc.stderr) || out != "" {
			t.Errorf("feed %v: exit %d, stdout %q, stderr %q; want %d and %q", tc.args, code, out, stderr, exitUsage, tc.stderr)
		}
		if strings.Count(first, "feed") > 1 && !strings.Contains(tc.stderr, "feed") {
			t.Errorf("feed %v: %q names the command more than once", tc.args, first)
		}
	}

	// A configuration that does not load is a usage error too.
	var out, errb bytes.Buffer
	code := execute(context.Background(), []string{"migrate"}, &out, &errb, func() (Config, error) {
		return Config{}, errors.New("FEED_NODE_ID=2000: want 0..1023")
	})
	if code != exitUsage || errb.String() != "feed migrate: FEED_NODE_ID=2000: want 0..1023\nRun 'feed migrate --help' for usage.\n" {
		t.Errorf("bad configuration: exit %d, stderr %q", code, errb.String())
	}

	// A runtime failure (nothing listens there) exits 1 and prints no secret.
	cfg := Config{DatabaseURL: "postgres://feed:s3cr3tpw@127.0.0.1:1/feed?sslmode=disable", RedisURL: "redis://default:s3cr3tpw@127.0.0.1:1/0"}
	for _, args := range [][]string{{"migrate"}, {"status"}, {"cdc", "drop-slot"}} {
		code, _, stderr := runCLI(t, cfg, args...)
		if code != exitFailure || !strings.Contains(stderr, "connect to PostgreSQL at postgres://feed:xxxxx@127.0.0.1:1/feed") || strings.Contains(stderr, "s3cr3tpw") {
			t.Errorf("feed %v with PostgreSQL down: exit %d, stderr %q", args, code, stderr)
		}
	}
	cfg.DatabaseURL = ""
	code, _, stderr := runCLI(t, cfg, "seed", "--dry-run", "--users", "10", "--end", "yesterday")
	if code != exitUsage || !strings.HasPrefix(stderr, "feed seed: --end: ") {
		t.Errorf("seed --end yesterday: exit %d, stderr %q", code, stderr)
	}
}

// `feed cdc reseed --from` takes a position or an RFC 3339 time, and says
// why it refuses anything else (a commit LSN included).
func TestReseedFrom(t *testing.T) {
	t.Parallel()
	if f, err := parseReseedFrom("1"); err != nil || f.Position != 1 {
		t.Fatalf("--from 1: %+v, %v", f, err)
	}
	if f, err := parseReseedFrom("2026-11-30T09:41:12Z"); err != nil || f.Time.IsZero() || f.Position != 0 {
		t.Fatalf("--from a time: %+v, %v", f, err)
	}
	for in, want := range map[string]string{
		"":            "required",
		"0":           "positions start at 1",
		"16/B374D848": "does not record commit LSNs",
		"yesterday":   "neither a position nor an RFC 3339 time",
	} {
		_, err := parseReseedFrom(in)
		var u usageError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), want) {
			t.Errorf("--from %q: %v, want a usage error saying %q", in, err, want)
		}
	}
}
