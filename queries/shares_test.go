package queries

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/readmodel"
)

// The feed rules and the items' hydration, with the read models written
// from PostgreSQL's rows as the projectors write them (projectShares),
// read through Redis and, the same page, from PostgreSQL alone (the
// degraded read): both must show the same items.

// repost writes reposter's live repost of o at ms (the command's rows).
func (b *bundle) repostAt(reposter int64, o key, ms int64) key {
	b.t.Helper()
	b.pseq++
	k := key{ms: ms, id: (ms-snowflake.Epoch.UnixMilli())<<22 | b.pseq&(1<<22-1)}
	b.exec(`INSERT INTO reposts (id, user_id, post_id, created_at) VALUES ($1, $2, $3, $4)`, k.id, reposter, o.id, time.UnixMilli(ms).UTC())
	b.exec(`UPDATE posts SET repost_count = repost_count + 1 WHERE id = $1`, o.id)
	return k
}

// unrepost undoes the repost r (the command's rows).
func (b *bundle) unrepost(r key) {
	b.t.Helper()
	b.exec(`WITH d AS (DELETE FROM reposts WHERE id = $1 RETURNING post_id) UPDATE posts SET repost_count = repost_count - 1 WHERE id IN (SELECT post_id FROM d)`, r.id)
}

// reply writes author's reply to parent (and a quote of quoted when not
// zero) at ms.
func (b *bundle) replyQuote(author int64, parent, quoted key, ms int64) key {
	b.t.Helper()
	k := b.post(author, ms)
	if parent.id != 0 {
		b.exec(`UPDATE posts SET reply_to = $2, reply_root = $2, reply_to_author = (SELECT author_id FROM posts WHERE id = $2) WHERE id = $1`, k.id, parent.id)
		b.exec(`UPDATE posts SET reply_count = reply_count + 1 WHERE id = $1`, parent.id)
	}
	if quoted.id != 0 {
		b.exec(`UPDATE posts SET quote_of = $2, quote_author = (SELECT author_id FROM posts WHERE id = $2) WHERE id = $1`, k.id, quoted.id)
	}
	return k
}

// block writes blocker's block of blocked as the command does (follows
// both ways removed) and as the followers projector does (following:{u},
// the block fields).
func (b *bundle) blockBoth(blocker, blocked int64) {
	b.t.Helper()
	b.block(blocker, blocked)
	for _, p := range [][2]int64{{blocker, blocked}, {blocked, blocker}} {
		b.exec(`DELETE FROM follows WHERE follower_id = $1 AND followee_id = $2`, p[0], p[1])
		b.rdb.SRem(b.ctx, b.keys.Following(p[0]), strconv.FormatInt(p[1], 10))
	}
	b.rdb.HSet(b.ctx, b.keys.FollowingVersions(blocker), readmodel.BlockField(blocked), 1)
	b.rdb.HSet(b.ctx, b.keys.FollowingVersions(blocked), readmodel.BlockedByField(blocker), 1)
}

// projectShares writes what the projectors of issue 51 write, from
// PostgreSQL: the bodies with their reply, quote and repost facts (and
// the undone reposts' tombstones in undone), the timelines with reposts,
// reposts:{O}, counts, liked:{u} and reposted:{u}, names, and pushes
// each live repost to the inboxes of inboxFor who follow its reposter.
func (b *bundle) projectShares(inboxFor []int64, undone ...key) {
	b.t.Helper()
	ctx := b.ctx
	pipe := b.rdb.Pipeline()
	rows, err := b.db.Pool.Query(ctx, `SELECT id, author_id, content, deleted, created_at, reply_to, reply_to_author, quote_of, quote_author,
       like_count, repost_count, reply_count FROM posts`)
	if err != nil {
		b.t.Fatal(err)
	}
	eng := readmodel.NewEngagement(b.keys)
	for rows.Next() {
		var p readmodel.Post
		var at time.Time
		var replyTo, replyToAuthor, quoteOf, quoteAuthor *int64
		var c readmodel.Counts
		if err := rows.Scan(&p.ID, &p.AuthorID, &p.Content, &p.Deleted, &at, &replyTo, &replyToAuthor, &quoteOf, &quoteAuthor, &c.Likes, &c.Reposts, &c.Replies); err != nil {
			b.t.Fatal(err)
		}
		p.CreatedAt = formatTime(at.UnixMilli())
		p.ReplyTo, p.ReplyToAuthor, p.QuoteOf, p.QuoteAuthor = deref(replyTo), deref(replyToAuthor), deref(quoteOf), deref(quoteAuthor)
		if p.Deleted {
			p.Content = ""
		}
		raw, _ := json.Marshal(p)
		pipe.Set(ctx, b.keys.Post(p.ID), raw, 0)
		eng.QueueBuildCounts(ctx, pipe, p.ID, c, 1)
	}
	rows.Close()
	type rp struct{ id, reposter, original, author, ms int64 }
	var reposts []rp
	rrows, err := b.db.Pool.Query(ctx, `SELECT r.id, r.user_id, r.post_id, o.author_id, r.created_at FROM reposts r JOIN posts o ON o.id = r.post_id`)
	if err != nil {
		b.t.Fatal(err)
	}
	for rrows.Next() {
		var r rp
		var at time.Time
		if err := rrows.Scan(&r.id, &r.reposter, &r.original, &r.author, &at); err != nil {
			b.t.Fatal(err)
		}
		r.ms = at.UnixMilli()
		reposts = append(reposts, r)
	}
	rrows.Close()
	for _, r := range reposts {
		raw, _ := json.Marshal(readmodel.Post{ID: r.id, AuthorID: r.reposter, CreatedAt: formatTime(r.ms), RepostOf: r.original, RepostOfAuthor: r.author})
		pipe.Set(ctx, b.keys.Post(r.id), raw, 0)
		eng.QueueAddRepost(ctx, pipe, r.original, readmodel.Repost{ID: r.id, Reposter: r.reposter})
		eng.QueueReposted(ctx, pipe, r.reposter, r.original, true)
		pipe.ZAdd(ctx, b.keys.Timeline(r.reposter), redis.Z{Score: float64(r.ms), Member: strconv.FormatInt(r.id, 10)})
	}
	for _, u := range undone {
		var reposter, original int64
		if err := b.rdb.Get(ctx, b.keys.Post(u.id)).Err(); err == nil {
			var p readmodel.Post
			raw, _ := b.rdb.Get(ctx, b.keys.Post(u.id)).Bytes()
			_ = json.Unmarshal(raw, &p)
			reposter, original = p.AuthorID, p.RepostOf
			p.Deleted = true
			raw, _ = json.Marshal(p)
			pipe.Set(ctx, b.keys.Post(u.id), raw, 0)
			eng.QueueRemoveRepost(ctx, pipe, original, readmodel.Repost{ID: u.id, Reposter: reposter})
			eng.QueueReposted(ctx, pipe, reposter, original, false)
			pipe.ZRem(ctx, b.keys.Timeline(reposter), strconv.FormatInt(u.id, 10))
		}
	}
	lrows, err := b.db.Pool.Query(ctx, `SELECT user_id, post_id FROM likes`)
	if err != nil {
		b.t.Fatal(err)
	}
	for lrows.Next() {
		var u, p int64
		_ = lrows.Scan(&u, &p)
		eng.QueueLiked(ctx, pipe, u, p, true)
	}
	lrows.Close()
	names := readmodel.NewNames(b.keys)
	nrows, err := b.db.Pool.Query(ctx, `SELECT id, name FROM users`)
	if err != nil {
		b.t.Fatal(err)
	}
	for nrows.Next() {
		var u int64
		var n string
		_ = nrows.Scan(&u, &n)
		names.QueueSet(ctx, pipe, u, n)
	}
	nrows.Close()
	if _, err := pipe.Exec(ctx); err != nil {
		b.t.Fatal(err)
	}
	for _, u := range inboxFor {
		for _, r := range reposts {
			var n int
			if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM follows WHERE follower_id = $1 AND followee_id = $2`, u, r.reposter).Scan(&n); err != nil {
				b.t.Fatal(err)
			}
			if n > 0 {
				b.pushInbox(u, key{ms: r.ms, id: r.id})
			}
		}
	}
}

// shown is a page's items as "id" for a post and "id<-original" for a
// repost entry.
func shown(p Page) []string {
	var out []string
	for _, it := range p.Items {
		if it.RepostOf != nil {
			out = append(out, it.ID+"<-"+it.RepostOf.ID)
		} else {
			out = append(out, it.ID)
		}
	}
	return out
}

func (k key) s() string { return strconv.FormatInt(k.id, 10) }

// bothWays reads v's first page through Redis and from PostgreSQL alone;
// both must be want, byte for byte the same JSON.
func (b *bundle) bothWays(v int64, want ...string) Page {
	b.t.Helper()
	p, err := b.feed.Home(b.ctx, v, "", 20)
	if err != nil {
		b.t.Fatal(err)
	}
	if got := shown(p); !slices.Equal(got, want) {
		b.t.Fatalf("home of %d through Redis: %v, want %v", v, got, want)
	}
	items, err := b.feed.pgPull(b.ctx, v, key{ms: maxCursorMs}, 21)
	if err != nil {
		b.t.Fatal(err)
	}
	pg := makePage(items, 20)
	if got := shown(pg); !slices.Equal(got, want) {
		b.t.Fatalf("home of %d from PostgreSQL: %v, want %v", v, got, want)
	}
	if r, g := string(p.AppendJSON(nil)), string(pg.AppendJSON(nil)); r != g {
		b.t.Fatalf("home of %d: Redis\n%s\nPostgreSQL\n%s", v, r, g)
	}
	// The inbox lost: Home serves the cold page from PostgreSQL (and
	// queues the inbox's rebuild): the same items.
	if err := b.rdb.Del(b.ctx, b.inboxKey(v), b.inboxKey(v)+"+").Err(); err != nil {
		b.t.Fatal(err)
	}
	cold, err := b.feed.Home(b.ctx, v, "", 20)
	if err != nil {
		b.t.Fatal(err)
	}
	if !cold.Cold {
		b.t.Fatalf("home of %d without its inbox: not read cold", v)
	}
	if r, c := string(p.AppendJSON(nil)), string(cold.AppendJSON(nil)); r != c {
		b.t.Fatalf("home of %d: Redis\n%s\ncold\n%s", v, r, c)
	}
	waitIdle(b.feed) // the inbox's rebuild
	return p
}

// The feed rules over reposts, replies, quotes and blocks: each case of
// issue 51 on one feed, through Redis and from PostgreSQL.
func TestSharesRulesRedisEqualsPostgreSQL(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	v, a, c, d, e := b.user(), b.user(), b.user(), b.user(), b.user()
	b.follow(v, a)
	b.follow(v, c)
	b.follow(v, e)
	t0 := time.Now().Add(-time.Hour).UnixMilli()
	// d (not followed) posts o1: a's repost is the earliest followed, c's is hidden.
	o1 := b.post(d, t0)
	r1a := b.repostAt(a, o1, t0+10)
	b.repostAt(c, o1, t0+20)
	// c (followed) posts o2: a's repost of it is hidden, o2 shows as itself.
	o2 := b.post(c, t0+30)
	b.repostAt(a, o2, t0+40)
	// d's o3: a reposts, then c; a's is undone: c's shows.
	o3 := b.post(d, t0+50)
	r3a := b.repostAt(a, o3, t0+60)
	r3c := b.repostAt(c, o3, t0+70)
	b.unrepost(r3a)
	// d's o4, reposted by a, then deleted: the repost is hidden.
	o4 := b.post(d, t0+80)
	b.repostAt(a, o4, t0+90)
	b.deleteRow(o4)
	// a replies to d (not followed: hidden), to c (followed: shown), to itself (shown).
	toD := b.replyQuote(a, o1, key{}, t0+100)
	toC := b.replyQuote(a, o2, key{}, t0+110)
	self := b.replyQuote(a, toC, key{}, t0+120)
	// a quotes d's o5, which is then deleted: the quote is unavailable.
	o5 := b.post(d, t0+130)
	q := b.replyQuote(a, key{}, o5, t0+140)
	b.deleteRow(o5)
	// e reposts d's o6; then e blocks v: the repost is hidden with e.
	o6 := b.post(d, t0+150)
	b.repostAt(e, o6, t0+160)
	b.like(v, o2)
	b.projectAll(nil, []int64{v}, 500, 500)
	b.projectShares([]int64{v}, r3a)
	_ = toD
	want := []string{q.s(), self.s(), toC.s(), r3c.s() + "<-" + o3.s(), o2.s(), r1a.s() + "<-" + o1.s()}
	p := b.bothWays(v, append([]string{b.lastRepostOf(e).s() + "<-" + o6.s()}, want...)...)
	// The quote of a deleted post is unavailable; the like shows.
	for _, it := range p.Items {
		switch it.ID {
		case q.s():
			if it.Quote == nil || !it.Quote.Unavailable || it.Quote.ID != o5.s() {
				t.Errorf("quote of a deleted post: %+v", it.Quote)
			}
		case o2.s():
			if !it.Viewer.Liked || it.Counts.Likes != 1 || it.Counts.Reposts != 1 || it.Counts.Replies != 1 || it.Author.Name == "" {
				t.Errorf("o2: viewer %+v counts %+v author %+v", it.Viewer, it.Counts, it.Author)
			}
		}
	}
	// e blocks v: e's repost leaves v's feed.
	b.blockBoth(e, v)
	b.bothWays(v, want...)
}

// lastRepostOf is reposter's newest live repost.
func (b *bundle) lastRepostOf(reposter int64) key {
	b.t.Helper()
	var k key
	var at time.Time
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT id, created_at FROM reposts WHERE user_id = $1 ORDER BY id DESC LIMIT 1`, reposter).Scan(&k.id, &at); err != nil {
		b.t.Fatal(err)
	}
	k.ms = at.UnixMilli()
	return k
}

// cmdLog records every round trip of a client: its commands with their
// arguments.
type cmdLog struct {
	mu     sync.Mutex
	rounds [][][]any
}

func (l *cmdLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (l *cmdLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.add(cmd)
		return next(ctx, cmd)
	}
}
func (l *cmdLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		l.add(cmds...)
		return next(ctx, cmds)
	}
}
func (l *cmdLog) add(cmds ...redis.Cmder) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var round [][]any
	for _, c := range cmds {
		round = append(round, c.Args())
	}
	l.rounds = append(l.rounds, round)
}

// named reports whether c is the command name on a key starting with
// prefix.
func named(c []any, name, prefix string) bool {
	return len(c) >= 2 && strings.EqualFold(fmt.Sprint(c[0]), name) && strings.HasPrefix(fmt.Sprint(c[1]), prefix)
}

// count counts, in round (every round when nil), the commands name on
// keys starting with prefix, and the arguments after their key.
func (l *cmdLog) count(round [][]any, name, prefix string) (cmds, args int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rounds := l.rounds
	if round != nil {
		rounds = [][][]any{round}
	}
	for _, r := range rounds {
		for _, c := range r {
			if named(c, name, prefix) {
				cmds++
				args += len(c) - 2
			}
		}
	}
	return cmds, args
}

// roundOf is the round trip that sent the command name on key k.
func (l *cmdLog) roundOf(name, k string) [][]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.rounds {
		for _, c := range r {
			if named(c, name, k) && fmt.Sprint(c[1]) == k {
				return r
			}
		}
	}
	return nil
}

// A page of 20 asks the viewer's likes and reposts with two commands
// (SMISMEMBER liked:{v}, SMISMEMBER reposted:{v}) of 20 members each,
// never one per item, and its hydration is one round trip when the
// process holds the bodies and names; names, counts and the viewer's
// state are right.
func TestSharesPageOf20ViewerStateTwoCommands(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{ReadCacheKeys: -1})
	b.useClock(newClock(time.Now())) // bodies stay trusted: round trips are exact
	v := b.user()
	authors := []int64{b.user(), b.user(), b.user(), b.user()}
	for _, a := range authors {
		b.follow(v, a)
	}
	t0 := time.Now().Add(-time.Hour).UnixMilli()
	var posts []key
	for i := range 25 {
		posts = append(posts, b.post(authors[i%4], t0+int64(i)))
	}
	other := b.user()
	for i, p := range posts {
		if i%3 == 0 {
			b.like(v, p)
		}
		if i%5 == 0 {
			b.like(other, p)
		}
		if i%4 == 0 {
			b.repostAt(other, p, t0-1000+int64(i)) // others' reposts: counts only (v does not follow other)
		}
	}
	b.projectAll(nil, []int64{v}, 500, 500)
	b.projectShares([]int64{v})
	if _, err := b.feed.Home(b.ctx, v, "", 20); err != nil { // warms the bodies and names
		t.Fatal(err)
	}
	waitIdle(b.feed) // the reader's activity write lands first
	log := &cmdLog{}
	b.rdb.AddHook(log)
	p, err := b.feed.Home(b.ctx, v, "", 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 20 {
		t.Fatalf("%d items, want 20", len(p.Items))
	}
	// One command each for the whole page; it asks about the page's 20
	// items and the one that says a next page exists (a batch's entries
	// beyond them, read in case some are hidden, are not asked about:
	// these plain posts are all shown).
	for _, k := range []string{b.keys.Liked(v, readmodel.DayOf(posts[0].id)), b.keys.Reposted(v, readmodel.DayOf(posts[0].id))} {
		if n, members := log.count(nil, "smismember", k); n != 1 || members != 21 {
			t.Errorf("%s: %d commands asking %d members, want 1 asking 21", k, n, members)
		}
	}
	// The items' hydration is one round trip: the viewer's state and
	// every post's counts in one pipeline; bodies and names came from
	// process memory.
	round := log.roundOf("smismember", b.keys.Liked(v, readmodel.DayOf(posts[0].id)))
	if n, _ := log.count(round, "smismember", b.keys.Reposted(v, readmodel.DayOf(posts[0].id))); n != 1 {
		t.Errorf("reposted:{v} not asked in the pipeline of liked:{v}: %v", round)
	}
	if n, _ := log.count(round, "hmget", b.keys.Prefix+"counts:"); n != 21 {
		t.Errorf("%d counts read with the viewer's state, want the page's 21: %v", n, round)
	}
	if n, _ := log.count(nil, "get", b.keys.Prefix+"name:"); n != 0 {
		t.Errorf("%d names read from Redis on a warm page, want 0", n)
	}
	if n, _ := log.count(nil, "mget", b.keys.Prefix+"post:"); n != 0 {
		t.Errorf("%d body reads on a warm page, want 0", n)
	}
	names := map[int64]string{}
	for i, a := range authors {
		names[a] = fmt.Sprint("u", i+2)
	}
	for _, it := range p.Items {
		id, _ := strconv.ParseInt(it.ID, 10, 64)
		i := slices.IndexFunc(posts, func(k key) bool { return k.id == id })
		want := Counts{Likes: int64(b2i(i%3 == 0) + b2i(i%5 == 0)), Reposts: int64(b2i(i%4 == 0))}
		if *it.Counts != want || it.Viewer.Liked != (i%3 == 0) || it.Viewer.Reposted {
			t.Errorf("post %d: counts %+v viewer %+v, want %+v liked %v", i, *it.Counts, *it.Viewer, want, i%3 == 0)
		}
		a, _ := strconv.ParseInt(it.AuthorID, 10, 64)
		if it.Author.Name != names[a] || it.Author.ID != it.AuthorID {
			t.Errorf("post %d: author %+v, want %q", i, it.Author, names[a])
		}
	}
}

// An undone repost's entry is learnt by the deletion feed like a deleted
// post (post.unreposted.v1 names it): a cached body of it is not trusted
// live for the feed's minute.
func TestDeletionFeedLearnsUnreposts(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{noDeletionFeed: true})
	a, q := b.user(), b.user()
	o := b.post(a, base)
	r := b.repostAt(q, o, base+1)
	if err := b.feed.pollDeletions(b.ctx); err != nil {
		t.Fatal(err)
	}
	if b.knowsDeleted(r.id) {
		t.Fatal("a live repost known deleted")
	}
	b.unrepost(r)
	b.exec(`INSERT INTO events (event_id, stream_id, stream_version, type, payload)
VALUES (gen_random_uuid(), 'repost-' || $1::bigint, 2, 'post.unreposted.v1',
        jsonb_build_object('repostId', $1::bigint::text, 'reposterId', $2::bigint::text, 'postId', $3::bigint::text))`, r.id, q, o.id)
	if err := b.feed.pollDeletions(b.ctx); err != nil {
		t.Fatal(err)
	}
	if !b.knowsDeleted(r.id) {
		t.Fatal("the undone repost's entry was not learnt from the feed")
	}
}
