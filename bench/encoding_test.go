package bench

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/internal/testenv"
	"github.com/feedco/feed/readmodel"
)

// The report says how Redis holds the inboxes: a small inbox is a
// listpack, one with a member over zset-max-listpack-value (64 bytes) a
// skiplist, whatever the server's entry limit; a reader without an inbox
// is not counted.
func TestInboxEncoding(t *testing.T) {
	r := testenv.NewRedis(t)
	ctx := context.Background()
	keys := readmodel.Keys{Prefix: r.Prefix}
	if err := r.Client.ZAdd(ctx, keys.Inbox(1), redis.Z{Score: 1, Member: "7000000000000000001"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Client.ZAdd(ctx, keys.Inbox(2), redis.Z{Score: 1, Member: strings.Repeat("x", 100)}).Err(); err != nil {
		t.Fatal(err)
	}
	enc, err := inboxEncoding(ctx, r.Client, keys, []int64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if enc.Sampled != 2 || enc.Listpack != 1 || enc.Skiplist != 1 {
		t.Fatalf("got %+v, want 2 sampled: 1 listpack, 1 skiplist", enc)
	}
	want, err := r.Client.ConfigGet(ctx, "zset-max-listpack-entries").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := enc.ZsetMaxListpackEntries; strconv.Itoa(got) != want["zset-max-listpack-entries"] {
		t.Fatalf("zset-max-listpack-entries %d, server says %q", got, want["zset-max-listpack-entries"])
	}
	var b strings.Builder
	(&Report{Mixed: &Mixed{}, Inboxes: &enc}).WriteTable(&b)
	if !strings.Contains(b.String(), "inboxes: 1 of 2 sampled listpack, 1 skiplist") {
		t.Fatalf("table without the inbox line:\n%s", b.String())
	}
}
