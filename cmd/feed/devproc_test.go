package main

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/testkit/testenv"
)

// devProcess is a `feed dev` a test runs in-process on a database and a
// redis-server of its own, with the embedded broker.
type devProcess struct {
	DB       *testenv.DB
	RedisURL string
	// API is the API's base URL, Admin the admin listener's, Broker the
	// embedded broker's address.
	API, Admin, Broker string
	Stderr             *testenv.SyncBuffer
}

// startDev starts `feed dev` with FEED_VERIFY_EVERY set to verifyEvery
// ("" for none) and returns once its API listens and its broker is
// known. It stops when the test ends; its stderr is logged if the test
// failed.
func startDev(t *testing.T, verifyEvery string) *devProcess {
	t.Helper()
	d := &devProcess{DB: testenv.NewDB(t), Stderr: &testenv.SyncBuffer{}}
	rs := testenv.StartRedisServer(t)
	d.RedisURL = "redis://" + rs.Addr() + "/0"
	t.Setenv("DATABASE_URL", fmt.Sprintf("host=127.0.0.1 port=5432 user=postgres dbname=%s sslmode=disable", d.DB.Name))
	t.Setenv("REDIS_URL", d.RedisURL)
	t.Setenv("KAFKA_BROKERS", "")
	t.Setenv("HTTP_ADDR", "127.0.0.1:0")
	t.Setenv("FEED_KAFKA_ADDR", "127.0.0.1:0")
	t.Setenv("FEED_STATE_DIR", t.TempDir())
	t.Setenv("FEED_JWT_SECRET", "")
	t.Setenv("FEED_ALLOW_DEV_SECRET", "")
	t.Setenv("FEED_VERIFY_EVERY", verifyEvery)

	ctx, cancel := context.WithCancel(context.Background())
	var stdout testenv.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- execute(ctx, []string{"dev"}, &stdout, d.Stderr, LoadConfig) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Errorf("feed dev did not stop")
		}
		if t.Failed() {
			t.Logf("feed dev stderr:\n%s", d.Stderr.String())
		}
	})
	listening := regexp.MustCompile(`api: listening on (http://\S+)`)
	adminListening := regexp.MustCompile(`admin: listening on (http://\S+)`)
	broker := regexp.MustCompile(`dev: starting.* kafka=\[(\S+)\]`)
	testenv.Eventually(t, 60*time.Second, "feed dev starts", func() bool {
		select {
		case code := <-done:
			t.Fatalf("feed dev exited with %d:\n%s", code, d.Stderr.String())
		default:
		}
		if m := listening.FindStringSubmatch(stdout.String()); m != nil {
			d.API = m[1]
		}
		if m := adminListening.FindStringSubmatch(stdout.String()); m != nil {
			d.Admin = m[1]
		}
		if m := broker.FindStringSubmatch(d.Stderr.String()); m != nil {
			d.Broker = m[1]
		}
		return d.API != "" && d.Admin != "" && d.Broker != ""
	})
	return d
}

// authorAndReader registers two users through the command side on the
// dev process's database, the reader following the author, and returns
// the commands for more writes.
func (d *devProcess) authorAndReader(t *testing.T) (*commands.Commands, commands.User, commands.User) {
	t.Helper()
	ctx := context.Background()
	ids, err := snowflake.New(7)
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := commands.New(d.DB.Pool, ids, commands.Config{})
	if err != nil {
		t.Fatal(err)
	}
	author, err := cmds.RegisterUser.Handle(ctx, commands.RegisterUser{Name: "author"})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := cmds.RegisterUser.Handle(ctx, commands.RegisterUser{Name: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cmds.Follow.Handle(ctx, commands.Follow{FollowerID: reader.ID, FolloweeID: author.ID}); err != nil {
		t.Fatal(err)
	}
	return cmds, author, reader
}
