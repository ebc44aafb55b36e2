package faults

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/testkit/testenv"
)

// startRedisCluster runs a 3-node Redis Cluster of the test's own (three
// redis-servers on free ports, as scripts/redis-cluster.sh makes the
// development one) and returns its URL in go-redis's cluster form and its
// nodes. The roles write their keys without a prefix, so they get a
// cluster of their own rather than the shared one of 17001-17003, which
// other tests use at the same time. The nodes are killed at cleanup.
func startRedisCluster(t *testing.T) (string, []string) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed", bin)
		}
	}
	var addrs []string
	for range 3 {
		addr := freePort(t)
		port := addr[strings.LastIndexByte(addr, ':')+1:]
		dir := t.TempDir()
		cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--dir", dir, "--save", "", "--appendonly", "no")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server %s: %v", addr, err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		n := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		testenv.Eventually(t, 10*time.Second, "redis-server "+addr+" up", func() bool {
			return n.Ping(context.Background()).Err() == nil
		})
		_ = n.Close()
		addrs = append(addrs, addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, addr := range addrs {
		n := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		testenv.Eventually(t, 30*time.Second, "cluster_state:ok on "+addr, func() bool {
			info, err := n.ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
		_ = n.Close()
	}
	url := "redis://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2]
	return url, addrs
}
