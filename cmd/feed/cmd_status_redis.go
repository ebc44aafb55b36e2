package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// nodeStats is what `feed status` shows of one Redis node: its keys
// (DBSIZE), memory (INFO used_memory) and commands processed since it
// started (INFO total_commands_processed), the figures whose balance over
// a cluster's masters says the hash tags spread the accounts.
type nodeStats struct {
	Addr     string
	Keys     int64
	Memory   int64
	Commands int64
}

// printRedisStatus writes the Redis section of `feed status`: single node
// or cluster, and per node (every master of a cluster) its keys, memory
// and commands, with each one's share of the total.
func printRedisStatus(ctx context.Context, a *App, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rdb, done, err := a.statusRedis(ctx)
	if err != nil {
		return err
	}
	defer done()
	nodes, err := redisNodeStats(ctx, rdb)
	if err != nil {
		return err
	}
	mode := "single node"
	if _, ok := rdb.(*redis.ClusterClient); ok {
		mode = fmt.Sprintf("cluster, %d masters", len(nodes))
	}
	var keys, mem, cmds int64
	for _, n := range nodes {
		keys, mem, cmds = keys+n.Keys, mem+n.Memory, cmds+n.Commands
	}
	share := func(v, total int64) string {
		if total == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f%%", 100*float64(v)/float64(total))
	}
	fmt.Fprintf(w, "redis (%s; keys, memory, commands processed per node):\n", mode)
	for _, n := range nodes {
		fmt.Fprintf(w, "  %-21s keys %d (%s)  memory %d MB (%s)  commands %d (%s)\n", n.Addr,
			n.Keys, share(n.Keys, keys), n.Memory>>20, share(n.Memory, mem), n.Commands, share(n.Commands, cmds))
	}
	return nil
}

// redisNodeStats reads nodeStats of rdb's node, or of every master of a
// cluster, sorted by address.
func redisNodeStats(ctx context.Context, rdb redis.UniversalClient) ([]nodeStats, error) {
	var mu sync.Mutex
	var out []nodeStats
	read := func(ctx context.Context, c *redis.Client) error {
		n := nodeStats{Addr: c.Options().Addr}
		var err error
		if n.Keys, err = c.DBSize(ctx).Result(); err != nil {
			return err
		}
		info, err := c.Info(ctx, "memory", "stats").Result()
		if err != nil {
			return err
		}
		n.Memory = infoInt(info, "used_memory")
		n.Commands = infoInt(info, "total_commands_processed")
		mu.Lock()
		out = append(out, n)
		mu.Unlock()
		return nil
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, read)
	case *redis.Client:
		err = read(ctx, c)
	default:
		return nil, fmt.Errorf("redis client %T: no per-node figures", rdb)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out, err
}

// infoInt is field's integer in an INFO reply (0 when absent).
func infoInt(info, field string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
