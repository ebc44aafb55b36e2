package bench

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
)

// InboxEncoding is how Redis holds the readers' inboxes when the mixed
// phase starts. A run is read with it: a listpack inbox costs Redis
// several times the CPU of a skiplist one per ZADD and about a fifth of
// its memory, and the packed layout less than either
// (docs/benchmarks.md, Projections).
type InboxEncoding struct {
	// Layout is the inbox layout: "packed" (reports of earlier releases
	// may say "zset").
	Layout string `json:"layout"`
	// ZsetMaxListpackEntries is the server's zset-max-listpack-entries,
	// -1 when CONFIG GET is refused (managed Redis services).
	ZsetMaxListpackEntries int `json:"zsetMaxListpackEntries"`
	// Sampled inboxes that exist, and how many of the sorted sets are
	// each encoding.
	Sampled  int `json:"sampled"`
	Listpack int `json:"listpack"`
	Skiplist int `json:"skiplist"`
	// Entries are the post ids the sampled inboxes hold, Bytes their keys'
	// MEMORY USAGE (0 when the server refuses it).
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"`
}

// BytesPerEntry is the sampled inboxes' memory per post id held (0 when
// unknown).
func (e InboxEncoding) BytesPerEntry() float64 {
	if e.Entries == 0 || e.Bytes == 0 {
		return 0
	}
	return float64(e.Bytes) / float64(e.Entries)
}

// inboxSample is how many readers' inboxes are sampled.
const inboxSample = 100

// inboxEncoding asks Redis for its zset-max-listpack-entries and, for the
// inboxes of up to inboxSample of users in store's layout (missing inboxes
// are not counted), their encoding (sorted sets), entries and memory.
func inboxEncoding(ctx context.Context, rdb redis.UniversalClient, keys readmodel.Keys, store homefeed.Inboxes, users []int64) (InboxEncoding, error) {
	enc := InboxEncoding{Layout: homefeed.Layout, ZsetMaxListpackEntries: -1}
	if cfg, err := rdb.ConfigGet(ctx, "zset-max-listpack-entries").Result(); err == nil {
		if n, err := strconv.Atoi(cfg["zset-max-listpack-entries"]); err == nil {
			enc.ZsetMaxListpackEntries = n
		}
	}
	memoryKnown := true
	for _, u := range users[:min(len(users), inboxSample)] {
		s, b := store.Keys(u)
		ks := []string{s, b}
		pipe := rdb.Pipeline()
		encCmd := pipe.ObjectEncoding(ctx, ks[0])
		usage := make([]*redis.IntCmd, len(ks))
		for i, k := range ks {
			usage[i] = pipe.MemoryUsage(ctx, k, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !isRefused(err) {
			return enc, err
		}
		if encCmd.Val() == "" {
			continue // no such key
		}
		enc.Sampled++
		switch encCmd.Val() {
		case "listpack", "ziplist":
			enc.Listpack++
		case "skiplist":
			enc.Skiplist++
		}
		posts, err := store.Posts(ctx, rdb, u)
		if err != nil {
			return enc, err
		}
		enc.Entries += len(posts)
		for _, c := range usage {
			if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
				memoryKnown = false
			}
			enc.Bytes += c.Val()
		}
	}
	if !memoryKnown {
		enc.Bytes = 0
	}
	return enc, nil
}

// isRefused reports a command the server does not allow (MEMORY USAGE on
// some managed services): what it would have told is left unknown.
func isRefused(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}
