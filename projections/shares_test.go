package projections_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/kafkatest"
	"github.com/feedco/feed/testkit/testenv"
)

// countsOf reads post's counts from its read model.
func countsOf(t testing.TB, rdb redis.UniversalClient, keys readmodel.Keys, post int64) readmodel.Counts {
	t.Helper()
	pipe := rdb.Pipeline()
	r := readmodel.NewEngagement(keys).QueueCounts(context.Background(), pipe, []int64{post})
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	c, err := r.At(0)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pgCounts reads post's counts from PostgreSQL, the truth.
func pgCounts(t testing.TB, w *world, post int64) readmodel.Counts {
	t.Helper()
	var c readmodel.Counts
	if err := w.db.Pool.QueryRow(context.Background(), `SELECT like_count, repost_count, reply_count FROM posts WHERE id = $1`, post).
		Scan(&c.Likes, &c.Reposts, &c.Replies); err != nil {
		t.Fatal(err)
	}
	return c
}

func setMembers(t testing.TB, rdb redis.UniversalClient, key string) []string {
	t.Helper()
	m, err := rdb.SMembers(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(m)
	return m
}

// interleaveByKey returns envs in a random order that keeps the order of each
// Kafka key's (partition's) events, as consumers of several partitions
// see them.
func interleaveByKey(rng *rand.Rand, envs []events.Envelope) []events.Envelope {
	var keys []int64
	byKey := map[int64][]events.Envelope{}
	for _, e := range envs {
		if _, ok := byKey[e.AudienceKey]; !ok {
			keys = append(keys, e.AudienceKey)
		}
		byKey[e.AudienceKey] = append(byKey[e.AudienceKey], e)
	}
	out := make([]events.Envelope, 0, len(envs))
	for len(keys) > 0 {
		i := rng.IntN(len(keys))
		k := keys[i]
		out = append(out, byKey[k][0])
		if byKey[k] = byKey[k][1:]; len(byKey[k]) == 0 {
			keys = slices.Delete(keys, i, i+1)
		}
	}
	return out
}

// A like delivered twice through Kafka counts once, and an older like
// redelivered after a newer one leaves the newer count.
func TestLikeRedeliveredCountsOnce(t *testing.T) {
	t.Parallel()
	rig := newPostsRig(t)
	w, rd, b, topic, keys := rig.w, rig.rd, rig.b, rig.topic, rig.keys
	runProjectors(t, b.Addrs(), topic, []projections.Projector{rig.posts})
	a, u, v := w.user(true), w.user(true), w.user(true)
	p := w.post(a)
	w.like(u, p, a, true)
	first := w.envs[len(w.envs)-1]
	b.PublishEvents(t, topic, w.envs...)
	b.PublishEvents(t, topic, first) // the redelivery
	w.envs = w.envs[:0]
	w.like(v, p, a, true)
	b.PublishEvents(t, topic, w.envs...)
	b.PublishEvents(t, topic, first) // an older like after the newer one
	w.envs = w.envs[:0]
	marker := w.user(true) // its name is written after everything above
	b.PublishEvents(t, topic, w.envs...)
	ctx := context.Background()
	testenv.Eventually(t, 60*time.Second, "the marker after the redeliveries", func() bool {
		return rd.Client.Exists(ctx, keys.Name(marker)).Val() == 1
	})
	if got := countsOf(t, rd.Client, keys, p); got != (readmodel.Counts{Likes: 2}) {
		t.Fatalf("counts %+v after two likes, each delivered twice: want 2 likes", got)
	}
	for _, liker := range []int64{u, v} {
		if got := setMembers(t, rd.Client, keys.Liked(liker, readmodel.DayOf(p))); !slices.Equal(got, []string{idstr(p)}) {
			t.Fatalf("liked:{%d} = %v, want [%d]", liker, got, p)
		}
	}
}

// Likes (keyed by the post's author), reposts (keyed by each reposter) and
// replies (keyed by each replier) of one post come through different
// partitions in any interleaving, with redeliveries: the counts are
// PostgreSQL's, the newest position winning each, and the sets and the
// reposts' sorted set are what the events say.
func TestCountsReorderedAcrossPartitions(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	a, u1, u2, r1, r2, x := w.user(true), w.user(true), w.user(true), w.user(true), w.user(true), w.user(true)
	p := w.post(a)
	w.like(u1, p, a, true)
	rp1 := w.repost(r1, p, a)
	w.like(u2, p, a, true)
	rep := w.reply(x, p, a)
	w.like(u1, p, a, false)
	w.repost(r2, p, a)
	w.unrepost(r1, p, a)
	w.reply(x, p, a)
	w.delReply(x, rep, p)
	rp3 := w.repost(r1, p, a)
	want := pgCounts(t, w, p)
	if want != (readmodel.Counts{Likes: 1, Reposts: 2, Replies: 1}) {
		t.Fatalf("the world's counts %+v", want)
	}
	rng := rand.New(rand.NewPCG(11, 13))
	for trial := range 12 {
		keys := readmodel.Keys{Prefix: rd.Prefix + string(rune('a'+trial)) + ":"}
		ps, err := projections.New(projections.Config{Keys: keys}, w.db.Pool, rd.Client, nil, projections.NamePosts)
		if err != nil {
			t.Fatal(err)
		}
		order := interleaveByKey(rng, w.envs)
		if trial > 0 {
			// A partition redelivered from an earlier offset: its events
			// again, in order.
			k := order[rng.IntN(len(order))].AudienceKey
			for _, e := range w.envs {
				if e.AudienceKey == k {
					order = append(order, e)
				}
			}
		}
		applyAll(t, ps, order)
		if got := countsOf(t, rd.Client, keys, p); got != want {
			t.Fatalf("trial %d: counts %+v, want %+v", trial, got, want)
		}
		if got := setMembers(t, rd.Client, keys.Liked(u1, readmodel.DayOf(p))); len(got) != 0 {
			t.Fatalf("trial %d: liked:{u1} %v after the unlike", trial, got)
		}
		if got := setMembers(t, rd.Client, keys.Reposted(r1, readmodel.DayOf(p))); !slices.Equal(got, []string{idstr(p)}) {
			t.Fatalf("trial %d: reposted:{r1} %v after repost, unrepost, repost", trial, got)
		}
		rs, err := readmodel.NewEngagement(keys).EarlierReposts(context.Background(), rd.Client, p, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 2 || rs[0].Reposter != r2 || rs[1] != (readmodel.Repost{ID: rp3, Reposter: r1}) || slices.Contains(rs, readmodel.Repost{ID: rp1, Reposter: r1}) {
			t.Fatalf("trial %d: reposts of p %v, want r2's then r1's second", trial, rs)
		}
	}
}

// crashAfterFirst lets the first command of a pipeline holding a script
// reach Redis and fails the pipeline there, once: a process killed between
// the two writes of an event.
type crashAfterFirst struct {
	armed   atomic.Bool
	crashed atomic.Bool
}

func (*crashAfterFirst) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*crashAfterFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (c *crashAfterFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) < 2 || !c.armed.Load() || cmds[0].Name() != "evalsha" {
			return next(ctx, cmds)
		}
		if err := next(ctx, cmds[:1]); err != nil {
			return err // NOSCRIPT: nothing written, Exec loads and runs again
		}
		c.armed.Store(false)
		c.crashed.Store(true)
		return errors.New("crashed after the first write")
	}
}

// A crash between the count and the liker's set (the count written,
// liked:{u} not) is repaired by the event's redelivery, which does not
// count the like again.
func TestLikeCrashBetweenTwoWrites(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	hook := &crashAfterFirst{}
	rd.Client.AddHook(hook)
	ps, err := projections.New(projections.Config{Keys: keys}, w.db.Pool, rd.Client, nil, projections.NamePosts)
	if err != nil {
		t.Fatal(err)
	}
	a, u := w.user(true), w.user(true)
	p := w.post(a)
	applyAll(t, ps, w.envs)
	w.envs = w.envs[:0]
	w.like(u, p, a, true)
	hook.armed.Store(true)
	if err := projections.Apply(context.Background(), ps, w.envs[0]); err == nil || !hook.crashed.Load() {
		t.Fatalf("the like applied without the crash (%v)", err)
	}
	if got := countsOf(t, rd.Client, keys, p); got.Likes != 1 {
		t.Fatalf("counts %+v after the crash: the count was written first", got)
	}
	if got := setMembers(t, rd.Client, keys.Liked(u, readmodel.DayOf(p))); len(got) != 0 {
		t.Fatalf("liked:{u} %v after the crash, want empty (not written)", got)
	}
	applyAll(t, ps, w.envs) // the redelivery
	if got := countsOf(t, rd.Client, keys, p); got.Likes != 1 {
		t.Fatalf("counts %+v after the redelivery, want 1 like", got)
	}
	if got := setMembers(t, rd.Client, keys.Liked(u, readmodel.DayOf(p))); !slices.Equal(got, []string{idstr(p)}) {
		t.Fatalf("liked:{u} %v after the redelivery, want [%d]", got, p)
	}
}

// A repost and its undo, then both redelivered: the repost's body is a
// tombstone naming the original, and it is in no timeline, no reposts
// set and no reposted set; the count is PostgreSQL's.
func TestRepostThenUnrepostRedelivered(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	ps := newProjectors(t, w, rd.Client, projections.Config{Keys: keys, CelebrityThreshold: 100})
	a, q, f := w.user(true), w.user(true), w.user(true)
	w.follow(f, q)
	p := w.post(a)
	r := w.repost(q, p, a)
	applyAll(t, ps, w.envs)
	ctx := context.Background()
	var body readmodel.Post
	if err := jsonGet(rd.Client, keys.Post(r), &body); err != nil || body.RepostOf != p || body.RepostOfAuthor != a || body.AuthorID != q || body.Deleted {
		t.Fatalf("repost body %+v (%v)", body, err)
	}
	if ids, _, _ := inboxView(t, rd.Client, keys, f); !slices.Contains(ids, idstr(r)) {
		t.Fatalf("the reposter's follower's inbox %v lacks the repost %d", ids, r)
	}
	n := len(w.envs)
	w.unrepost(q, p, a)
	applyAll(t, ps, w.envs[n:])
	applyAll(t, ps, w.envs[n-1:]) // the repost and its undo again
	if err := jsonGet(rd.Client, keys.Post(r), &body); err != nil || !body.Deleted || body.RepostOf != p || body.Content != "" {
		t.Fatalf("undone repost body %+v (%v), want a tombstone naming %d", body, err, p)
	}
	if s, err := rd.Client.ZScore(ctx, keys.Timeline(q), idstr(r)).Result(); err != redis.Nil {
		t.Fatalf("the undone repost is in the reposter's timeline (%v %v)", s, err)
	}
	if rd.Client.ZCard(ctx, keys.Reposts(p)).Val() != 0 || len(setMembers(t, rd.Client, keys.Reposted(q, readmodel.DayOf(p)))) != 0 {
		t.Fatal("the undone repost is still in reposts:{p} or reposted:{q}")
	}
	if got := countsOf(t, rd.Client, keys, p); got != pgCounts(t, w, p) || got.Reposts != 0 {
		t.Fatalf("counts %+v, want none", got)
	}
	if ids, _, _ := inboxView(t, rd.Client, keys, f); slices.Contains(ids, idstr(r)) {
		t.Fatalf("the undone repost stays in the follower's inbox %v", ids)
	}
}

// reposts:{O} lists an original's live reposts by repost id, whatever
// order the reposters' partitions deliver them in.
func TestRepostsOrder(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	ps, err := projections.New(projections.Config{Keys: keys}, w.db.Pool, rd.Client, nil, projections.NamePosts)
	if err != nil {
		t.Fatal(err)
	}
	a := w.user(true)
	p := w.post(a)
	var want []readmodel.Repost
	for range 6 {
		q := w.user(true)
		want = append(want, readmodel.Repost{ID: w.repost(q, p, a), Reposter: q})
	}
	w.unrepost(want[2].Reposter, p, a)
	want = slices.Delete(want, 2, 3)
	// Shuffled across reposters, each reposter's own events in order; the
	// newest repost first.
	last := w.envs[len(w.envs)-2]
	applyAll(t, ps, append([]events.Envelope{last}, interleaveByKey(rand.New(rand.NewPCG(5, 8)), w.envs)...))
	for _, before := range []int64{0, want[3].ID} {
		got, err := readmodel.NewEngagement(keys).EarlierReposts(context.Background(), rd.Client, p, before, 2)
		if err != nil {
			t.Fatal(err)
		}
		exp := want
		if before != 0 {
			exp = want[:3]
		}
		if !slices.Equal(got, exp) {
			t.Fatalf("reposts before %d: %v, want %v", before, got, exp)
		}
	}
}

// The followers projector writes a block in both accounts' following_v
// ("b:" for the blocker, "x:" for the blocked), by the pair's version: an
// unblock delivered before its block leaves no block, a later block
// brings it back.
func TestBlockFieldsBothWays(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	ps, err := projections.New(projections.Config{Keys: keys}, w.db.Pool, rd.Client, nil, projections.NameFollowers)
	if err != nil {
		t.Fatal(err)
	}
	u, v := w.user(true), w.user(true)
	w.block(u, v, true)
	w.block(u, v, false)
	n := len(w.envs)
	rel := func() (ofU, ofV readmodel.Relation) {
		t.Helper()
		f := readmodel.NewFollows(keys)
		pipe := rd.Client.Pipeline()
		ru := f.QueueRelations(context.Background(), pipe, u, []int64{v})
		rv := f.QueueRelations(context.Background(), pipe, v, []int64{u})
		if _, err := pipe.Exec(context.Background()); err != nil {
			t.Fatal(err)
		}
		a, err := ru.All()
		if err != nil {
			t.Fatal(err)
		}
		b, err := rv.All()
		if err != nil {
			t.Fatal(err)
		}
		return a[0], b[0]
	}
	applyAll(t, ps, []events.Envelope{w.envs[n-1], w.envs[n-2]}) // unblock, then block
	if a, b := rel(); a != (readmodel.Relation{}) || b != (readmodel.Relation{}) {
		t.Fatalf("after the unblock and its older block: %+v %+v, want none", a, b)
	}
	w.block(u, v, true)
	applyAll(t, ps, w.envs[n:])
	applyAll(t, ps, w.envs[n-2:]) // redelivered from before
	if a, b := rel(); a != (readmodel.Relation{Blocks: true}) || b != (readmodel.Relation{BlockedBy: true}) {
		t.Fatalf("after a block again: of u %+v, of v %+v; want blocks and blocked-by", a, b)
	}
}

// Through Kafka with every projector: a repost by an ordinary account and
// a reply are pushed to all of their author's followers (whether they show
// is the read's rule), a repost by a celebrity is in their timeline and no
// inbox.
func TestRepostAndReplyFanOut(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	b := kafkatest.Start(t)
	topic := b.Topic(t, 4)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	ps := newProjectors(t, w, rd.Client, projections.Config{Keys: keys, CelebrityThreshold: 3})
	runProjectors(t, b.Addrs(), topic, ps)
	ctx := context.Background()

	a, q, star := w.user(true), w.user(true), w.user(true)
	f1, f2, f3, f4, f5 := w.user(true), w.user(true), w.user(true), w.user(true), w.user(true)
	w.follow(f1, q)
	w.follow(f2, q)
	w.follow(f2, a)
	for _, f := range []int64{f3, f4, f5} {
		w.follow(f, star)
	}
	b.PublishEvents(t, topic, w.envs...)
	w.envs = w.envs[:0]
	// Every group past the follows: a follow's backfill copies the
	// followee's timeline as it is when the inbox projector applies it, so
	// an inbox projector still behind would copy the star's repost below.
	var groups []string
	for _, p := range ps {
		groups = append(groups, topic+"."+p.Group())
	}
	testenv.Eventually(t, 60*time.Second, "the follows applied by every projector", func() bool {
		lags, err := projections.ConsumerLag(ctx, b.Conn(), topic, groups)
		if err != nil || len(lags) != len(groups) {
			return false
		}
		for _, l := range lags {
			if l != 0 {
				return false
			}
		}
		return rd.Client.SIsMember(ctx, keys.Celebrities(), idstr(star)).Val()
	})
	p := w.post(a)
	rq := w.repost(q, p, a)
	rs := w.repost(star, p, a)
	reply := w.reply(q, p, a) // q replies to a: f2 follows a, f1 does not
	b.PublishEvents(t, topic, w.envs...)
	testenv.Eventually(t, 60*time.Second, "the repost and reply projected", func() bool {
		return rd.Client.ZScore(ctx, keys.Timeline(star), idstr(rs)).Err() == nil &&
			rd.Client.Exists(ctx, keys.Post(reply)).Val() == 1 &&
			countsOf(t, rd.Client, keys, p) == readmodel.Counts{Reposts: 2, Replies: 1}
	})
	// Replies and reposts reach every active follower of their author
	// (the read decides what shows: f1 will not see the reply to a, f2
	// will not see q's repost of a's post, which it has itself); the
	// celebrity's repost is pulled, never pushed.
	testenv.Eventually(t, 60*time.Second, "the pushes", func() bool {
		ids1, _, _ := inboxView(t, rd.Client, keys, f1)
		ids2, _, _ := inboxView(t, rd.Client, keys, f2)
		return slices.Contains(ids1, idstr(rq)) && slices.Contains(ids1, idstr(reply)) &&
			slices.Contains(ids2, idstr(p)) && slices.Contains(ids2, idstr(reply)) && slices.Contains(ids2, idstr(rq))
	})
	for _, f := range []int64{f3, f4, f5} {
		if ids, _, _ := inboxView(t, rd.Client, keys, f); slices.Contains(ids, idstr(rs)) {
			t.Fatalf("the celebrity's repost was pushed to %d: %v", f, ids)
		}
	}
}

// A like poisoned in the posts group (its handler failing) is parked with
// its type, the partition goes on, and after the fix `feed poison replay`
// applies it and what followed it for its key (the liked post's author):
// the count and the liker's set are right, and replaying again changes
// nothing.
func TestPoisonedLikeReplays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	b := kafkatest.Start(t)
	topic := b.Topic(t, 2)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	ps, err := projections.New(projections.Config{Keys: keys}, w.db.Pool, rd.Client, nil, projections.NamePosts)
	if err != nil {
		t.Fatal(err)
	}
	posts := &broken{Projector: ps[0], bad: map[string]bool{}}
	posts.on.Store(true)
	r, err := projections.NewRunner(projections.RunnerConfig{Brokers: b.Addrs(), Topic: topic, GroupPrefix: topic + ".",
		Logger: quietLogger(), LagInterval: -1, RetryInitial: 5 * time.Millisecond, MaxRetries: 1}, posts)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Go(t, "runner", r.Run)
	group := topic + "." + projections.GroupPosts

	a, u, v := w.user(true), w.user(true), w.user(true)
	p := w.post(a)
	w.like(u, p, a, true)
	posts.bad[w.envs[len(w.envs)-1].EventID] = true
	w.like(v, p, a, true)
	b.PublishEvents(t, topic, w.envs...)
	q, err := projections.NewPoisonQueue(b.Conn(), topic, w.db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the like poisoned and the next one applied", func() bool {
		es, err := q.List(ctx, group, false)
		return err == nil && len(es) == 1 && rd.Client.SIsMember(ctx, keys.Liked(v, readmodel.DayOf(p)), idstr(p)).Val()
	})
	es, _ := q.List(ctx, group, false)
	if es[0].Type != events.TypePostLiked || es[0].Key != idstr(a) {
		t.Fatalf("poison entry %+v, want a post.liked.v1 keyed by the author", es[0])
	}
	if rd.Client.SIsMember(ctx, keys.Liked(u, readmodel.DayOf(p)), idstr(p)).Val() {
		t.Fatal("the poisoned like is in liked:{u} before the replay")
	}
	posts.on.Store(false)
	resolver := func(context.Context, string) (projections.Projector, error) { return posts, nil }
	for range 2 {
		res, err := q.Replay(ctx, projections.PoisonSelect{ID: es[0].ID}, resolver)
		if err != nil || len(res) != 1 || res[0].Err != nil {
			t.Fatalf("replay: %+v, %v", res, err)
		}
		if got := countsOf(t, rd.Client, keys, p); got != (readmodel.Counts{Likes: 2}) {
			t.Fatalf("counts %+v after the replay, want 2 likes", got)
		}
		if !rd.Client.SIsMember(ctx, keys.Liked(u, readmodel.DayOf(p)), idstr(p)).Val() {
			t.Fatal("the replayed like is not in liked:{u}")
		}
	}
}
