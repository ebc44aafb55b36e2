package queries

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/jackc/pgx/v5"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/internal/service"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// bundle is the thing under test and its collaborators: a fresh database,
// a Redis prefix, and helpers that write the read models the way the
// projectors' contract (docs/architecture.md) says they look.
type bundle struct {
	t     testing.TB
	ctx   context.Context
	feed  *Feed
	svc   *service.Service // runs feed until the test ends
	db    *testenv.DB
	rdb   redis.UniversalClient
	keys  readmodel.Keys
	reg   *prometheus.Registry
	names int
	// Post ids are Snowflakes of their millisecond (pseq numbers them), as
	// the write side's: an inbox orders by id.
	pseq int64
}

func setup(t *testing.T, cfg Config) *bundle {
	t.Helper()
	return setupOn(t, cfg, testenv.NewRedis(t))
}

// setupOn is setup over r (testenv.NewRedisCluster: a cluster whatever
// FEED_TEST_REDIS says).
func setupOn(t *testing.T, cfg Config, r *testenv.Redis) *bundle {
	t.Helper()
	db := testenv.NewDB(t)
	cfg.Keys = readmodel.Keys{Prefix: r.Prefix}
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	f, err := New(cfg, db.Pool, r.Client)
	if err != nil {
		t.Fatal(err)
	}
	svc := runFeed(t, f)
	// The tests write the read models with this client, then read: with the
	// read cache on, each write waits until its invalidation has reached
	// the cache (as the projectors' lag does in production), so the next
	// read sees it.
	r.Client.AddHook(cacheSyncHook{f})
	// The celebrity set starts built (empty), as a build leaves it.
	if err := r.Client.SAdd(context.Background(), cfg.Keys.Celebrities(), readmodel.SentinelBuilt).Err(); err != nil {
		t.Fatal(err)
	}
	// Snowflake-sized ids, with some of other lengths below (ties in one
	// millisecond must order numerically, not as Redis orders bytes).
	return &bundle{t: t, ctx: context.Background(), feed: f, svc: svc, db: db, rdb: r.Client, keys: cfg.Keys, reg: reg}
}

// runFeed runs f's background work (its Service) until the test ends,
// and returns once it is ready.
func runFeed(t testing.TB, f *Feed) *service.Service {
	t.Helper()
	return testenv.Start(t, f.Service())
}

// inboxKey is user's inbox key (its sealed string; its buffer is the same
// name plus "+").
func (b *bundle) inboxKey(user int64) string { return homefeed.Key(b.keys, user) }

// pushInbox adds k to user's inbox as a push does (a packed inbox: APPENDed
// to its buffer).
func (b *bundle) pushInbox(user int64, k key) {
	b.t.Helper()
	if err := b.rdb.Append(b.ctx, homefeed.Key(b.keys, user)+"+", string(binary.BigEndian.AppendUint64(nil, uint64(k.id)))).Err(); err != nil {
		b.t.Fatal(err)
	}
}

// postSeq is a post in ms whose id orders by seq within the millisecond:
// a Snowflake of ms with sequence seq (an inbox's ids must be Snowflakes
// of their millisecond).
func (b *bundle) postSeq(author, ms, seq int64) key {
	b.t.Helper()
	return b.postID(author, ms, (ms-snowflake.Epoch.UnixMilli())<<22|seq&(1<<22-1))
}

// setInbox writes user's inbox: keys (newest first), ~built, and ~floor
// (floor < 0: none). It holds only the keys above the floor, as its
// writers leave it.
func (b *bundle) setInbox(user int64, keys []key, built bool, floor int64) {
	b.t.Helper()
	var ids []int64
	for _, k := range keys {
		if floor < 0 || k.ms > floor {
			ids = append(ids, k.id)
		}
	}
	slices.Sort(ids)
	var v []byte
	for _, id := range ids {
		v = binary.BigEndian.AppendUint64(v, uint64(id))
	}
	var h [8]byte
	if floor >= 0 {
		binary.BigEndian.PutUint64(h[:], uint64(floor))
		h[1] = 1
	}
	if built {
		h[0] = 1
	}
	sk := homefeed.Key(b.keys, user)
	pipe := b.rdb.TxPipeline()
	pipe.Del(b.ctx, sk+"+")
	pipe.Set(b.ctx, sk, append(v, h[:]...), 0)
	if _, err := pipe.Exec(b.ctx); err != nil {
		b.t.Fatal(err)
	}
}

// inboxState reads user's inbox: its post ids
// (newest first, whatever the floor), ~floor (nil: none) and ~built.
func (b *bundle) inboxState(user int64) (ids []int64, floor *int64, built bool) {
	b.t.Helper()
	sk := homefeed.Key(b.keys, user)
	sealed, buf := b.rdb.Get(b.ctx, sk).Val(), b.rdb.Get(b.ctx, sk+"+").Val()
	body := buf
	if len(sealed) >= 8 {
		h := sealed[len(sealed)-8:]
		built = h[0] == 1
		if h[1] == 1 {
			var x [8]byte
			copy(x[2:], h[2:])
			f := int64(binary.BigEndian.Uint64(x[:]))
			floor = &f
		}
		body += sealed[:len(sealed)-8]
	}
	for i := 0; i+8 <= len(body); i += 8 {
		ids = append(ids, int64(binary.BigEndian.Uint64([]byte(body[i:i+8]))))
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	slices.Reverse(ids)
	return ids, floor, built
}

func (b *bundle) exec(sql string, args ...any) {
	b.t.Helper()
	if _, err := b.db.Pool.Exec(b.ctx, sql, args...); err != nil {
		b.t.Fatalf("%s: %v", sql, err)
	}
}

func (b *bundle) user() int64 {
	b.t.Helper()
	b.names++
	var id int64
	if err := b.db.Pool.QueryRow(b.ctx, `INSERT INTO users (name) VALUES ($1) RETURNING id`, fmt.Sprint("u", b.names)).Scan(&id); err != nil {
		b.t.Fatal(err)
	}
	// Each user's following state starts built (following nobody), as a
	// build leaves it.
	if err := b.rdb.HSet(b.ctx, b.keys.FollowingVersions(id), readmodel.SentinelBuilt, 1).Err(); err != nil {
		b.t.Fatal(err)
	}
	return id
}

// follow writes the follow in PostgreSQL and in following:{follower}.
func (b *bundle) follow(follower, followee int64) {
	b.t.Helper()
	b.exec(`INSERT INTO follows (follower_id, followee_id) VALUES ($1, $2)`, follower, followee)
	b.rdb.SAdd(b.ctx, b.keys.Following(follower), strconv.FormatInt(followee, 10))
	// As the followers projector does: the pair's applied version.
	b.rdb.HIncrBy(b.ctx, b.keys.FollowingVersions(follower), strconv.FormatInt(followee, 10), 1)
}

func (b *bundle) unfollow(follower, followee int64) {
	b.t.Helper()
	b.exec(`DELETE FROM follows WHERE follower_id = $1 AND followee_id = $2`, follower, followee)
	b.rdb.SRem(b.ctx, b.keys.Following(follower), strconv.FormatInt(followee, 10))
	b.rdb.HIncrBy(b.ctx, b.keys.FollowingVersions(follower), strconv.FormatInt(followee, 10), 1)
}

// post writes a post row only (no projector has seen it yet).
func (b *bundle) post(author, ms int64) key {
	b.t.Helper()
	b.pseq++
	k := key{ms: ms, id: (ms-snowflake.Epoch.UnixMilli())<<22 | b.pseq&(1<<22-1)}
	b.exec(`INSERT INTO posts (id, author_id, content, created_at) VALUES ($1, $2, $3, $4)`,
		k.id, author, fmt.Sprint("post ", k.id), time.UnixMilli(ms).UTC())
	return k
}

// postID is post with a chosen id.
func (b *bundle) postID(author, ms, id int64) key {
	b.t.Helper()
	b.exec(`INSERT INTO posts (id, author_id, content, created_at) VALUES ($1, $2, $3, $4)`,
		id, author, fmt.Sprint("post ", id), time.UnixMilli(ms).UTC())
	return key{ms: ms, id: id}
}

// deletePost deletes a post as the command and the posts projector do: the
// row and its post.deleted.v1 event in one transaction, then the tombstone
// in the Redis post cache.
func (b *bundle) deletePost(k key) {
	b.t.Helper()
	b.deleteRow(k)
	b.cachePost(k)
}

// deleteRow is the command's half of a deletion (the posts projector has
// not written the tombstone yet).
func (b *bundle) deleteRow(k key) {
	b.t.Helper()
	b.exec(`WITH d AS (UPDATE posts SET deleted = true, deleted_at = now() WHERE id = $1 RETURNING id, author_id)
INSERT INTO events (event_id, stream_id, stream_version, type, payload)
SELECT gen_random_uuid(), 'post-' || id, 2, 'post.deleted.v1',
       jsonb_build_object('postId', id::text, 'authorId', author_id::text, 'deletedAt', now())
FROM d`, k.id)
}

// cachePost writes post:{p} from the row, as the posts projector does.
func (b *bundle) cachePost(k key) {
	b.t.Helper()
	var author int64
	var content string
	var deleted bool
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT author_id, content, deleted FROM posts WHERE id = $1`, k.id).Scan(&author, &content, &deleted); err != nil {
		b.t.Fatal(err)
	}
	raw, _ := json.Marshal(readmodel.Post{ID: k.id, AuthorID: author, Content: content, CreatedAt: formatTime(k.ms), Deleted: deleted})
	if err := b.rdb.Set(b.ctx, b.keys.Post(k.id), raw, 0).Err(); err != nil {
		b.t.Fatal(err)
	}
}

func zs(keys []key) []redis.Z {
	out := make([]redis.Z, len(keys))
	for i, k := range keys {
		out[i] = redis.Z{Score: float64(k.ms), Member: strconv.FormatInt(k.id, 10)}
	}
	return out
}

// setZ writes a sorted set with its entries and sentinels; floor < 0 means
// no ~floor.
func (b *bundle) setZ(name string, keys []key, built bool, floor int64) {
	b.t.Helper()
	pipe := b.rdb.TxPipeline()
	pipe.Del(b.ctx, name)
	if len(keys) > 0 {
		pipe.ZAdd(b.ctx, name, zs(keys)...)
	}
	if built {
		pipe.ZAdd(b.ctx, name, redis.Z{Score: math.Inf(1), Member: readmodel.SentinelBuilt})
	}
	if floor >= 0 {
		pipe.ZAdd(b.ctx, name, redis.Z{Score: float64(floor), Member: readmodel.SentinelFloor})
	}
	if _, err := pipe.Exec(b.ctx); err != nil {
		b.t.Fatal(err)
	}
}

// truth is the oracle's definition of the feed, computed by SQL: newest
// first non-deleted posts of the accounts user follows and of user.
func (b *bundle) truth(user int64) []key {
	b.t.Helper()
	rows, err := b.db.Pool.Query(b.ctx, `
SELECT p.id, p.created_at FROM posts p
WHERE NOT p.deleted AND (p.author_id = $1 OR p.author_id IN (SELECT followee_id FROM follows WHERE follower_id = $1))
ORDER BY p.created_at DESC, p.id DESC`, user)
	if err != nil {
		b.t.Fatal(err)
	}
	defer rows.Close()
	var out []key
	for rows.Next() {
		var k key
		var at time.Time
		if err := rows.Scan(&k.id, &at); err != nil {
			b.t.Fatal(err)
		}
		k.ms = at.UnixMilli()
		out = append(out, k)
	}
	return out
}

func (b *bundle) authorTruth(author int64) []key {
	b.t.Helper()
	var out []key
	for _, k := range b.truthAll() {
		if k.author == author {
			out = append(out, k.key)
		}
	}
	return out
}

type authored struct {
	key    key
	author int64
}

func (b *bundle) truthAll() []authored {
	b.t.Helper()
	rows, err := b.db.Pool.Query(b.ctx, `SELECT id, author_id, created_at FROM posts WHERE NOT deleted ORDER BY created_at DESC, id DESC`)
	if err != nil {
		b.t.Fatal(err)
	}
	defer rows.Close()
	var out []authored
	for rows.Next() {
		var a authored
		var at time.Time
		if err := rows.Scan(&a.key.id, &a.author, &at); err != nil {
			b.t.Fatal(err)
		}
		a.key.ms = at.UnixMilli()
		out = append(out, a)
	}
	return out
}

// readAll pages a feed to the end (nextCursor null) and returns its keys.
func (b *bundle) readAll(read func(cursor string) (Page, error), limit int) []key {
	b.t.Helper()
	var out []key
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10_000 {
			b.t.Fatal("paging does not end")
		}
		p, err := read(cursor)
		if err != nil {
			b.t.Fatalf("page %d: %v", pages, err)
		}
		if len(p.Items) > limit {
			b.t.Fatalf("page of %d items, limit %d", len(p.Items), limit)
		}
		for _, it := range p.Items {
			out = append(out, itemKey(b.t, it))
		}
		if p.NextCursor == nil {
			return out
		}
		if len(p.Items) != limit {
			b.t.Fatalf("page %d has %d items but a next cursor (limit %d)", pages, len(p.Items), limit)
		}
		cursor = *p.NextCursor
	}
}

func (b *bundle) readHome(user int64, limit int) []key {
	b.t.Helper()
	return b.readAll(func(c string) (Page, error) { return b.feed.Home(b.ctx, user, c, limit) }, limit)
}

func itemKey(t testing.TB, p Post) key {
	t.Helper()
	id, err := strconv.ParseInt(p.ID, 10, 64)
	if err != nil {
		t.Fatalf("post id %q: %v", p.ID, err)
	}
	at, err := time.Parse(time.RFC3339Nano, p.CreatedAt)
	if err != nil || at.Location() != time.UTC || len(p.CreatedAt) != len(events.CreatedAtLayout) {
		t.Fatalf("createdAt %q is not RFC 3339 UTC with milliseconds", p.CreatedAt)
	}
	if p.Content != fmt.Sprint("post ", id) {
		t.Fatalf("post %s content %q", p.ID, p.Content)
	}
	return key{ms: at.UnixMilli(), id: id}
}

// sameFeed fails with a readable diff when got differs from want.
func sameFeed(t testing.TB, what string, got, want []key) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	seen := map[int64]int{}
	for _, k := range got {
		seen[k.id]++
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("%s: post %d shown %d times", what, id, n)
		}
	}
	wantSet := map[int64]bool{}
	for _, k := range want {
		wantSet[k.id] = true
		if seen[k.id] == 0 {
			t.Errorf("%s: missing post %v", what, k)
		}
	}
	for _, k := range got {
		if !wantSet[k.id] {
			t.Errorf("%s: foreign post %v", what, k)
		}
	}
	t.Fatalf("%s: got %d posts %v\nwant %d posts %v", what, len(got), ids(got), len(want), ids(want))
}

// counter reads one counter's value.
func counter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// created does what the api's AfterPostCreated hook does for a post row
// written by post or postID.
func (b *bundle) created(author int64, k key) {
	b.t.Helper()
	err := b.feed.PostCreated(b.ctx, NewPost{ID: k.id, AuthorID: author, Content: fmt.Sprint("post ", k.id), CreatedAt: time.UnixMilli(k.ms)})
	if err != nil {
		b.t.Fatal(err)
	}
}

// roundTrips counts the Redis round trips (a command or a pipeline) of the
// bundle's client from now on.
type roundTrips struct {
	n    atomic.Int64
	mu   sync.Mutex
	cmds []string // the commands, for a failure's message
}

func (rt *roundTrips) add(cmds ...redis.Cmder) {
	if len(cmds) == 1 && cmds[0].Name() == "ping" {
		return // the read cache's keep-alive of an idle tracking connection, not a read
	}
	rt.n.Add(1)
	rt.mu.Lock()
	for _, c := range cmds {
		rt.cmds = append(rt.cmds, c.Name())
	}
	rt.mu.Unlock()
}

// String lists the commands counted.
func (rt *roundTrips) String() string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return strings.Join(rt.cmds, " ")
}

func countRoundTrips(b *bundle) *roundTrips {
	rt := &roundTrips{}
	b.rdb.AddHook(rtHook{rt})
	if b.feed.cache != nil {
		for _, tr := range b.feed.cache.trackers() {
			if g := tr.gen.Load(); g != nil {
				for _, tc := range g.conns { // the read cache's tracking connections
					tc.cn.AddHook(rtHook{rt})
				}
			}
		}
	}
	return rt
}

type rtHook struct{ rt *roundTrips }

func (rtHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h rtHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.rt.add(cmd)
		return next(ctx, cmd)
	}
}

func (h rtHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.rt.add(cmds...)
		return next(ctx, cmds)
	}
}

// cacheSyncHook makes every write through the tests' client wait for the
// read cache's invalidations (readCache.sync) before it returns.
type cacheSyncHook struct{ f *Feed }

func (cacheSyncHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h cacheSyncHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if !readOnlyCmd(cmd.Name()) {
			if serr := h.f.cache.sync(ctx); serr != nil && err == nil {
				err = serr
			}
		}
		return err
	}
}

func (h cacheSyncHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if !readOnlyCmd(c.Name()) {
				if serr := h.f.cache.sync(ctx); serr != nil && err == nil {
					err = serr
				}
				break
			}
		}
		return err
	}
}

func readOnlyCmd(name string) bool {
	switch name {
	case "get", "mget", "exists", "smembers", "sismember", "smismember", "scard", "zscore", "zcard", "zrange",
		"zrevrange", "zrangebyscore", "zrevrangebyscore", "ttl", "pttl", "hget", "hgetall", "scan", "type", "ping", "hello", "client":
		return true
	}
	return false
}

// authorQueries counts the Feed's reads of one author's posts from
// PostgreSQL (authorSQL: the newest-post marker's probe, author pages).
type authorQueries struct {
	DB
	n atomic.Int64
}

func (q *authorQueries) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if sql == authorSQL {
		q.n.Add(1)
	}
	return q.DB.Query(ctx, sql, args...)
}

// countQueries counts b.feed's authorSQL queries from now on.
func countQueries(b *bundle) *authorQueries {
	q := &authorQueries{DB: b.feed.db}
	b.feed.db = q
	return q
}

// waitIdle returns once f's background work queued so far (activity
// writes, rebuilds) is done.
func waitIdle(f *Feed) { <-f.work.idleCh() }
