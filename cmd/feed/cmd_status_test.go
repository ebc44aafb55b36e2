package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/status"
	"github.com/feedco/feed/testkit/testenv"
)

// The CDC section of `feed status` says when the slot is missing, and
// otherwise shows it inactive (no CDC running) with its lag and the
// progress not yet recorded.
func TestCDCStatusSection(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	a := &App{Cfg: Config{Slot: "feed_cdc_" + db.Name, Topic: "feed.events", LagWarnBytes: 1 << 30}, Pool: db.Pool}
	var out bytes.Buffer
	if err := printCDCStatus(ctx, a, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "missing") {
		t.Fatalf("no slot yet:\n%s", out.String())
	}
	if _, err := db.Pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, a.Cfg.Slot); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := printCDCStatus(ctx, a, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"INACTIVE", "confirmed LSN", " bytes, ", "none recorded yet"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("want %q in:\n%s", want, out.String())
		}
	}
}

// The projections section of `feed status` shows the active versions from
// PostgreSQL (this database), whatever the Redis registry holds.
func TestProjectionStatusSectionReadsPostgreSQL(t *testing.T) {
	t.Parallel()
	db, r := testenv.NewDB(t), testenv.NewRedis(t)
	ctx := context.Background()
	if err := readmodel.ActivateVersion(ctx, db.Pool, readmodel.ProjectionTimelines, 1, 2, readmodel.Policy{}); err != nil {
		t.Fatal(err)
	}
	a := &App{Cfg: Config{Topic: "feed.events", KafkaAddr: "127.0.0.1:1"}, Pool: db.Pool, Redis: r.Client}
	var out bytes.Buffer
	_ = printProjectionStatus(ctx, a, &out) // the lag is unknown without Kafka
	for _, want := range []string{"timelines  v2 ", "feed.projection.timelines.v2", "posts      v1 "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("want %q in:\n%s", want, out.String())
		}
	}
}

// The Redis section of `feed status` on the cluster shows every master
// with its keys, and the keys of a namespace written through the cluster
// client land on every master.
func TestRedisStatusSectionCluster(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedisCluster(t)
	ctx := context.Background()
	keys := readmodel.Keys{Prefix: r.Prefix}
	pipe := r.Client.Pipeline()
	for u := int64(1); u <= 300; u++ {
		pipe.Set(ctx, homefeed.Key(keys, u), "1", 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	a := &App{Redis: r.Client}
	var out bytes.Buffer
	if err := printRedisStatus(ctx, a, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "cluster, 3 masters") || strings.Count(out.String(), " keys ") != 3 {
		t.Fatalf("want the 3 masters of the local cluster:\n%s", out.String())
	}
	nodes, err := readmodel.CountKeys(ctx, r.Client, r.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Keys < 50 {
			t.Errorf("node %s holds %d of 300 inboxes: %v", n.Addr, n.Keys, nodes)
		}
	}
}

// REDIS_URL in go-redis's cluster form gives a cluster client, a single
// address a plain one.
func TestOpenRedisClusterForm(t *testing.T) {
	t.Parallel()
	testenv.NewRedisCluster(t) // skips (fails in CI) without the cluster
	ctx := context.Background()
	c, err := openRedis(ctx, Config{RedisURL: testenv.RedisClusterURL()}, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*redis.ClusterClient); !ok {
		t.Errorf("REDIS_URL %s: got %T, want a cluster client", testenv.RedisClusterURL(), c)
	}
	s, err := openRedis(ctx, Config{RedisURL: testenv.RedisURL()}, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*redis.Client); !ok {
		t.Errorf("REDIS_URL %s: got %T, want a single-node client", testenv.RedisURL(), s)
	}
	if _, err := openRedis(ctx, Config{RedisURL: "redis://127.0.0.1:17001?addr=127.0.0.1:17002&bogus=1"}, 4); err == nil {
		t.Error("a cluster URL with an unknown option was accepted")
	}
}

// printCDCStatus, printProjectionStatus, printPoisonStatus and
// printRedisStatus write one section of `feed status` as the command
// does, and return its error.
func printCDCStatus(ctx context.Context, a *App, w io.Writer) error {
	sc, done := a.statusConfig(ctx)
	defer done()
	return status.GatherCDC(ctx, sc).WriteText(w, time.Now())
}

func printProjectionStatus(ctx context.Context, a *App, w io.Writer) error {
	sc, done := a.statusConfig(ctx)
	defer done()
	return status.GatherProjections(ctx, sc).WriteText(w, time.Now())
}

func printPoisonStatus(ctx context.Context, a *App, w io.Writer) error {
	sc, done := a.statusConfig(ctx)
	defer done()
	return status.GatherPoison(ctx, sc).WriteText(w, time.Now())
}

func printRedisStatus(ctx context.Context, a *App, w io.Writer) error {
	sc, done := a.statusConfig(ctx)
	defer done()
	return status.GatherRedis(ctx, sc).WriteText(w, time.Now())
}
