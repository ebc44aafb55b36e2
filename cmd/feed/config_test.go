package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/testkit/testenv"
)

// FEED_FOLLOWER_CACHE_ROWS reaches the inbox projector's follower cache:
// unset is the default bound, 0 or less turns the cache off, a bad
// number is refused.
func TestFollowerCacheRowsEnv(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want int
	}{
		{"", projections.DefaultConfig().FollowerCacheRows},
		{"16000000", 16_000_000},
		{"0", -1},
		{"-5", -1},
	} {
		t.Setenv("FEED_FOLLOWER_CACHE_ROWS", tc.env)
		c, err := LoadConfig()
		if err != nil {
			t.Fatalf("FEED_FOLLOWER_CACHE_ROWS=%q: %v", tc.env, err)
		}
		if got := projectionConfig(c).FollowerCacheRows; got != tc.want {
			t.Fatalf("FEED_FOLLOWER_CACHE_ROWS=%q: FollowerCacheRows %d, want %d", tc.env, got, tc.want)
		}
	}
	t.Setenv("FEED_FOLLOWER_CACHE_ROWS", "many")
	if _, err := LoadConfig(); err == nil {
		t.Fatal("FEED_FOLLOWER_CACHE_ROWS=many accepted")
	}
}

// FEED_READ_CACHE_KEYS reaches the query side: unset is 40,000 keys, 0
// turns the cache off (the query side's negative), a bad number is refused.
func TestReadCacheKeysEnv(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want int
	}{
		{"", 40_000},
		{"1000", 1000},
		{"0", -1},
	} {
		t.Setenv("FEED_READ_CACHE_KEYS", tc.env)
		c, err := LoadConfig()
		if err != nil {
			t.Fatalf("FEED_READ_CACHE_KEYS=%q: %v", tc.env, err)
		}
		if got := readCacheKeys(c.ReadCacheKeys); got != tc.want {
			t.Fatalf("FEED_READ_CACHE_KEYS=%q: ReadCacheKeys %d, want %d", tc.env, got, tc.want)
		}
	}
	for _, bad := range []string{"x", "-5"} {
		t.Setenv("FEED_READ_CACHE_KEYS", bad)
		if _, err := LoadConfig(); err == nil {
			t.Fatalf("FEED_READ_CACHE_KEYS=%s accepted", bad)
		}
	}
}

// The other variables of this package: the dev-secret permission, the
// log format and level, and the slot of a keyword-form DATABASE_URL.
func TestConfigEnv(t *testing.T) {
	t.Setenv("FEED_ALLOW_DEV_SECRET", "1")
	t.Setenv("FEED_LOG_FORMAT", "json")
	t.Setenv("FEED_LOG_LEVEL", "warn")
	t.Setenv("DATABASE_URL", "host=127.0.0.1 port=5432 user=postgres password=hunter2 dbname=feed sslmode=disable")
	c, err := LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if !c.AllowDevSecret || c.LogFormat != "json" || c.LogLevel != slog.LevelWarn || c.Slot != "feed_cdc_feed" {
		t.Fatalf("got AllowDevSecret %v, LogFormat %q, LogLevel %v, Slot %q", c.AllowDevSecret, c.LogFormat, c.LogLevel, c.Slot)
	}
	for key, bad := range map[string]string{"FEED_LOG_FORMAT": "xml", "FEED_LOG_LEVEL": "loud", "DATABASE_URL": "host=db password='hunter2"} {
		t.Run(key, func(t *testing.T) {
			t.Setenv(key, bad)
			_, err := LoadConfig()
			if err == nil || !strings.Contains(err.Error(), key) || strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("%s=%s: %v", key, bad, err)
			}
		})
	}
}

// FEED_VERIFY_EVERY: unset is never, a duration of 10 s or more runs the
// periodic verification, shorter or not a duration is refused.
func TestVerifyEveryEnv(t *testing.T) {
	for v, want := range map[string]time.Duration{"": 0, "5m": 5 * time.Minute, "10s": 10 * time.Second} {
		t.Setenv("FEED_VERIFY_EVERY", v)
		c, err := LoadConfig()
		if err != nil || c.VerifyEvery != want {
			t.Errorf("FEED_VERIFY_EVERY=%q: %v, %v; want %v", v, c.VerifyEvery, err, want)
		}
	}
	for _, bad := range []string{"5s", "often", "-1m"} {
		t.Setenv("FEED_VERIFY_EVERY", bad)
		if _, err := LoadConfig(); err == nil || !strings.Contains(err.Error(), "FEED_VERIFY_EVERY") {
			t.Errorf("FEED_VERIFY_EVERY=%q: %v; want a refusal naming it", bad, err)
		}
	}
}

// The API accepts the development secret only when its caller passes the
// permission (`feed dev` does, `feed api` with FEED_ALLOW_DEV_SECRET=1).
func TestAPIDevSecret(t *testing.T) {
	db := testenv.NewDB(t)
	rdb := testenv.NewRedis(t)
	ctx := context.Background()
	cfg := Config{AuthMode: "jwt", JWTSecret: devSecret, HTTPAddr: "127.0.0.1:0", MaxContentChars: 100, InboxMax: 500, InactiveAfter: 720 * time.Hour, CelebrityCacheTTL: time.Second}
	parts := apiParts{Pool: db.Pool, Redis: rdb.Client, Registry: prometheus.NewRegistry(), Log: slog.New(slog.DiscardHandler), Stdout: io.Discard}
	var ue usageError
	if _, err := newAPI(ctx, cfg, parts); !errors.As(err, &ue) || !strings.Contains(err.Error(), "FEED_JWT_SECRET is unset") {
		t.Fatalf("without the permission: %v, want a usage error", err)
	}
	parts.AllowDevSecret = true
	at, err := newAPI(ctx, cfg, parts)
	if err != nil {
		t.Fatalf("with the permission: %v", err)
	}
	if err := at.svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := at.svc.Stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// FEED_KAFKA_TLS_* and FEED_KAFKA_SASL_* become one kafka.Security; bad
// values are refused with the variable named and the password not shown.
func TestKafkaSecurityFromEnv(t *testing.T) {
	t.Setenv("FEED_KAFKA_TLS", "true")
	t.Setenv("FEED_KAFKA_TLS_SERVER_NAME", "kafka.example.com")
	t.Setenv("FEED_KAFKA_SASL_MECHANISM", "scram-sha-512")
	t.Setenv("FEED_KAFKA_SASL_USER", "svc")
	t.Setenv("FEED_KAFKA_SASL_PASSWORD", "pa55")
	s, err := kafkaSecurityFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if !s.TLS || s.ServerName != "kafka.example.com" || s.SASLMechanism != "SCRAM-SHA-512" || s.User != "svc" || s.Password != "pa55" {
		t.Fatalf("got %+v", s)
	}
	t.Setenv("FEED_KAFKA_SASL_MECHANISM", "GSSAPI")
	if _, err := kafkaSecurityFromEnv(); err == nil || !strings.Contains(err.Error(), "FEED_KAFKA_SASL") || strings.Contains(err.Error(), "pa55") {
		t.Fatalf("GSSAPI: %v", err)
	}
	t.Setenv("FEED_KAFKA_SASL_MECHANISM", "PLAIN")
	t.Setenv("FEED_KAFKA_TLS", "yes please")
	if _, err := kafkaSecurityFromEnv(); err == nil || !strings.Contains(err.Error(), "FEED_KAFKA_TLS") {
		t.Fatalf("bad bool: %v", err)
	}
}

// FEED_REFRESH_SETTLE reaches the query side (default 8s) and must exceed
// the celebrity cache's TTL, whether FEED_CELEBRITY_CACHE_TTL is set or
// its default.
func TestRefreshSettleEnv(t *testing.T) {
	for _, tc := range []struct {
		settle, ttl string
		want        time.Duration
		ok          bool
	}{
		{"", "", 8 * time.Second, true},
		{"5s", "", 5 * time.Second, true},
		{"5s", "4s", 5 * time.Second, true},
		{"3s", "", 0, false}, // equal to the default TTL
		{"2s", "1s", 2 * time.Second, true},
		{"4s", "4s", 0, false},
		{"10s", "5s", 10 * time.Second, true},
		{"soon", "", 0, false},
	} {
		t.Setenv("FEED_REFRESH_SETTLE", tc.settle)
		t.Setenv("FEED_CELEBRITY_CACHE_TTL", tc.ttl)
		c, err := LoadConfig()
		if tc.ok != (err == nil) {
			t.Fatalf("FEED_REFRESH_SETTLE=%q FEED_CELEBRITY_CACHE_TTL=%q: err %v, want ok %v", tc.settle, tc.ttl, err, tc.ok)
		}
		if tc.ok && c.RefreshSettle != tc.want {
			t.Fatalf("FEED_REFRESH_SETTLE=%q: %v, want %v", tc.settle, c.RefreshSettle, tc.want)
		}
	}
}

// The load-shedding variables: defaults, 0 off (api.Config's negative),
// and the degrade point at most the read bound.
func TestSheddingEnv(t *testing.T) {
	c, err := LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxReadsInFlight != 256 || c.MaxWritesInFlight != 32 || c.FullHomeReads != 128 || c.ReadsRunning != 32 {
		t.Fatalf("defaults: reads %d writes %d full home reads %d running %d", c.MaxReadsInFlight, c.MaxWritesInFlight, c.FullHomeReads, c.ReadsRunning)
	}
	t.Setenv("FEED_MAX_READS_IN_FLIGHT", "0")
	t.Setenv("FEED_MAX_WRITES_IN_FLIGHT", "5")
	t.Setenv("FEED_FULL_HOME_READS", "0")
	t.Setenv("FEED_READS_RUNNING", "0")
	if c, err = LoadConfig(); err != nil {
		t.Fatal(err)
	}
	if offIsNegative(c.MaxReadsInFlight) != -1 || offIsNegative(c.MaxWritesInFlight) != 5 || offIsNegative(c.FullHomeReads) != -1 ||
		offIsNegative(c.ReadsRunning) != -1 {
		t.Fatalf("0 and 5: reads %d writes %d full %d running %d", c.MaxReadsInFlight, c.MaxWritesInFlight, c.FullHomeReads, c.ReadsRunning)
	}
	for _, bad := range [][2]string{
		{"FEED_MAX_READS_IN_FLIGHT", "-1"}, {"FEED_MAX_WRITES_IN_FLIGHT", "many"}, {"FEED_FULL_HOME_READS", "-3"},
		{"FEED_READS_RUNNING", "-2"},
	} {
		t.Run(bad[0], func(t *testing.T) {
			t.Setenv(bad[0], bad[1])
			if _, err := LoadConfig(); err == nil {
				t.Fatalf("%s=%s accepted", bad[0], bad[1])
			}
		})
	}
	t.Setenv("FEED_MAX_READS_IN_FLIGHT", "10")
	t.Setenv("FEED_FULL_HOME_READS", "11")
	if _, err := LoadConfig(); err == nil || !strings.Contains(err.Error(), "FEED_FULL_HOME_READS") {
		t.Fatalf("a degrade point above the read bound: %v", err)
	}
}

// FEED_KAFKA_FETCH_MIN_BYTES and FEED_KAFKA_FETCH_MAX_WAIT: unset are the
// defaults; out of range or not a number is refused, naming the variable.
func TestKafkaFetchEnv(t *testing.T) {
	c, err := LoadConfig()
	if err != nil || c.KafkaFetchMinBytes != kafka.FetchMinBytes || c.KafkaFetchMaxWait != kafka.FetchMaxWait {
		t.Fatalf("unset: %d, %v, %v; want the defaults", c.KafkaFetchMinBytes, c.KafkaFetchMaxWait, err)
	}
	t.Setenv("FEED_KAFKA_FETCH_MIN_BYTES", "1")
	t.Setenv("FEED_KAFKA_FETCH_MAX_WAIT", "250ms")
	if c, err = LoadConfig(); err != nil || c.KafkaFetchMinBytes != 1 || c.KafkaFetchMaxWait != 250*time.Millisecond {
		t.Fatalf("1, 250ms: %d, %v, %v", c.KafkaFetchMinBytes, c.KafkaFetchMaxWait, err)
	}
	for key, bads := range map[string][]string{
		"FEED_KAFKA_FETCH_MIN_BYTES": {"0", "-5", "2000000", "lots"},
		"FEED_KAFKA_FETCH_MAX_WAIT":  {"0s", "500us", "11s", "soon"},
	} {
		for _, bad := range bads {
			t.Run(key+"="+bad, func(t *testing.T) {
				t.Setenv(key, bad)
				if _, err := LoadConfig(); err == nil || !strings.Contains(err.Error(), key) {
					t.Errorf("%s=%q: %v; want a refusal naming it", key, bad, err)
				}
			})
		}
	}
}
