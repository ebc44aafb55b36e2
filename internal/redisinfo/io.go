package redisinfo

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// IOCalls is how many read and write events the server has processed so
// far (INFO stats total_reads_processed and total_writes_processed: a
// read or write of a client connection each, about one system call).
// On a cluster client it is the node the command reaches.
func IOCalls(ctx context.Context, rdb redis.UniversalClient) (reads, writes int64, err error) {
	info, err := rdb.Info(ctx, "stats").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("redis INFO stats: %w", err)
	}
	found := 0
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "total_reads_processed" && k != "total_writes_processed") {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("redis INFO stats %s: %w", k, err)
		}
		if k == "total_reads_processed" {
			reads = n
		} else {
			writes = n
		}
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("redis INFO stats: no total_reads_processed and total_writes_processed (Redis before 6.2?)")
	}
	return reads, writes, nil
}
