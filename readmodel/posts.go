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
	// Version is the post's stream version whose content this is: 1 (or
	// absent, bodies written before edits existed) as created, n after
	// the edit appended at version n.
	Version int64 `json:"version,omitempty"`
	// EditedAt is the time of that edit (RFC 3339, UTC, milliseconds),
	// absent for a post never edited.
	EditedAt string `json:"editedAt,omitempty"`
	// ReplyTo is the parent of a reply, ReplyToAuthor its author and
	// ReplyRoot the thread's root; absent for a post that replies to
	// nothing.
	ReplyTo       int64 `json:"replyTo,string,omitempty"`
	ReplyToAuthor int64 `json:"replyToAuthor,string,omitempty"`
	ReplyRoot     int64 `json:"replyRoot,string,omitempty"`
	// QuoteOf is the quoted post and QuoteAuthor its author; absent for a
	// post that quotes nothing.
	QuoteOf     int64 `json:"quoteOf,string,omitempty"`
	QuoteAuthor int64 `json:"quoteAuthor,string,omitempty"`
	// Media are the post's attachments (references, at most 4).
	Media []Media `json:"media,omitempty"`
	// RepostOf is set on a repost's own entry (post.reposted.v1, cached
	// at post:{repostId}: AuthorID the reposter, CreatedAt the repost's
	// time, no content): the original's id, and RepostOfAuthor its
	// author. An undone repost is a tombstone (Deleted) that keeps them.
	RepostOf       int64 `json:"repostOf,string,omitempty"`
	RepostOfAuthor int64 `json:"repostOfAuthor,string,omitempty"`
}

// Media is one attachment of a post: a reference to an object stored
// elsewhere, as post.created.v2 carries it.
type Media struct {
	URL      string `json:"url"`
	MIMEType string `json:"mimeType"`
	Alt      string `json:"alt"`
	Width    int    `json:"width"`
	Height   int    `json:"height"`
}

// ContentVersion is the version of the content p holds (1 when absent).
func (p Post) ContentVersion() int64 { return max(p.Version, 1) }

// PostCache is the post cache read model, `post:{p}`: JSON Post bodies the
// query side hydrates feed pages from. Create is SET NX, an edit replaces
// the body only when its version is above the cached one and the post is
// not a tombstone (Edit), and delete overwrites with a tombstone
// (Deleted, no content), so a Create redelivered after an Edit or the
// Delete, or an older Edit after a newer one, changes nothing.
//
// With a Horizon (WithHorizon) every body (a post's, a repost's, a
// tombstone) is written with SET ... PXAT the post's creation ms + H, the
// edit script too, and a write whose expiry is past writes nothing: a
// redelivered old create never resurrects a body, and the query side
// reads a post older than the horizon from PostgreSQL.
type PostCache struct {
	keys Keys
	hz   Horizon
}

// processor is a client or a pipeline: what put sends its SET through.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// NewPostCache returns the post cache operations under keys, without a
// horizon.
func NewPostCache(keys Keys) PostCache { return PostCache{keys: keys} }

// WithHorizon returns m writing with horizon h.
func (m PostCache) WithHorizon(h Horizon) PostCache { m.hz = h; return m }

// put writes p's body with SET (SET NX when nx) on c, expiring at its
// horizon: a client (the write's error), or a pipeline (only the
// encoding's error; the write's comes with Exec). Nothing when the expiry
// is past.
func (m PostCache) put(ctx context.Context, c processor, p Post, nx bool) error {
	at := m.hz.ExpiryOf(p.ID)
	if m.hz.past(at) {
		return nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode post %d: %w", p.ID, err)
	}
	args := []any{"set", m.keys.Post(p.ID), b}
	if at != 0 {
		args = append(args, "pxat", at)
	}
	if nx {
		args = append(args, "nx")
	}
	// A BoolCmd, as go-redis's SetNX: SET NX finding the key answers nil,
	// which is false here, not an error of the pipeline.
	cmd := redis.NewBoolCmd(ctx, args...)
	_ = c.Process(ctx, cmd)
	return cmd.Err()
}

// Create caches p unless the post is cached already (SET NX: a tombstone
// stays).
func (m PostCache) Create(ctx context.Context, rdb redis.UniversalClient, p Post) error {
	return m.put(ctx, rdb, p, true)
}

// QueueCreate queues Create on pipe.
func (m PostCache) QueueCreate(ctx context.Context, pipe redis.Pipeliner, p Post) error {
	return m.put(ctx, pipe, p, true)
}

// editScript replaces a post's body with an edited one (ARGV[2], the JSON
// of a Post at version ARGV[1]) unless the cached body is a tombstone or
// already holds that version or a later one: a redelivered or reordered
// edit never brings older content back, nor a deleted post. An absent
// body is written (the edit carries everything a body holds), so a
// Create arriving after it (SET NX) changes nothing either. A body that
// is not a readable JSON object is replaced. ARGV[3] is the expiry (Unix
// ms, '0': none).
var editScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then
  local ok, p = pcall(cjson.decode, cur)
  if ok and type(p) == 'table' then
    if p.deleted == true then return 0 end
    local v = tonumber(p.version) or 1
    if v >= tonumber(ARGV[1]) then return 0 end
  end
end
if ARGV[3] == '0' then
  redis.call('SET', KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3])
end
return 1
`)

// Edit caches p, an edited body (p.Version above 1), unless the cached
// body is a tombstone or holds p.Version or a later one (editScript), nor
// when its expiry is past. It reports whether it wrote.
func (m PostCache) Edit(ctx context.Context, rdb redis.Cmdable, p Post) (bool, error) {
	at := m.hz.ExpiryOf(p.ID)
	if m.hz.past(at) {
		return false, nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return false, fmt.Errorf("encode post %d: %w", p.ID, err)
	}
	n, err := editScript.Run(ctx, rdb, []string{m.keys.Post(p.ID)}, p.ContentVersion(), b, at).Int()
	return n == 1, err
}

// QueueEdit queues Edit on pipe (run it with Exec, which loads the script
// when the server does not know it).
func (m PostCache) QueueEdit(ctx context.Context, pipe redis.Pipeliner, p Post) error {
	at := m.hz.ExpiryOf(p.ID)
	if m.hz.past(at) {
		return nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode post %d: %w", p.ID, err)
	}
	editScript.EvalSha(ctx, pipe, []string{m.keys.Post(p.ID)}, p.ContentVersion(), b, at)
	return nil
}

// Set caches p whatever is cached (a tombstone on delete; the bulk build).
func (m PostCache) Set(ctx context.Context, rdb redis.UniversalClient, p Post) error {
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
