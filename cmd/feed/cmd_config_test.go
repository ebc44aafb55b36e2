package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// feedConfig runs `feed config args...` with the environment's
// configuration (LoadConfig, as the binary does).
func feedConfig(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := execute(context.Background(), append([]string{"config"}, args...), &out, &errb, LoadConfig)
	return code, out.String(), errb.String()
}

// `feed config` prints every variable of envDocs once, with its effective
// value and whether it is set, and no secret in any form: the password of
// a PostgreSQL URL (and its sslpassword parameter) or keyword string
// (quoted or not), of a Redis URL, the JWT secrets, the gateway secret,
// the Kafka SASL password. Text and JSON; bad invocations exit 2.
func TestConfigCommand(t *testing.T) {
	secrets := []string{"pgUrlPw9", "sslKeyPw9", "hunter2 quoted", "r3disPw9", "jwt-secret-0123456789abcdef", "old-secret-0123456789abcdef",
		"gateway-secret-0123456789", "saslPw9"}
	common := map[string]string{
		"REDIS_URL":                 "redis://default:r3disPw9@127.0.0.1:6379/0",
		"FEED_JWT_SECRET":           "jwt-secret-0123456789abcdef",
		"FEED_JWT_PREVIOUS_SECRET":  "old-secret-0123456789abcdef",
		"FEED_GATEWAY_SECRET":       "gateway-secret-0123456789",
		"FEED_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
		"FEED_KAFKA_SASL_USER":      "feeduser",
		"FEED_KAFKA_SASL_PASSWORD":  "saslPw9",
		"FEED_INBOX_MAX":            "800",
		"FEED_PPROF_ADDR":           "127.0.0.1:6061",
		"HTTP_ADDR":                 "",
	}
	for _, tc := range []struct {
		dsn, want string // DATABASE_URL and how feed config shows it
	}{
		{"postgres://feed:pgUrlPw9@db.internal:5432/feed?sslmode=require&sslpassword=sslKeyPw9",
			"postgres://feed:xxxxx@db.internal:5432/feed?sslmode=require&sslpassword=xxxxx"},
		{"host=db.internal user=feed password='hunter2 quoted' dbname=feed sslmode=disable",
			"host=db.internal user=feed password=xxxxx dbname=feed sslmode=disable"},
		{"host=db.internal user=feed password=pgUrlPw9 dbname=feed",
			"host=db.internal user=feed password=xxxxx dbname=feed"},
	} {
		for k, v := range common {
			t.Setenv(k, v)
		}
		t.Setenv("DATABASE_URL", tc.dsn)

		code, text, stderr := feedConfig(t)
		if code != 0 || stderr != "" {
			t.Fatalf("feed config: exit %d, stderr %q", code, stderr)
		}
		code, js, stderr := feedConfig(t, "--output", "json")
		if code != 0 || stderr != "" {
			t.Fatalf("feed config --output json: exit %d, stderr %q", code, stderr)
		}
		for _, s := range secrets {
			for form, out := range map[string]string{"text": text, "json": js} {
				if strings.Contains(out, s) {
					t.Errorf("DATABASE_URL %s: the %s output shows the secret %q:\n%s", tc.want, form, s, out)
				}
			}
		}
		var rows []configRow
		if err := json.Unmarshal([]byte(js), &rows); err != nil {
			t.Fatalf("the JSON does not parse: %v\n%s", err, js)
		}
		byName := map[string]configRow{}
		for _, r := range rows {
			if _, dup := byName[r.Name]; dup {
				t.Errorf("%s is printed twice", r.Name)
			}
			byName[r.Name] = r
		}
		for name := range envDocs {
			if _, ok := byName[name]; !ok {
				t.Errorf("%s (in envDocs) is not printed", name)
			}
		}
		if len(byName) != len(envDocs) {
			t.Errorf("%d variables printed, envDocs has %d", len(byName), len(envDocs))
		}
		for name, want := range map[string]configRow{
			"DATABASE_URL":             {Value: tc.want, Source: "set", Secret: true},
			"REDIS_URL":                {Value: "redis://default:xxxxx@127.0.0.1:6379/0", Source: "set", Secret: true},
			"FEED_JWT_SECRET":          {Value: redacted, Source: "set", Secret: true},
			"FEED_JWT_PREVIOUS_SECRET": {Value: redacted, Source: "set", Secret: true},
			"FEED_GATEWAY_SECRET":      {Value: redacted, Source: "set", Secret: true},
			"FEED_KAFKA_SASL_PASSWORD": {Value: redacted, Source: "set", Secret: true},
			"FEED_KAFKA_SASL_USER":     {Value: "feeduser", Source: "set"},
			"FEED_INBOX_MAX":           {Value: "800", Source: "set"},
			"FEED_PPROF_ADDR":          {Value: "127.0.0.1:6061", Source: "set"},
			"HTTP_ADDR":                {Value: "127.0.0.1:8080", Source: "default"},
			"FEED_SLOT":                {Value: "feed_cdc_feed", Source: "default"},
		} {
			got := byName[name]
			want.Name = name
			if got != want {
				t.Errorf("%s: got %+v, want %+v", name, got, want)
			}
		}
		// The text table says the same.
		for _, line := range []string{"DATABASE_URL", "FEED_JWT_SECRET"} {
			r := byName[line]
			if !strings.Contains(text, r.Value) || !strings.Contains(text, "\n"+line+" ") {
				t.Errorf("the text output lacks %s %s:\n%s", line, r.Value, text)
			}
		}
		if n := strings.Count(text, "\n"); n != len(envDocs)+1 {
			t.Errorf("text: %d lines, want a header and %d", n, len(envDocs))
		}
	}

	// The development secret is named, not printed.
	t.Setenv("FEED_JWT_SECRET", "")
	if _, text, _ := feedConfig(t); strings.Contains(text, devSecret) || !strings.Contains(text, "(the built-in development secret)") {
		t.Errorf("with the development secret:\n%s", text)
	}

	// Bad invocations and configurations exit 2, printing no secret.
	for _, tc := range []struct {
		env    map[string]string
		args   []string
		stderr string
	}{
		{nil, []string{"--output", "yaml"}, `feed config: --output: "yaml": want text or json`},
		{nil, []string{"extra"}, `feed config: unexpected argument "extra"`},
		{map[string]string{"FEED_NODE_ID": "2000"}, nil, "feed config: FEED_NODE_ID=2000: want 0..1023"},
		{map[string]string{"DATABASE_URL": "postgres://feed:pgUrlPw9@db.internal:notaport/feed"}, nil, "feed config: DATABASE_URL postgres://xxxxx@db.internal:notaport/feed: invalid port"},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		code, out, stderr := feedConfig(t, tc.args...)
		if code != exitUsage || out != "" || !strings.HasPrefix(stderr, tc.stderr) || strings.Contains(stderr, "pgUrlPw9") {
			t.Errorf("feed config %v %v: exit %d, stdout %q, stderr %q; want 2 and %q", tc.env, tc.args, code, out, stderr, tc.stderr)
		}
		for k := range tc.env {
			t.Setenv(k, common[k])
		}
	}
}
