package bench

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

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

// The sample counts the ids of both strings and
// their memory, and the table gives the bytes per entry.
func TestInboxEncodingPacked(t *testing.T) {
	r := testenv.NewRedis(t)
	ctx := context.Background()
	keys := readmodel.Keys{Prefix: r.Prefix}
	store := homefeed.NewInboxes(keys, readmodel.Policy{})
	for _, u := range []int64{1, 2} {
		if err := store.WriteRebuilt(ctx, r.Client, u, entries(100)); err != nil {
			t.Fatal(err)
		}
	}
	enc, err := inboxEncoding(ctx, r.Client, keys, store, []int64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if enc.Layout != "packed" || enc.Sampled != 2 || enc.Entries != 200 {
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

// The raw baseline reads the inbox and the bodies of its 20 newest posts.
func TestRawReadReadsTheActiveLayout(t *testing.T) {
	{
		func() {
			r := testenv.NewRedis(t)
			ctx := context.Background()
			keys := readmodel.Keys{Prefix: r.Prefix}
			store := homefeed.NewInboxes(keys, readmodel.Policy{})
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
		}()
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
