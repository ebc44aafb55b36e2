package testenv

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// defaultClusterURL is the cluster scripts/redis-cluster.sh starts (and
// scripts/prepare.sh, so `make test`), in go-redis's cluster form.
const defaultClusterURL = "redis://127.0.0.1:17001?addr=127.0.0.1:17002&addr=127.0.0.1:17003"

// RedisClusterURL is the Redis Cluster the cluster tests use:
// FEED_TEST_REDIS_CLUSTER_URL, by default the local cluster of
// scripts/redis-cluster.sh.
func RedisClusterURL() string {
	if u := os.Getenv("FEED_TEST_REDIS_CLUSTER_URL"); u != "" {
		return u
	}
	return defaultClusterURL
}

// inCI reports whether the tests run in CI (CI set, as CI services do),
// where a missing cluster is a failure, not a skip.
func inCI() bool { return os.Getenv("CI") != "" }

// NewRedisCluster returns a cluster client (*redis.ClusterClient) of
// RedisClusterURL and a unique key prefix, like NewRedis; every key under
// the prefix is deleted, on every master, when the test ends. When the
// cluster does not answer, or its state is not ok, the test is skipped
// with how to start it, or fails in CI.
func NewRedisCluster(t testing.TB) *Redis {
	t.Helper()
	opt, err := redis.ParseClusterURL(RedisClusterURL())
	if err != nil {
		t.Fatalf("FEED_TEST_REDIS_CLUSTER_URL: %v", err)
	}
	opt.PoolSize = 64
	c := redis.NewClusterClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := clusterOK(ctx, c); err != nil {
		_ = c.Close()
		msg := "no Redis Cluster at " + RedisClusterURL() + " (" + err.Error() +
			"): run scripts/redis-cluster.sh start (make test does), or set FEED_TEST_REDIS_CLUSTER_URL"
		if inCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return withPrefix(t, c)
}

// clusterOK checks that every master answers and the cluster serves all
// its slots.
func clusterOK(ctx context.Context, c *redis.ClusterClient) error {
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return errNotOK
	}
	return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() })
}

type clusterError string

func (e clusterError) Error() string { return string(e) }

const errNotOK = clusterError("cluster_state is not ok")

// Keys returns every key matching pattern (a SCAN MATCH pattern): on a
// cluster, the keys of every master (a SCAN through the cluster client
// reaches one node only).
func Keys(ctx context.Context, c redis.UniversalClient, pattern string) ([]string, error) {
	var mu sync.Mutex
	var out []string
	scan := func(ctx context.Context, n redis.UniversalClient) error {
		iter := n.Scan(ctx, 0, pattern, 1000).Iterator()
		var ks []string
		for iter.Next(ctx) {
			ks = append(ks, iter.Val())
		}
		mu.Lock()
		out = append(out, ks...)
		mu.Unlock()
		return iter.Err()
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return scan(ctx, n) })
		return out, err
	}
	return out, scan(ctx, c)
}

// OpenRedis opens a client of the Redis that NewRedis gives (a cluster
// client with FEED_TEST_REDIS=cluster), for a test's child process or a
// test that needs a second client with hooks of its own.
func OpenRedis() (redis.UniversalClient, error) {
	if os.Getenv("FEED_TEST_REDIS") == "cluster" {
		opt, err := redis.ParseClusterURL(RedisClusterURL())
		if err != nil {
			return nil, err
		}
		opt.PoolSize = 64
		return redis.NewClusterClient(opt), nil
	}
	opt, err := redis.ParseURL(RedisURL())
	if err != nil {
		return nil, err
	}
	opt.PoolSize = 64
	return redis.NewClient(opt), nil
}
