package verify_test

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/testkit/testenv"
	"github.com/feedco/feed/verify"
)

// truthWorld runs commands against a fresh database for the truth's own
// tests: the feed rules as SQL, without any read model.
type truthWorld struct {
	t   *testing.T
	ctx context.Context
	db  *testenv.DB
	c   *commands.Commands
}

func newTruthWorld(t *testing.T) *truthWorld {
	t.Helper()
	db := testenv.NewDB(t)
	ids, err := snowflake.New(5)
	if err != nil {
		t.Fatal(err)
	}
	c, err := commands.New(db.Pool, ids, commands.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &truthWorld{t: t, ctx: context.Background(), db: db, c: c}
}

func (w *truthWorld) user(name string) int64 {
	w.t.Helper()
	u, err := w.c.RegisterUser.Handle(w.ctx, commands.RegisterUser{Name: name})
	if err != nil {
		w.t.Fatal(err)
	}
	return u.ID
}

func (w *truthWorld) post(c commands.CreatePost) int64 {
	w.t.Helper()
	if c.Content == "" {
		c.Content = "hello"
	}
	p, err := w.c.CreatePost.Handle(w.ctx, c)
	if err != nil {
		w.t.Fatal(err)
	}
	return p.ID
}

func (w *truthWorld) must(_ bool, err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w *truthWorld) follow(a, b int64) {
	w.must(w.c.Follow.Handle(w.ctx, commands.Follow{FollowerID: a, FolloweeID: b}))
}

// repost reposts post as user and returns the repost's id.
func (w *truthWorld) repost(user, post int64) int64 {
	w.t.Helper()
	w.must(w.c.Repost.Handle(w.ctx, commands.Repost{UserID: user, PostID: post}))
	var id int64
	if err := w.db.Pool.QueryRow(w.ctx, `SELECT id FROM reposts WHERE user_id = $1 AND post_id = $2`, user, post).Scan(&id); err != nil {
		w.t.Fatal(err)
	}
	return id
}

func (w *truthWorld) feed(u int64) []int64 {
	w.t.Helper()
	ids, err := verify.TruthFeed(w.ctx, w.db.Pool, u)
	if err != nil {
		w.t.Fatal(err)
	}
	return ids
}

func (w *truthWorld) want(what string, u int64, want ...int64) {
	w.t.Helper()
	if got := w.feed(u); !slices.Equal(got, want) {
		w.t.Errorf("%s: the truth's feed of %d is %v, want %v", what, u, got, want)
	}
}

// TestTruthFeedRules pins the truth's SQL to the feed rules, case by case:
// the oracle is only as good as this definition, which shares no code with
// the read side's (homefeed's rules).
func TestTruthFeedRules(t *testing.T) {
	t.Parallel()
	w := newTruthWorld(t)
	v, q1, q2, a, b := w.user("viewer"), w.user("q1"), w.user("q2"), w.user("a"), w.user("b")
	w.follow(v, q1)
	w.follow(v, q2)

	// A repost of a post already in the feed: the original shows itself.
	w.follow(v, a)
	pa := w.post(commands.CreatePost{AuthorID: a})
	w.repost(q1, pa)
	w.want("a repost of a post already in the feed", v, pa)
	w.must(w.c.Unfollow.Handle(w.ctx, commands.Unfollow{FollowerID: v, FolloweeID: a}))

	// Two followees repost the same post: the earliest shows; undoing it
	// brings the next; deleting the original hides both.
	r1 := w.ridOf(q1, pa)
	r2 := w.repost(q2, pa)
	w.want("two followees repost the same post", v, r1)
	w.must(w.c.Unrepost.Handle(w.ctx, commands.Unrepost{UserID: q1, PostID: pa}))
	w.want("undoing the shown repost", v, r2)
	w.must(w.c.DeletePost.Handle(w.ctx, commands.DeletePost{ActorID: a, PostID: pa}))
	w.want("deleting an original with live reposts", v)

	// A reply to someone the viewer does not follow is not shown; to the
	// viewer, to a followee and to oneself it is.
	pb := w.post(commands.CreatePost{AuthorID: b})
	toB := w.post(commands.CreatePost{AuthorID: q1, ReplyTo: pb})
	pv := w.post(commands.CreatePost{AuthorID: v})
	toV := w.post(commands.CreatePost{AuthorID: q1, ReplyTo: pv})
	pq2 := w.post(commands.CreatePost{AuthorID: q2})
	toQ2 := w.post(commands.CreatePost{AuthorID: q1, ReplyTo: pq2})
	self := w.post(commands.CreatePost{AuthorID: q1, ReplyTo: toQ2})
	_ = toB
	own := w.post(commands.CreatePost{AuthorID: v, ReplyTo: pb})
	w.want("replies under the home rule, the viewer's own to a stranger included", v, own, self, toQ2, pq2, toV, pv)
	w.must(w.c.DeletePost.Handle(w.ctx, commands.DeletePost{ActorID: v, PostID: own}))

	// A block between the reposter and the viewer: the block removes the
	// follow, the repost leaves the feed.
	pb2 := w.post(commands.CreatePost{AuthorID: b})
	r3 := w.repost(q2, pb2)
	w.want("a followee's repost of a stranger", v, r3, self, toQ2, pq2, toV, pv)
	w.must(w.c.Block.Handle(w.ctx, commands.Block{BlockerID: q2, BlockedID: v}))
	w.want("a block between the reposter and the viewer", v, self, toV, pv)

	// A muted original author hides the repost.
	r4 := w.repost(q1, pb2)
	w.want("a followee's repost once the other reposter is gone", v, r4, self, toV, pv)
	w.must(w.c.Mute.Handle(w.ctx, commands.Mute{MuterID: v, MutedID: b}))
	w.want("a repost of a muted author", v, self, toV, pv)
}

// ridOf is the id of user's live repost of post.
func (w *truthWorld) ridOf(user, post int64) int64 {
	w.t.Helper()
	return w.repost(user, post) // a repeat is a no-op: it answers the live one
}

// TestTruthItems checks the truth's comparison of items: counts, the
// viewer's state and a quote of a post later deleted.
func TestTruthItems(t *testing.T) {
	t.Parallel()
	w := newTruthWorld(t)
	v, a := w.user("viewer"), w.user("a")
	w.follow(v, a)
	quoted := w.post(commands.CreatePost{AuthorID: a, Content: "quoted"})
	quote := w.post(commands.CreatePost{AuthorID: a, Content: "quoting", QuoteOf: quoted})
	w.must(w.c.Like.Handle(w.ctx, commands.Like{UserID: v, PostID: quote}))
	w.must(w.c.DeletePost.Handle(w.ctx, commands.DeletePost{ActorID: a, PostID: quoted}))
	truth, err := verify.LoadTruth(w.ctx, w.db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	want := w.feed(v)
	if !slices.Equal(want, []int64{quote}) {
		t.Fatalf("feed %v, want [%d]", want, quote)
	}
	item := func(likes int64, liked, unavailable bool) verify.APIPost {
		return verify.APIPost{ID: itoa(quote), AuthorID: itoa(a), Author: &verify.APIAuthor{ID: itoa(a), Name: "a"}, Content: "quoting",
			CreatedAt: verify.FormatMillis(truth.Posts[quote].Ms), Counts: &verify.APICounts{Likes: likes},
			Viewer: &verify.APIViewer{Liked: liked}, Quote: &verify.APIPost{ID: itoa(quoted), Unavailable: unavailable}}
	}
	if d := truth.Diff(v, []verify.APIPost{item(1, true, true)}, want); len(d) != 0 {
		t.Errorf("the right item differs: %v", d)
	}
	for name, it := range map[string]verify.APIPost{
		"a like not counted": item(0, true, true), "the viewer's like missed": item(1, false, true),
		"a quote of a deleted post shown": item(1, true, false),
	} {
		if d := truth.Diff(v, []verify.APIPost{it}, want); len(d) != 1 {
			t.Errorf("%s: %d differences, want 1: %v", name, len(d), d)
		}
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
