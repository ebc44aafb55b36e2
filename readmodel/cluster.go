package readmodel

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// On Redis Cluster a command reaches the node of its key's slot: a
// multi-key command or a script must name keys of one slot (the `{...}`
// hash tags of keys.go make one account's keys one slot), and keyless
// commands such as SCAN reach a single node. go-redis's cluster client
// splits a pipeline per node by each command's first key; MULTI/EXEC and
// scripts it does not split. What must see every key, the sweep of old
// versions and key counts, goes through eachNode.

// eachNode runs fn on every master of a cluster client, concurrently, or
// on rdb itself when it is a single node: a SCAN on the node sees the
// keys of that node's slots, and the node client runs only single-slot
// commands on them.
func eachNode(ctx context.Context, rdb redis.UniversalClient, fn func(ctx context.Context, node redis.UniversalClient) error) error {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return fn(ctx, n) })
	}
	return fn(ctx, rdb)
}

// IsCluster reports whether rdb is a Redis Cluster client, whose
// commands must each name keys of one slot.
func IsCluster(rdb redis.UniversalClient) bool {
	_, ok := rdb.(*redis.ClusterClient)
	return ok
}

// NodeKeys is one node's key count under a namespace (CountKeys).
type NodeKeys struct {
	Addr string
	Keys int64
}

// CountKeys counts the keys under prefix on each node (every master of a
// cluster), by SCAN: the per-node balance of the read models that `feed
// status` shows and the cluster tests check.
func CountKeys(ctx context.Context, rdb redis.UniversalClient, prefix string) ([]NodeKeys, error) {
	ch := make(chan NodeKeys, 64)
	err := eachNode(ctx, rdb, func(ctx context.Context, node redis.UniversalClient) error {
		var n int64
		iter := node.Scan(ctx, 0, escapeGlob(prefix)+"*", 5000).Iterator()
		for iter.Next(ctx) {
			n++
		}
		if err := iter.Err(); err != nil {
			return err
		}
		addr := ""
		if c, ok := node.(*redis.Client); ok {
			addr = c.Options().Addr
		}
		ch <- NodeKeys{Addr: addr, Keys: n}
		return nil
	})
	close(ch)
	if err != nil {
		return nil, err
	}
	var out []NodeKeys
	for nk := range ch {
		out = append(out, nk)
	}
	return out, nil
}
