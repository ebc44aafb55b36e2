package projections_test

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/kafkatest"
	"github.com/feedco/feed/testkit/testenv"
)

// world writes the source of truth the way the write side does (rows in
// users, follows, posts, user_activity and the events table) and records
// each event's envelope, to publish in the contract's format or to apply
// directly. CDC is built elsewhere; this is its stand-in.
type world struct {
	t     testing.TB
	db    *testenv.DB
	envs  []events.Envelope
	pos   int64
	clock time.Time
}

// postsRig is the posts projector over a world, a Redis and a broker of
// its own, with a topic of one partition: the setting of the runner's
// tests of what becomes of one message.
type postsRig struct {
	w     *world
	rd    *testenv.Redis
	b     *kafkatest.Broker
	topic string
	keys  readmodel.Keys
	posts projections.Projector
}

func newPostsRig(t *testing.T) postsRig {
	t.Helper()
	r := postsRig{w: newWorld(t), rd: testenv.NewRedis(t), b: kafkatest.Start(t)}
	r.topic = r.b.Topic(t, 1)
	r.keys = readmodel.Keys{Prefix: r.rd.Prefix}
	ps, err := projections.New(projections.Config{Keys: r.keys}, r.w.db.Pool, r.rd.Client, nil, projections.NamePosts)
	if err != nil {
		t.Fatal(err)
	}
	r.posts = ps[0]
	return r
}

func newWorld(t testing.TB) *world {
	t.Helper()
	return &world{t: t, db: testenv.NewDB(t), clock: time.Now().Add(-time.Hour).Truncate(time.Millisecond)}
}

func (w *world) exec(sql string, args ...any) {
	w.t.Helper()
	if _, err := w.db.Pool.Exec(context.Background(), sql, args...); err != nil {
		w.t.Fatalf("%s: %v", sql, err)
	}
}

func (w *world) record(version int64, ev events.Event) {
	w.t.Helper()
	payload, err := events.Encode(ev)
	if err != nil {
		w.t.Fatal(err)
	}
	// The envelope carries the row's position, as CDC's do: the followers
	// projector's guard and the bulk build's both read it.
	id := uuid.NewString()
	if err := w.db.Pool.QueryRow(context.Background(), `INSERT INTO events (event_id, stream_id, stream_version, type, payload)
		VALUES ($1, $2, $3, $4, $5) RETURNING position`, id, ev.StreamID(), version, ev.EventType(), []byte(payload)).Scan(&w.pos); err != nil {
		w.t.Fatal(err)
	}
	env := events.Envelope{EventID: id, Position: w.pos, StreamID: ev.StreamID(), StreamVersion: version,
		Type: ev.EventType(), Payload: payload, Metadata: events.Metadata{CorrelationID: uuid.NewString()},
		RecordedAt: time.Now().UTC(), CommitLSN: fmt.Sprintf("0/%X", w.pos*64), AudienceKey: ev.AudienceKey()}
	w.envs = append(w.envs, env)
}

// user registers a user; active users have read their feed just now,
// inactive ones 60 days ago.
func (w *world) user(active bool) int64 {
	w.t.Helper()
	var id int64
	if err := w.db.Pool.QueryRow(context.Background(), `INSERT INTO users (name) VALUES ('u') RETURNING id`).Scan(&id); err != nil {
		w.t.Fatal(err)
	}
	seen := time.Now()
	if !active {
		seen = seen.Add(-60 * 24 * time.Hour)
	}
	w.exec(`INSERT INTO user_activity (user_id, last_seen_at) VALUES ($1, $2)`, id, seen)
	w.record(1, events.UserRegistered{UserID: id, Name: "u"})
	return id
}

func (w *world) nextVersion(stream string) int64 {
	var v int64
	if err := w.db.Pool.QueryRow(context.Background(), `SELECT coalesce(max(stream_version), 0) + 1 FROM events WHERE stream_id = $1`, stream).Scan(&v); err != nil {
		w.t.Fatal(err)
	}
	return v
}

func (w *world) follow(follower, followee int64) {
	w.t.Helper()
	w.exec(`INSERT INTO follows (follower_id, followee_id) VALUES ($1, $2)`, follower, followee)
	var n int64
	if err := w.db.Pool.QueryRow(context.Background(), `UPDATE users SET follower_count = follower_count + 1 WHERE id = $1 RETURNING follower_count`, followee).Scan(&n); err != nil {
		w.t.Fatal(err)
	}
	w.record(w.nextVersion(events.FollowStream(follower, followee)), events.Followed{FollowerID: follower, FolloweeID: followee, FolloweeFollowers: n})
}

func (w *world) unfollow(follower, followee int64) {
	w.t.Helper()
	w.exec(`DELETE FROM follows WHERE follower_id = $1 AND followee_id = $2`, follower, followee)
	var n int64
	if err := w.db.Pool.QueryRow(context.Background(), `UPDATE users SET follower_count = follower_count - 1 WHERE id = $1 RETURNING follower_count`, followee).Scan(&n); err != nil {
		w.t.Fatal(err)
	}
	w.record(w.nextVersion(events.FollowStream(follower, followee)), events.Unfollowed{FollowerID: follower, FolloweeID: followee, FolloweeFollowers: n})
}

// mute records a Muted (on) or Unmuted of the pair, with the mutes row.
func (w *world) mute(muter, muted int64, on bool) {
	w.t.Helper()
	if on {
		w.exec(`INSERT INTO mutes (muter_id, muted_id) VALUES ($1, $2)`, muter, muted)
	} else {
		w.exec(`DELETE FROM mutes WHERE muter_id = $1 AND muted_id = $2`, muter, muted)
	}
	v := w.nextVersion(events.MuteStream(muter, muted))
	if on {
		w.record(v, events.Muted{MuterID: muter, MutedID: muted})
	} else {
		w.record(v, events.Unmuted{MuterID: muter, MutedID: muted})
	}
}

// post creates a post one millisecond after the previous one.
func (w *world) post(author int64) int64 {
	w.t.Helper()
	w.clock = w.clock.Add(time.Millisecond)
	// The id encodes the post's created_at millisecond, as the write side's
	// (commands.createPost): the packed inbox layout orders by id alone.
	// Node 1 as w.ids; one post per millisecond, so sequence 0.
	id := w.clock.Sub(snowflake.Epoch).Milliseconds()<<22 | 1<<12
	var n int64
	if err := w.db.Pool.QueryRow(context.Background(), `SELECT follower_count FROM users WHERE id = $1`, author).Scan(&n); err != nil {
		w.t.Fatal(err)
	}
	w.exec(`INSERT INTO posts (id, author_id, content, created_at) VALUES ($1, $2, $3, $4)`, id, author, "hello", w.clock)
	w.record(1, events.PostCreated{PostID: id, AuthorID: author, Content: "hello", CreatedAt: w.clock, AuthorFollowers: n})
	return id
}

func (w *world) del(author, post int64) {
	w.t.Helper()
	w.exec(`UPDATE posts SET deleted = true, deleted_at = now() WHERE id = $1`, post)
	w.record(w.nextVersion(events.PostStream(post)), events.PostDeleted{PostID: post, AuthorID: author, DeletedAt: time.Now().UTC()})
}

// edit replaces a post's content (the posts row and PostEdited at the
// post's next version, as commands.EditPost) and returns that version.
func (w *world) edit(author, post int64, content string) int64 {
	w.t.Helper()
	v := w.nextVersion(events.PostStream(post))
	w.exec(`UPDATE posts SET content = $2, version = $3, edited_at = now() WHERE id = $1`, post, content, v)
	w.record(v, events.PostEdited{PostID: post, AuthorID: author, Content: content, Version: v, EditedAt: time.Now().UTC()})
	return v
}

// dump returns every key under prefix with a canonical rendering of its
// value, so two Redis states compare with ==.
func dump(t testing.TB, rdb redis.UniversalClient, prefix string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	keys, err := testenv.Keys(ctx, rdb, prefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		typ := rdb.Type(ctx, k).Val()
		var v string
		switch typ {
		case "zset":
			zs := rdb.ZRangeWithScores(ctx, k, 0, -1).Val()
			parts := make([]string, len(zs))
			for i, z := range zs {
				parts[i] = fmt.Sprintf("%v=%v", z.Member, z.Score)
			}
			v = strings.Join(parts, " ")
		case "hash":
			h := rdb.HGetAll(ctx, k).Val()
			parts := make([]string, 0, len(h))
			for f, x := range h {
				parts = append(parts, f+"="+x)
			}
			sort.Strings(parts)
			v = strings.Join(parts, " ")
		case "set":
			m := rdb.SMembers(ctx, k).Val()
			sort.Strings(m)
			v = strings.Join(m, " ")
		case "string":
			v = rdb.Get(ctx, k).Val()
		default:
			v = "?" + typ
		}
		// A key whose hash tag names another key (CelebritiesOrder) holds
		// the prefix twice.
		out[strings.ReplaceAll(k, prefix, "")] = typ + ":" + v
	}
	return out
}

// diff describes the first differences of two dumps ("" when equal).
// withoutOrder drops the celebrity set's ordering state and leaving hash
// (a projector's bookkeeping that a bulk build does not write) from a dump.
func withoutOrder(m map[string]string) map[string]string {
	for k := range m {
		if strings.Contains(k, ":order{") || strings.Contains(k, ":leaving{") {
			delete(m, k)
		}
	}
	return m
}

func diff(a, b map[string]string) string {
	var out []string
	for k, v := range a {
		if b[k] != v {
			out = append(out, fmt.Sprintf("%s:\n  %s\n  %s", k, v, b[k]))
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, fmt.Sprintf("%s: only in second: %s", k, b[k]))
		}
	}
	sort.Strings(out)
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("... and %d more", len(out)-5))
	}
	return strings.Join(out, "\n")
}

// inbox returns the real members of a sorted set, newest first, and its
// floor (NaN when none) and whether ~built is set.
func zview(t testing.TB, rdb redis.UniversalClient, key string) (ids []string, floor float64, built bool) {
	t.Helper()
	floor = math.NaN()
	for _, z := range rdb.ZRevRangeWithScores(context.Background(), key, 0, -1).Val() {
		m := z.Member.(string)
		switch {
		case m == readmodel.SentinelFloor:
			floor = z.Score
		case m == readmodel.SentinelBuilt:
			built = true
		default:
			ids = append(ids, m)
		}
	}
	return ids, floor, built
}

func newProjectors(t testing.TB, w *world, rdb redis.UniversalClient, cfg projections.Config) []projections.Projector {
	t.Helper()
	ps, err := projections.New(cfg, w.db.Pool, rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func applyAll(t testing.TB, ps []projections.Projector, envs []events.Envelope) {
	t.Helper()
	for _, e := range envs {
		if err := projections.Apply(context.Background(), ps, e); err != nil {
			t.Fatal(err)
		}
	}
}

func idstr(v int64) string { return strconv.FormatInt(v, 10) }

func jsonGet(rdb redis.UniversalClient, key string, v any) error {
	b, err := rdb.Get(context.Background(), key).Bytes()
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func fmtView(ids []string, floor float64, built bool) string {
	return fmt.Sprintf("%v floor=%v built=%v", ids, floor, built)
}

// inboxView is user's inbox: every post id it holds (the buffer's too,
// distinct), newest first, its floor (NaN when none) and whether ~built
// is set.
func inboxView(t testing.TB, rdb redis.UniversalClient, keys readmodel.Keys, user int64) (ids []string, floor float64, built bool) {
	t.Helper()
	k := homefeed.Key(keys, user)
	all, floor, built := packedView(rdb.Get(context.Background(), k).Val(), rdb.Get(context.Background(), k+"+").Val())
	for _, id := range all {
		ids = append(ids, idstr(id))
	}
	return ids, floor, built
}

// packedView decodes a packed inbox's sealed string and buffer: its ids
// (distinct, newest first, whatever the floor), floor (NaN when none) and
// ~built.
func packedView(sealed, buf string) (ids []int64, floor float64, built bool) {
	floor = math.NaN()
	read := func(s string) {
		for i := 0; i+8 <= len(s); i += 8 {
			ids = append(ids, int64(binary.BigEndian.Uint64([]byte(s[i:i+8]))))
		}
	}
	if len(sealed) >= 8 {
		h := sealed[len(sealed)-8:]
		built = h[0] == 1
		if h[1] == 1 {
			var x [8]byte
			copy(x[2:], h[2:])
			floor = float64(binary.BigEndian.Uint64(x[:]))
		}
		read(sealed[:len(sealed)-8])
	}
	read(buf)
	slices.SortFunc(ids, func(a, b int64) int { return cmp.Compare(b, a) })
	return slices.Compact(ids), floor, built
}

// inboxTTL is the TTL of user's inbox: of its sealed string, or of its
// buffer while there is no sealed string yet.
func inboxTTL(t testing.TB, rdb redis.UniversalClient, keys readmodel.Keys, user int64) time.Duration {
	t.Helper()
	ctx := context.Background()
	k := homefeed.Key(keys, user)
	if rdb.Exists(ctx, k).Val() == 0 {
		return rdb.TTL(ctx, k+"+").Val()
	}
	return rdb.TTL(ctx, k).Val()
}

// inboxExists reports whether user has an inbox (any of its keys).
func inboxExists(t testing.TB, rdb redis.UniversalClient, keys readmodel.Keys, user int64) bool {
	t.Helper()
	k := homefeed.Key(keys, user)
	return rdb.Exists(context.Background(), k, k+"+").Val() > 0
}

// cacheHarness drives the projectors as the runner does, through the
// follower cache: apply hands the world's new envelopes over in offset
// order of one partition; skip leaves an offset to "another consumer".
type cacheHarness struct {
	t      *testing.T
	w      *world
	rd     *testenv.Redis
	keys   readmodel.Keys
	ps     []projections.Projector
	inbox  *projections.Inbox
	part   int32
	offset int64
	done   int
	all    map[int64]events.Envelope // by offset, the skipped ones left out
}

func newCacheHarness(t *testing.T, partition int32, cfg projections.Config) *cacheHarness {
	h := &cacheHarness{t: t, w: newWorld(t), rd: testenv.NewRedis(t), part: partition, all: map[int64]events.Envelope{}}
	h.keys = readmodel.Keys{Prefix: h.rd.Prefix}
	cfg.Keys = h.keys
	h.ps = newProjectors(t, h.w, h.rd.Client, cfg)
	for _, p := range h.ps {
		if p.Name() == projections.NameInbox {
			h.inbox = p.(*projections.Inbox)
		}
	}
	return h
}

func (h *cacheHarness) apply() {
	h.t.Helper()
	for _, env := range h.w.envs[h.done:] {
		h.all[h.offset] = env
		if err := projections.Apply(projections.WithDelivery(context.Background(), "feed", h.part, h.offset), h.ps, env); err != nil {
			h.t.Fatal(err)
		}
		h.offset++
	}
	h.done = len(h.w.envs)
}

func (h *cacheHarness) skip() {
	h.done = len(h.w.envs)
	h.offset++
}

// has reports whether user's inbox holds post.
func (h *cacheHarness) has(user, post int64) bool {
	h.t.Helper()
	ids, _, _ := inboxView(h.t, h.rd.Client, h.keys, user)
	return slices.Contains(ids, idstr(post))
}

// nextID is a Snowflake id one millisecond after the previous post's or
// repost's, and that millisecond.
func (w *world) nextID() (int64, time.Time) {
	w.clock = w.clock.Add(time.Millisecond)
	return w.clock.Sub(snowflake.Epoch).Milliseconds()<<22 | 1<<12, w.clock
}

// reply creates a post by author replying to parent (by parentAuthor), with
// the parent's reply count, as commands.CreatePost does.
func (w *world) reply(author, parent, parentAuthor int64) int64 {
	w.t.Helper()
	id, at := w.nextID()
	var n, replies int64
	if err := w.db.Pool.QueryRow(context.Background(), `SELECT follower_count FROM users WHERE id = $1`, author).Scan(&n); err != nil {
		w.t.Fatal(err)
	}
	if err := w.db.Pool.QueryRow(context.Background(), `UPDATE posts SET reply_count = reply_count + 1 WHERE id = $1 RETURNING reply_count`, parent).Scan(&replies); err != nil {
		w.t.Fatal(err)
	}
	w.exec(`INSERT INTO posts (id, author_id, content, created_at, reply_to, reply_to_author, reply_root) VALUES ($1, $2, 're', $3, $4, $5, $4)`,
		id, author, at, parent, parentAuthor)
	w.record(1, events.PostCreated{PostID: id, AuthorID: author, Content: "re", CreatedAt: at, AuthorFollowers: n,
		ReplyTo: parent, ReplyToAuthor: parentAuthor, ReplyRoot: parent, ParentReplies: &replies})
	return id
}

// like records a like (on) or unlike of post (by author) by user, with the
// likes row and the post's count, as commands.Like does.
func (w *world) like(user, post, author int64, on bool) {
	w.t.Helper()
	delta := int64(1)
	if on {
		w.exec(`INSERT INTO likes (user_id, post_id) VALUES ($1, $2)`, user, post)
	} else {
		w.exec(`DELETE FROM likes WHERE user_id = $1 AND post_id = $2`, user, post)
		delta = -1
	}
	var n int64
	if err := w.db.Pool.QueryRow(context.Background(), `UPDATE posts SET like_count = like_count + $2 WHERE id = $1 RETURNING like_count`, post, delta).Scan(&n); err != nil {
		w.t.Fatal(err)
	}
	v := w.nextVersion(events.LikeStream(user, post))
	if on {
		w.record(v, events.PostLiked{LikerID: user, PostID: post, AuthorID: author, LikedAt: time.Now().UTC(), Likes: n})
	} else {
		w.record(v, events.PostUnliked{LikerID: user, PostID: post, AuthorID: author, UnlikedAt: time.Now().UTC(), Likes: n})
	}
}

// repost records user's repost of post (by author), with the reposts row
// and the post's count, as commands.Repost does, and returns the repost's
// id.
func (w *world) repost(user, post, author int64) int64 {
	w.t.Helper()
	id, at := w.nextID()
	var followers, n int64
	if err := w.db.Pool.QueryRow(context.Background(), `SELECT follower_count FROM users WHERE id = $1`, user).Scan(&followers); err != nil {
		w.t.Fatal(err)
	}
	w.exec(`INSERT INTO reposts (id, user_id, post_id, created_at) VALUES ($1, $2, $3, $4)`, id, user, post, at)
	if err := w.db.Pool.QueryRow(context.Background(), `UPDATE posts SET repost_count = repost_count + 1 WHERE id = $1 RETURNING repost_count`, post).Scan(&n); err != nil {
		w.t.Fatal(err)
	}
	w.record(w.nextVersion(events.RepostStream(user, post)), events.PostReposted{RepostID: id, ReposterID: user, PostID: post, AuthorID: author,
		CreatedAt: at, ReposterFollowers: followers, Reposts: n})
	return id
}

// unrepost undoes user's repost of post (by author).
func (w *world) unrepost(user, post, author int64) {
	w.t.Helper()
	var id, n int64
	if err := w.db.Pool.QueryRow(context.Background(), `DELETE FROM reposts WHERE user_id = $1 AND post_id = $2 RETURNING id`, user, post).Scan(&id); err != nil {
		w.t.Fatal(err)
	}
	if err := w.db.Pool.QueryRow(context.Background(), `UPDATE posts SET repost_count = repost_count - 1 WHERE id = $1 RETURNING repost_count`, post).Scan(&n); err != nil {
		w.t.Fatal(err)
	}
	w.record(w.nextVersion(events.RepostStream(user, post)), events.PostUnreposted{RepostID: id, ReposterID: user, PostID: post, AuthorID: author,
		UnrepostedAt: time.Now().UTC(), Reposts: n})
}

// block records a Blocked (on) or Unblocked of the pair, with the blocks
// row (the follows a block removes are the caller's to record).
func (w *world) block(blocker, blocked int64, on bool) {
	w.t.Helper()
	if on {
		w.exec(`INSERT INTO blocks (blocker_id, blocked_id) VALUES ($1, $2)`, blocker, blocked)
	} else {
		w.exec(`DELETE FROM blocks WHERE blocker_id = $1 AND blocked_id = $2`, blocker, blocked)
	}
	v := w.nextVersion(events.BlockStream(blocker, blocked))
	if on {
		w.record(v, events.Blocked{BlockerID: blocker, BlockedID: blocked})
	} else {
		w.record(v, events.Unblocked{BlockerID: blocker, BlockedID: blocked})
	}
}

// delReply deletes a reply (by author, to parent), with the parent's
// reply count after it, as commands.DeletePost does.
func (w *world) delReply(author, post, parent int64) {
	w.t.Helper()
	var n int64
	w.exec(`UPDATE posts SET deleted = true, deleted_at = now() WHERE id = $1`, post)
	if err := w.db.Pool.QueryRow(context.Background(), `UPDATE posts SET reply_count = reply_count - 1 WHERE id = $1 RETURNING reply_count`, parent).Scan(&n); err != nil {
		w.t.Fatal(err)
	}
	w.record(w.nextVersion(events.PostStream(post)), events.PostDeleted{PostID: post, AuthorID: author, DeletedAt: time.Now().UTC(),
		ReplyTo: parent, ParentReplies: &n})
}
