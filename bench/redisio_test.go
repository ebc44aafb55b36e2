package bench

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/testkit/testenv"
)

// TestRedisIOCalls: every command on a connection is a read and a write of the
// server's, so 200 commands move both counters by at least 200.
func TestRedisIOCalls(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	if _, ok := r.Client.(*redis.ClusterClient); ok {
		t.Skip("INFO reaches one node of a cluster, the commands others")
	}
	r0, w0, err := redisIOCalls(ctx, r.Client)
	if err != nil {
		t.Fatal(err)
	}
	for range 200 {
		if err := r.Client.Set(ctx, r.Prefix+"io", "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r1, w1, err := redisIOCalls(ctx, r.Client)
	if err != nil {
		t.Fatal(err)
	}
	if r1-r0 < 200 || w1-w0 < 200 {
		t.Fatalf("after 200 commands: reads +%d, writes +%d; want at least 200 each", r1-r0, w1-w0)
	}
}
