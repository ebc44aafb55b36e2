package bench

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/readmodel"
)

// InboxEncoding is how Redis holds the readers' inboxes when the mixed
// phase starts. A run is read with it: a listpack inbox costs Redis
// several times the CPU of a skiplist one per ZADD and about a fifth of
// its memory (docs/benchmarks.md, Projections).
type InboxEncoding struct {
	// ZsetMaxListpackEntries is the server's zset-max-listpack-entries,
	// -1 when CONFIG GET is refused (managed Redis services).
	ZsetMaxListpackEntries int `json:"zsetMaxListpackEntries"`
	// Sampled inboxes that exist, and how many of them are each encoding.
	Sampled  int `json:"sampled"`
	Listpack int `json:"listpack"`
	Skiplist int `json:"skiplist"`
}

// inboxSample is how many readers' inboxes are asked for their encoding.
const inboxSample = 100

// inboxEncoding asks Redis for its zset-max-listpack-entries and for the
// encoding of the inboxes of up to inboxSample of users (missing inboxes
// are not counted).
func inboxEncoding(ctx context.Context, rdb redis.UniversalClient, keys readmodel.Keys, users []int64) (InboxEncoding, error) {
	enc := InboxEncoding{ZsetMaxListpackEntries: -1}
	if cfg, err := rdb.ConfigGet(ctx, "zset-max-listpack-entries").Result(); err == nil {
		if n, err := strconv.Atoi(cfg["zset-max-listpack-entries"]); err == nil {
			enc.ZsetMaxListpackEntries = n
		}
	}
	users = users[:min(len(users), inboxSample)]
	cmds := make([]*redis.StringCmd, len(users))
	pipe := rdb.Pipeline()
	for i, u := range users {
		cmds[i] = pipe.ObjectEncoding(ctx, keys.Inbox(u))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return enc, err
	}
	for _, c := range cmds {
		switch c.Val() {
		case "":
			continue // no such key
		case "listpack", "ziplist":
			enc.Listpack++
		case "skiplist":
			enc.Skiplist++
		}
		enc.Sampled++
	}
	return enc, nil
}
