package rebuild

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/systest"
	"github.com/feedco/feed/testkit/testenv"
)

// The whole pipeline (systest) with the projectors under a Supervisor, so
// they follow switches, and the query side reading with live versions.

// policies are low so a small workload reaches celebrities, trims and floors.
var policies = projections.Config{
	CelebrityThreshold: 8,
	InboxMax:           20,
	InboxTrimSlack:     2,
	TimelineMax:        30,
	BackfillPosts:      5,
	FanoutBatch:        7,
}

type system struct {
	*systest.System

	users []int64
	// keep are posts never deleted: one per user, so every feed is
	// non-empty at all times.
	keep map[int64]bool
	mu   sync.Mutex
	rnd  *rand.Rand
	live []int64 // deletable posts
}

func startSystem(t *testing.T) *system {
	t.Helper()
	return startSystemOn(t, false)
}

// startSystemOn is startSystem with the read models on the Redis Cluster
// of testenv.NewRedisCluster when cluster.
func startSystemOn(t *testing.T, cluster bool) *system {
	t.Helper()
	return startSystemWith(t, systest.Config{Name: "rb", Partitions: 6, Projections: policies, RedisCluster: cluster}, 7)
}

// startSystemWith starts a system of cfg with the tests' cache TTL and
// supervised projectors; stream tells apart the random streams of the
// tests that run in parallel.
func startSystemWith(t *testing.T, cfg systest.Config, stream uint64) *system {
	t.Helper()
	cfg.CacheTTL, cfg.Supervised = 300*time.Millisecond, true
	return &system{
		System: systest.Start(t, cfg),
		keep:   map[int64]bool{},
		rnd:    rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), stream)),
	}
}

// rebuilder returns a Rebuilder for this system with short pauses.
func (s *system) rebuilder(t *testing.T, onPhase func(projection, phase string)) *Rebuilder {
	t.Helper()
	return s.rebuilderWith(t, policies, onPhase)
}

// rebuilderWith is rebuilder building by pcfg's policy (its keys are the
// system's).
func (s *system) rebuilderWith(t *testing.T, pcfg projections.Config, onPhase func(projection, phase string)) *Rebuilder {
	t.Helper()
	pcfg.Keys = readmodel.Keys{Prefix: s.Prefix}
	r, err := New(Config{
		Projections: pcfg, Runner: s.RunnerConfig(),
		CatchUpLag: 0, Handover: time.Second, CleanupDelay: 1500 * time.Millisecond,
		GroupEmptyTimeout: 20 * time.Second, OnPhase: onPhase, Logger: s.Log,
	}, s.DB.Pool, s.Redis)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// seed registers n users, each following about follows others, with one
// kept post each plus posts more posts, and reads every feed once (which
// makes every user active, so fan-out reaches them).
func (s *system) seed(t *testing.T, n, follows, posts int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		u, err := s.Commands.RegisterUser.Handle(ctx, commands.RegisterUser{Name: "u" + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		s.users = append(s.users, u.ID)
	}
	for _, u := range s.users {
		for range follows {
			if err := s.follow(ctx, u); err != nil {
				t.Fatal(err)
			}
		}
		p, err := s.Commands.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: u, Content: "kept post of " + strconv.FormatInt(u, 10)})
		if err != nil {
			t.Fatal(err)
		}
		s.keep[p.ID] = true
	}
	for range posts {
		if err := s.post(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s.warm(t)
}

// warm reads every user's feed until none is cold: a read that finds a
// read model of its reader's unbuilt starts that model's rebuild, but a
// busy process defers rebuilds beyond its limit, so one read each is not
// enough on a loaded machine.
func (s *system) warm(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	cold := s.users
	testenv.Eventually(t, 60*time.Second, "every user's read models built", func() bool {
		var still []int64
		for _, u := range cold {
			p, err := s.Feed.Home(ctx, u, "", 10)
			if err != nil {
				t.Fatal(err)
			}
			if p.Cold {
				still = append(still, u)
			}
		}
		cold = still
		return len(cold) == 0
	})
}

func (s *system) pick() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.users[s.rnd.IntN(len(s.users))]
}

func (s *system) follow(ctx context.Context, u int64) error {
	v := s.pick()
	if v == u {
		return nil
	}
	_, err := s.Commands.Follow.Handle(ctx, commands.Follow{FollowerID: u, FolloweeID: v})
	return err
}

func (s *system) post(ctx context.Context) error {
	a := s.pick()
	p, err := s.Commands.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: a, Content: "post " + time.Now().String()})
	if err == nil {
		s.mu.Lock()
		s.live = append(s.live, p.ID)
		s.mu.Unlock()
	}
	return err
}

// step does one random write: mostly posts, some follows, unfollows and
// deletions (never of a kept post).
func (s *system) step(ctx context.Context) error {
	s.mu.Lock()
	r := s.rnd.IntN(10)
	s.mu.Unlock()
	switch {
	case r < 5:
		return s.post(ctx)
	case r < 7:
		return s.follow(ctx, s.pick())
	case r < 8:
		u, v := s.pick(), s.pick()
		if u == v {
			return nil
		}
		_, err := s.Commands.Unfollow.Handle(ctx, commands.Unfollow{FollowerID: u, FolloweeID: v})
		return err
	default:
		s.mu.Lock()
		if len(s.live) == 0 {
			s.mu.Unlock()
			return nil
		}
		i := s.rnd.IntN(len(s.live))
		id := s.live[i]
		s.live = slices.Delete(s.live, i, i+1)
		s.mu.Unlock()
		var author int64
		if err := s.DB.Pool.QueryRow(ctx, `SELECT author_id FROM posts WHERE id = $1`, id).Scan(&author); err != nil {
			return err
		}
		_, err := s.Commands.DeletePost.Handle(ctx, commands.DeletePost{PostID: id, ActorID: author})
		return err
	}
}

// quiesce waits until CDC confirmed everything written so far and every
// active version's consumer group has committed the end of the topic.
func (s *system) quiesce(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s.WaitCDC(t, 60*time.Second)
	testenv.Eventually(t, 60*time.Second, "active groups catch up", func() bool {
		st, err := ReadStatus(ctx, s.DB.Pool, s.Redis, s.RunnerConfig(), s.Prefix)
		if err != nil {
			return false
		}
		for _, p := range st.Projections {
			if p.Lag != 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(time.Second) // a TTL passes: the query-side caches (300 ms) and version refresh (1 s)
}

// truth is user u's whole feed from the source of truth.
func (s *system) truth(ctx context.Context, u int64) ([]string, error) {
	rows, err := s.DB.Pool.Query(ctx, `SELECT id::text FROM posts WHERE NOT deleted
		AND (author_id = $1 OR author_id IN (SELECT followee_id FROM follows WHERE follower_id = $1))
		ORDER BY created_at DESC, id DESC`, u)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// read is user u's whole feed through the query side, page by page.
func (s *system) read(ctx context.Context, u int64) ([]string, error) {
	var out []string
	cursor := ""
	for range 1000 {
		p, err := s.Feed.Home(ctx, u, cursor, queries.MaxLimit)
		if err != nil {
			return nil, err
		}
		for _, it := range p.Items {
			out = append(out, it.ID)
		}
		if p.NextCursor == nil {
			return out, nil
		}
		cursor = *p.NextCursor
	}
	return nil, errors.New("more than 1000 pages")
}

// checkConverged compares every user's feed with the source of truth.
func (s *system) checkConverged(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, u := range s.users {
		want, err := s.truth(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.read(ctx, u)
		if err != nil {
			t.Fatalf("read feed of %d: %v", u, err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("feed of %d differs from the source of truth:\n got %v\nwant %v\n%s", u, got, want, s.explain(ctx, u, got, want))
		}
	}
}

// explain says, for each post a feed lacks or has too many, where the read
// models hold it: the author, whether the author is a celebrity, the
// post's score in the reader's inbox, the author's timeline and the post
// cache, per active version.
func (s *system) explain(ctx context.Context, u int64, got, want []string) string {
	vs, err := readmodel.LoadVersions(ctx, s.DB.Pool)
	if err != nil {
		return "versions: " + err.Error()
	}
	keys := readmodel.Keys{Prefix: s.Prefix, Versions: vs}
	var b strings.Builder
	inbox, err := homefeed.NewInboxes(keys, policies.Policy()).Posts(ctx, s.Redis, u)
	fmt.Fprintf(&b, "versions %v; inbox %s: %v (%v)\n", vs, homefeed.Key(keys, u), inbox, err)
	describe := func(what, id string) {
		pid, _ := strconv.ParseInt(id, 10, 64)
		var author int64
		var deleted bool
		var created time.Time
		_ = s.DB.Pool.QueryRow(ctx, `SELECT author_id, deleted, created_at FROM posts WHERE id = $1`, pid).Scan(&author, &deleted, &created)
		var follows, followers int
		_ = s.DB.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE follower_id = $2), count(*) FROM follows WHERE followee_id = $1`, author, u).Scan(&follows, &followers)
		fmt.Fprintf(&b, "%s %s: author %d (%d followers in PostgreSQL, followed by %d: %d, celebrity in Redis: %v), created %s, deleted %v; in the inbox %v; timeline score %v; post cache %v\n",
			what, id, author, followers, u, follows, s.Redis.SIsMember(ctx, keys.Celebrities(), author).Val(),
			created.Format("15:04:05.000"), deleted,
			slices.Contains(inbox, pid), s.Redis.ZScore(ctx, keys.Timeline(author), id).Val(),
			s.Redis.HGetAll(ctx, keys.Post(pid)).Val())
	}
	for _, id := range want {
		if !slices.Contains(got, id) {
			describe("missing", id)
		}
	}
	for _, id := range got {
		if !slices.Contains(want, id) {
			describe("extra", id)
		}
	}
	return b.String()
}

// keyVersions counts the read-model keys of the namespace per projection
// and version ("posts/v2" -> n).
func (s *system) keyVersions(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	keys := readmodel.Keys{Prefix: s.Prefix}
	all, err := testenv.Keys(context.Background(), s.Redis, escapeGlob(s.Prefix)+"*")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range all {
		if p, v, ok := keys.Classify(k); ok {
			out[fmt.Sprintf("%s/v%d", p, v)]++
		}
	}
	return out
}

// frozenReaders registers three authors and three readers who follow each
// of them and have read their feed once (active: fan-out reaches them),
// for a test that writes nothing to them while it switches versions.
func (s *system) frozenReaders(t *testing.T) (readers, authors []int64) {
	t.Helper()
	ctx := context.Background()
	for i := range 6 {
		u, err := s.Commands.RegisterUser.Handle(ctx, commands.RegisterUser{Name: "frozen" + string(rune('a'+i))})
		if err != nil {
			t.Fatal(err)
		}
		if i < 3 {
			authors = append(authors, u.ID)
		} else {
			readers = append(readers, u.ID)
		}
	}
	for _, r := range readers {
		for _, a := range authors {
			if _, err := s.Commands.Follow.Handle(ctx, commands.Follow{FollowerID: r, FolloweeID: a}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Feed.Home(ctx, r, "", 10); err != nil {
			t.Fatal(err)
		}
	}
	return readers, authors
}

// goesOn waits until each counter has moved on by n from now: the load
// has run on a while (past a switch, past a cleanup), however fast or
// slow the machine is.
func goesOn(t *testing.T, what string, n int64, counters ...*atomic.Int64) {
	t.Helper()
	from := make([]int64, len(counters))
	for i, c := range counters {
		from[i] = c.Load()
	}
	testenv.Eventually(t, time.Minute, what, func() bool {
		for i, c := range counters {
			if c.Load() < from[i]+n {
				return false
			}
		}
		return true
	})
}

// switchLoad is the load a blue/green switch runs under: a writer on the
// seeded users, two readers of their first pages and, given frozen
// readers, a reader of their whole feeds, each compared with want.
type switchLoad struct {
	stop                                          context.CancelFunc
	wg                                            sync.WaitGroup
	writes, reads, frozenReads, readErrs, empties atomic.Int64
	firstErr                                      atomic.Value // the first write or read error
	mismatch                                      atomic.Value // []any{reader, got}: a frozen feed read unlike want
}

// startLoad starts the load until end.
func (s *system) startLoad(ctx context.Context, frozen []int64, want map[int64][]string) *switchLoad {
	loadCtx, stop := context.WithCancel(ctx)
	l := &switchLoad{stop: stop}
	fail := func(err error) { l.firstErr.CompareAndSwap(nil, err) }
	l.wg.Add(1)
	go func() { // writer, on the seeded users only
		defer l.wg.Done()
		for loadCtx.Err() == nil {
			if err := s.step(ctx); err != nil {
				fail(err)
			}
			l.writes.Add(1)
			time.Sleep(3 * time.Millisecond) // pacing
		}
	}()
	for range 2 { // readers of the seeded users
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for loadCtx.Err() == nil {
				p, err := s.Feed.Home(ctx, s.pick(), "", 20)
				l.reads.Add(1)
				switch {
				case err != nil:
					l.readErrs.Add(1)
					fail(err)
				case len(p.Items) == 0:
					l.empties.Add(1)
				}
			}
		}()
	}
	if len(frozen) == 0 {
		return l
	}
	l.wg.Add(1)
	go func() { // readers of the frozen feeds, whole feeds page by page
		defer l.wg.Done()
		for i := 0; loadCtx.Err() == nil; i++ {
			r := frozen[i%len(frozen)]
			got, err := s.read(ctx, r)
			l.frozenReads.Add(1)
			if err != nil {
				l.readErrs.Add(1)
				fail(err)
				continue
			}
			if !slices.Equal(got, want[r]) {
				l.mismatch.CompareAndSwap(nil, []any{r, got})
			}
		}
	}()
	return l
}

// end stops the load and waits for it.
func (l *switchLoad) end() {
	l.stop()
	l.wg.Wait()
}
