package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/feedco/feed/testkit/testenv"
)

// redactDSN hides every password, in URL and keyword form, and keeps the
// rest readable.
func TestRedactDSN(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"postgres://postgres@127.0.0.1:5432/feed?sslmode=disable", "postgres://postgres@127.0.0.1:5432/feed?sslmode=disable"},
		{"postgres://feed:s3cr3tpw@db:5432/feed?sslmode=disable", "postgres://feed:xxxxx@db:5432/feed?sslmode=disable"},
		{"postgresql://feed:s3cr3tpw@db/feed", "postgresql://feed:xxxxx@db/feed"},
		{"postgres://feed@db/feed?password=s3cr3tpw&sslmode=require", "postgres://feed@db/feed?password=xxxxx&sslmode=require"},
		{"postgres://feed@db/feed?sslpassword=s3cr3tpw", "postgres://feed@db/feed?sslpassword=xxxxx"},
		{"redis://default:s3cr3tpw@127.0.0.1:6379/0", "redis://default:xxxxx@127.0.0.1:6379/0"},
		{"rediss://:s3cr3tpw@cache.example:6380", "rediss://:xxxxx@cache.example:6380"},
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"redis://u:s3cr%zzpw@host:6379", "redis://xxxxx@host:6379"}, // not a URL: hide the userinfo
		{"redis://u:s3cr3tpw@host:6379/0#frag", "redis://u:xxxxx@host:6379/0#xxxxx"},
		{"host=127.0.0.1 port=5432 user=postgres password=hunter2 dbname=feed", "host=127.0.0.1 port=5432 user=postgres password=xxxxx dbname=feed"},
		{"host=127.0.0.1 password='hunter 2' dbname=feed", "host=127.0.0.1 password=xxxxx dbname=feed"},
		{`password='it\'s hunter2' host=db`, "password=xxxxx host=db"},
		{"password = hunter2 host=db", "password = xxxxx host=db"},
		{"PASSWORD=hunter2", "PASSWORD=xxxxx"},
		{"host=db sslpassword=hunter2", "host=db sslpassword=xxxxx"},
		{`password=hun\ ter2 host=db`, "password=xxxxx host=db"},
		{"host=db password='hunter2", "(unparseable connection string, redacted)"},
		{"host=db hunter2", "(unparseable connection string, redacted)"},
		{"host=db application_name=a://b password=hunter2", "host=db application_name=a://b password=xxxxx"},
		{"", ""},
	} {
		got := redactDSN(tc.in)
		if got != tc.want {
			t.Errorf("redactDSN(%q) = %q, want %q", tc.in, got, tc.want)
		}
		for _, secret := range []string{"s3cr3tpw", "hunter", "s3cr"} {
			if strings.Contains(got, secret) {
				t.Errorf("redactDSN(%q) = %q: shows %q", tc.in, got, secret)
			}
		}
	}
}

// The default slot is named after the parsed database, whatever the form
// of DATABASE_URL; a DSN that does not parse is refused without its
// password.
func TestSlotFromDSN(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://postgres@127.0.0.1:5432/feed?sslmode=disable", "feed_cdc_feed"},
		{"host=127.0.0.1 port=5432 user=postgres password=hunter2 dbname=feed sslmode=disable", "feed_cdc_feed"},
		{"host=127.0.0.1 user=postgres dbname='Feed-Bench' sslmode=disable", "feed_cdc_feed_bench"},
		{"postgres://postgres@127.0.0.1:5432/feed-bench?sslmode=disable", "feed_cdc_feed_bench"},
		{"postgres://postgres@127.0.0.1:5432/" + strings.Repeat("x", 80), "feed_cdc_" + strings.Repeat("x", 54)},
	} {
		got, err := slotFromDSN(tc.dsn)
		if err != nil || got != tc.want {
			t.Errorf("slotFromDSN(%q) = %q, %v; want %q", tc.dsn, got, err, tc.want)
		}
	}
	for _, dsn := range []string{
		"postgres://feed:s3cr3tpw@127.0.0.1:bad/feed",
		"host=127.0.0.1 port=bad password='s3cr3tpw x'",
		"host=127.0.0.1 port=5432 password=s3cr3tpw sslmode=bogus",
	} {
		_, err := slotFromDSN(dsn)
		if err == nil || strings.Contains(err.Error(), "s3cr3tpw") || !strings.HasPrefix(err.Error(), "DATABASE_URL ") {
			t.Errorf("slotFromDSN(%q): %v; want an error without the password", dsn, err)
		}
	}
}

// Connection errors name the server without its password.
func TestConnectErrorsRedacted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{RedisURL: "redis://default:s3cr3tpw@127.0.0.1:1/0"}, "connect to Redis at redis://default:xxxxx@127.0.0.1:1/0: "},
		{Config{RedisURL: "rediss://:s3cr3tpw@127.0.0.1:1/0"}, "connect to Redis at rediss://:xxxxx@127.0.0.1:1/0: "},
		{Config{RedisURL: "redis://default:s3cr3tpw@127.0.0.1:1/zero"}, "REDIS_URL redis://default:xxxxx@127.0.0.1:1/zero: "},
		{Config{RedisURL: "redis://default:s3cr3tpw@127.0.0.1:bad/0"}, "REDIS_URL redis://xxxxx@127.0.0.1:bad/0: not a valid URL"},
	} {
		_, err := openRedis(ctx, tc.cfg, 1)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cr3tpw") {
			t.Errorf("openRedis(%s): %v; want %q... without the password", tc.cfg.RedisURL, err, tc.want)
		}
	}
	for _, tc := range []struct {
		dsn  string
		want string
	}{
		{"postgres://feed:s3cr3tpw@127.0.0.1:1/feed?sslmode=disable", "connect to PostgreSQL at postgres://feed:xxxxx@127.0.0.1:1/feed?sslmode=disable: "},
		{"host=127.0.0.1 port=1 user=feed password='s3cr3tpw' dbname=feed sslmode=disable", "connect to PostgreSQL at host=127.0.0.1 port=1 user=feed password=xxxxx dbname=feed sslmode=disable: "},
		{"host=127.0.0.1 port=1 password=s3cr3tpw sslmode=bogus", "DATABASE_URL host=127.0.0.1 port=1 password=xxxxx sslmode=bogus: "},
	} {
		_, err := openPostgres(ctx, Config{DatabaseURL: tc.dsn}, 1, false)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cr3tpw") {
			t.Errorf("openPostgres(%s): %v; want %q... without the password", tc.dsn, err, tc.want)
		}
	}
}

// A command's PostgreSQL connections carry its name as application_name
// ("feed api"), so pg_stat_activity tells the roles apart, unless
// DATABASE_URL names one itself.
func TestPostgresApplicationName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	name := func(cfg Config) string {
		t.Helper()
		pool, err := openPostgres(ctx, cfg, 1, false)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		var s string
		if err := pool.QueryRow(ctx, `SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := name(Config{DatabaseURL: db.URL, AppName: "feed api"}); got != "feed api" {
		t.Errorf("application_name %q, want the command's %q", got, "feed api")
	}
	sep := "?"
	if strings.Contains(db.URL, "?") {
		sep = "&"
	}
	if got := name(Config{DatabaseURL: db.URL + sep + "application_name=ops-console", AppName: "feed api"}); got != "ops-console" {
		t.Errorf("application_name %q, want DATABASE_URL's %q", got, "ops-console")
	}

	// The command that runs is the name.
	c := &cli{stdout: io.Discard, stderr: io.Discard, loadConfig: func() (Config, error) {
		return Config{JWTSecret: "application-name-secret-0123"}, nil
	}}
	root := newRootCommand(c)
	root.SetArgs([]string{"token", "--user", "7"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := c.config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AppName != "feed token" {
		t.Errorf("Config.AppName %q after `feed token`, want %q", cfg.AppName, "feed token")
	}
}
