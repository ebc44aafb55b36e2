package readmodel

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Post is the cached body of a post, stored as JSON at `post:{p}`.
type Post struct {
	ID        int64  `json:"id,string"`
	AuthorID  int64  `json:"authorId,string"`
	Content   string `json:"content"`
	CreatedAt string `json:"createdAt"` // RFC 3339, UTC, milliseconds
	Deleted   bool   `json:"deleted"`
}

// PostCache is the post cache read model, `post:{p}`: JSON Post bodies the
// query side hydrates feed pages from. Create is SET NX and delete
// overwrites with a tombstone (Deleted, no content), so a Create
// redelivered after the Delete never resurrects the post. No TTL.
type PostCache struct{ keys Keys }

// NewPostCache returns the post cache operations under keys.
func NewPostCache(keys Keys) PostCache { return PostCache{keys: keys} }

// put writes p's body with SET (SET NX when nx) on c: a client (the
// write's error), or a pipeline (only the encoding's error; the write's
// comes with Exec).
func (m PostCache) put(ctx context.Context, c redis.Cmdable, p Post, nx bool) error {
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode post %d: %w", p.ID, err)
	}
	if nx {
		return c.SetNX(ctx, m.keys.Post(p.ID), b, 0).Err()
	}
	return c.Set(ctx, m.keys.Post(p.ID), b, 0).Err()
}

// Create caches p unless the post is cached already (SET NX: a tombstone
// stays).
func (m PostCache) Create(ctx context.Context, rdb redis.Cmdable, p Post) error {
	return m.put(ctx, rdb, p, true)
}

// QueueCreate queues Create on pipe.
func (m PostCache) QueueCreate(ctx context.Context, pipe redis.Pipeliner, p Post) error {
	return m.put(ctx, pipe, p, true)
}

// Set caches p whatever is cached (a tombstone on delete; the bulk build).
func (m PostCache) Set(ctx context.Context, rdb redis.Cmdable, p Post) error {
	return m.put(ctx, rdb, p, false)
}

// QueueSet queues Set on pipe. MSET would be one command, but with keys of
// many slots a cluster client refuses it; a pipeline of SETs is split per
// node instead.
func (m PostCache) QueueSet(ctx context.Context, pipe redis.Pipeliner, p Post) error {
	return m.put(ctx, pipe, p, false)
}

// BodyReads are queued reads of post bodies (QueueGet).
type BodyReads struct {
	mget *redis.SliceCmd
	gets []*redis.StringCmd
}

// QueueGet queues the read of the bodies of posts: one MGET when single
// (a single-node client), else one GET each (keys of many slots).
func (m PostCache) QueueGet(ctx context.Context, pipe redis.Pipeliner, posts []int64, single bool) BodyReads {
	if len(posts) == 0 {
		return BodyReads{}
	}
	if single {
		ks := make([]string, len(posts))
		for j, p := range posts {
			ks[j] = m.keys.Post(p)
		}
		return BodyReads{mget: pipe.MGet(ctx, ks...)}
	}
	gets := make([]*redis.StringCmd, len(posts))
	for j, p := range posts {
		gets[j] = pipe.Get(ctx, m.keys.Post(p))
	}
	return BodyReads{gets: gets}
}

// At returns the j-th body, false when the key is absent.
func (r BodyReads) At(j int) ([]byte, bool) {
	if r.mget != nil {
		vals := r.mget.Val()
		if j >= len(vals) {
			return nil, false
		}
		s, ok := vals[j].(string)
		return []byte(s), ok
	}
	raw, err := r.gets[j].Bytes()
	return raw, err == nil
}
