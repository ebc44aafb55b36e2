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

// editScript applies an edit (ARGV[2] the content, ARGV[3] editedAt, at
// version ARGV[1]) to the cached body: it replaces the body's content,
// version and editedAt and keeps the rest (a reply's parent, a quote,
// media, which an edit does not change and its event does not carry),
// unless the body is a tombstone or already holds that version or a later
// one, so a redelivered or reordered edit never brings older content back,
// nor a deleted post. An absent body stays absent (the post's create and
// edits share a partition, so the create came first: a body absent now
// expired or was lost, and a read asks PostgreSQL, which has all of it),
// and so does one that is not a readable JSON object (deleted, for the
// same reason). ARGV[4] is the body's expiry (Unix ms): set again
// with it, so a body written before the horizon gets one; '0' (no
// horizon) keeps the body's time to live.
var editScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local ok, p = pcall(cjson.decode, cur)
if not ok or type(p) ~= 'table' then
  redis.call('DEL', KEYS[1])
  return 0
end
if p.deleted == true then return 0 end
local v = tonumber(p.version) or 1
if v >= tonumber(ARGV[1]) then return 0 end
p.content = ARGV[2]
p.version = tonumber(ARGV[1])
p.editedAt = ARGV[3]
if ARGV[4] == '0' then
  redis.call('SET', KEYS[1], cjson.encode(p), 'KEEPTTL')
else
  redis.call('SET', KEYS[1], cjson.encode(p), 'PXAT', ARGV[4])
end
return 1
`)

// Edit applies p, an edited body (p.Version above 1: its Content and
// EditedAt), to the cached body, unless that is absent, a tombstone or
// holds p.Version or a later one (editScript), nor when the post is past
// the horizon. It reports whether it wrote.
func (m PostCache) Edit(ctx context.Context, rdb redis.Cmdable, p Post) (bool, error) {
	at := m.hz.ExpiryOf(p.ID)
	if m.hz.past(at) {
		return false, nil
	}
	n, err := editScript.Run(ctx, rdb, []string{m.keys.Post(p.ID)}, p.ContentVersion(), p.Content, p.EditedAt, at).Int()
	return n == 1, err
}

// QueueEdit queues Edit on pipe (run it with Exec, which loads the script
// when the server does not know it).
func (m PostCache) QueueEdit(ctx context.Context, pipe redis.Pipeliner, p Post) error {
	at := m.hz.ExpiryOf(p.ID)
	if m.hz.past(at) {
		return nil
	}
	editScript.EvalSha(ctx, pipe, []string{m.keys.Post(p.ID)}, p.ContentVersion(), p.Content, p.EditedAt, at)
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
