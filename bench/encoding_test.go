package bench

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// The report says how Redis holds the sorted-set inboxes: a small inbox
// is a listpack, one with a member over zset-max-listpack-value (64
// bytes) a skiplist, whatever the server's entry limit; a reader without
// an inbox is not counted.
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
	enc, err := inboxEncoding(ctx, r.Client, keys, readmodel.NewInboxes(keys, readmodel.Policy{}), []int64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if enc.Layout != readmodel.InboxLayoutZset || enc.Sampled != 2 || enc.Listpack != 1 || enc.Skiplist != 1 {
		t.Fatalf("got %+v, want the zset layout, 2 sampled: 1 listpack, 1 skiplist", enc)
	}
	if enc.Entries != 1 || enc.Bytes <= 0 { // the 100-byte member is no post id
		t.Fatalf("got %d entries in %d bytes, want 1 in the MEMORY USAGE of both keys", enc.Entries, enc.Bytes)
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

// entries are n inbox entries, newest first, as Snowflake ids of their
// millisecond.
func entries(n int) []readmodel.Entry {
	es := make([]readmodel.Entry, n)
	for i := range es {
		ms := int64(1_800_000_000_000 - i)
		es[i] = readmodel.Entry{ID: ms << 22, Ms: ms}
	}
	return es
}

// In the packed layout the sample counts the ids of both strings and
// their memory, and the table gives the bytes per entry.
func TestInboxEncodingPacked(t *testing.T) {
	r := testenv.NewRedis(t)
	ctx := context.Background()
	keys := readmodel.Keys{Prefix: r.Prefix}
	store := readmodel.NewPackedInboxes(keys, readmodel.Policy{})
	for _, u := range []int64{1, 2} {
		if err := store.WriteRebuilt(ctx, r.Client, u, entries(100)); err != nil {
			t.Fatal(err)
		}
	}
	enc, err := inboxEncoding(ctx, r.Client, keys, store, []int64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if enc.Layout != readmodel.InboxLayoutPacked || enc.Sampled != 2 || enc.Entries != 200 {
		t.Fatalf("got %+v, want the packed layout, 2 sampled, 200 entries", enc)
	}
	// 8 bytes an id, plus the keys' overhead spread over 100 ids each.
	if b := enc.BytesPerEntry(); b < 8 || b > 12 {
		t.Fatalf("%.2f bytes per entry, want 8-12", b)
	}
	var b strings.Builder
	(&Report{Mixed: &Mixed{}, Inboxes: &enc}).WriteTable(&b)
	if !strings.Contains(b.String(), "inboxes: packed, 2 sampled, ") || !strings.Contains(b.String(), " bytes per entry") {
		t.Fatalf("table without the packed inbox line:\n%s", b.String())
	}
}

// The raw baseline reads the inbox of the active layout and the bodies of
// its 20 newest posts: on a packed deployment the sorted set it read
// before does not exist, and the baseline read nothing.
func TestRawReadReadsTheActiveLayout(t *testing.T) {
	for _, layout := range []string{readmodel.InboxLayoutZset, readmodel.InboxLayoutPacked} {
		t.Run(layout, func(t *testing.T) {
			r := testenv.NewRedis(t)
			ctx := context.Background()
			keys := readmodel.Keys{Prefix: r.Prefix}
			store := readmodel.NewInboxStore(keys, readmodel.Policy{InboxLayout: layout})
			es := entries(30)
			if err := store.WriteRebuilt(ctx, r.Client, 7, es); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var asked []string
			r.Client.AddHook(postKeys{keys: keys, f: func(k string) {
				mu.Lock()
				asked = append(asked, k)
				mu.Unlock()
			}})
			if err := RawRead(ctx, r.Client, keys, store, 7); err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, e := range es[:20] {
				want = append(want, keys.Post(e.ID))
			}
			slices.Sort(asked)
			slices.Sort(want)
			if !slices.Equal(asked, want) {
				t.Fatalf("bodies asked: %d keys %v\nwant the 20 newest: %v", len(asked), asked, want)
			}
		})
	}
}

// postKeys is a go-redis hook that reports every post-cache key a
// pipeline reads.
type postKeys struct {
	keys readmodel.Keys
	f    func(key string)
}

func (postKeys) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (postKeys) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h postKeys) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	prefix := strings.TrimSuffix(h.keys.Post(0), "{0}")
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			for _, a := range c.Args()[1:] {
				if k, ok := a.(string); ok && strings.HasPrefix(k, prefix) {
					h.f(k)
				}
			}
		}
		return next(ctx, cmds)
	}
}
