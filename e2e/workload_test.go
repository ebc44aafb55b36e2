package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// workload sizes one run. The seed fixes every random choice (the kinds of
// operations, and each client's picks); the interleaving of the concurrent
// clients is the scheduler's, so a seed reproduces the shape of a run, not
// its exact history.
type workload struct {
	Seed    uint64
	Users   int
	Ops     int
	Workers int
	// ReaderShare of the users read their feed during the workload (they
	// become active and get pushes); the others never read until the
	// oracle does, so their inboxes are cold at the end.
	ReaderShare float64
	// ZipfS skews who gets followed (and who posts most): rank r is chosen
	// with weight about 1/(1+r)^s.
	ZipfS float64
	// Bursts are unfollow bursts that take a celebrity below the threshold
	// (and, every other time, follows that take it back over).
	Bursts int
}

func (w workload) String() string {
	return fmt.Sprintf("seed %d, %d users, %d operations, %d clients, %.0f%% readers, zipf s=%.2f, %d bursts",
		w.Seed, w.Users, w.Ops, w.Workers, 100*w.ReaderShare, w.ZipfS, w.Bursts)
}

type opKind int

const (
	opPost opKind = iota
	opPostReplay
	opFollow
	opFollowAgain
	opUnfollow
	opUnfollowNone
	opDelete
	opRead
	opMute
	opUnmute
	opBlock
	opUnblock
	opEdit
	opBurst
	opRepost
	opUnrepost
	opLike
	opUnlike
	opReply
	opQuote
)

// mix is the weight of each kind of operation (bursts are scheduled).
var mix = []struct {
	kind   opKind
	weight int
}{
	{opPost, 27}, {opPostReplay, 2}, {opFollow, 30}, {opFollowAgain, 2},
	{opUnfollow, 9}, {opUnfollowNone, 1}, {opDelete, 7}, {opRead, 17},
	{opMute, 4}, {opUnmute, 2}, {opBlock, 1}, {opUnblock, 1},
	{opEdit, 5},
	{opRepost, 7}, {opUnrepost, 2}, {opLike, 6}, {opUnlike, 2}, {opReply, 6}, {opQuote, 3},
}

// stats counts what the workload did.
type stats struct {
	users, posts, replays, follows, followAgain, unfollows, unfollowNone,
	deletes, reads, bursts, burstUnfollows, burstRefollows, retries,
	mutes, unmutes, blocks, unblocks, blockedFollows, edits, editReplays,
	reposts, unreposts, likes, unlikes, replies, quotes, gone atomic.Int64
}

func (s *stats) String() string {
	return fmt.Sprintf("%d users, %d posts (%d replayed with their Idempotency-Key), %d edits (%d replayed), %d deletes, %d follows (+%d repeated, %d refused by a block), %d unfollows (+%d of non-followed), %d mutes, %d unmutes, %d blocks, %d unblocks, %d feed reads, %d bursts (%d unfollows, %d refollows), %d retried answers; %d reposts, %d undone, %d likes, %d unliked, %d replies, %d quotes (%d of posts deleted meanwhile)",
		s.users.Load(), s.posts.Load(), s.replays.Load(), s.edits.Load(), s.editReplays.Load(), s.deletes.Load(), s.follows.Load(), s.followAgain.Load(), s.blockedFollows.Load(),
		s.unfollows.Load(), s.unfollowNone.Load(), s.mutes.Load(), s.unmutes.Load(), s.blocks.Load(), s.unblocks.Load(),
		s.reads.Load(), s.bursts.Load(), s.burstUnfollows.Load(), s.burstRefollows.Load(), s.retries.Load(),
		s.reposts.Load(), s.unreposts.Load(), s.likes.Load(), s.unlikes.Load(), s.replies.Load(), s.quotes.Load(), s.gone.Load())
}

// world is the workload's view of what it did, used only to choose the
// next operations; the oracle trusts PostgreSQL, not this.
type world struct {
	s   *system
	w   workload
	st  stats
	ctx context.Context

	mu        sync.Mutex
	users     []int64 // by popularity rank: users[0] is followed most
	tokens    map[int64]string
	readers   []int64
	following map[int64]map[int64]bool // follower -> followees
	followers map[int64]map[int64]bool // followee -> followers
	live      map[int64][]int64        // author -> posts not deleted
	muted     [][2]int64               // (muter, muted) pairs the workload muted
	blocked   [][2]int64               // (blocker, blocked) pairs the workload blocked
	reposted  [][2]int64               // (reposter, post) pairs the workload reposted
	liked     [][2]int64               // (liker, post) pairs the workload liked
}

// run registers the users, then plays the operations from w.Workers
// concurrent HTTP clients. The first error stops it.
func runWorkload(t *testing.T, s *system, w workload) *world {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wd := &world{s: s, w: w, ctx: ctx, tokens: map[int64]string{},
		following: map[int64]map[int64]bool{}, followers: map[int64]map[int64]bool{}, live: map[int64][]int64{}}

	// Registrations, concurrently; then ranks and readers from the seed.
	ids := make([]int64, w.Users)
	var firstErr error
	var errOnce sync.Once
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}
	parallel(w.Workers, w.Users, func(i int) {
		var u apiUser
		if err := s.call(ctx, http.MethodPost, "/api/users", "", "", map[string]string{"name": fmt.Sprint("user ", i)}, &u, http.StatusCreated, &wd.st.retries); err != nil {
			fail(err)
			return
		}
		id, err := strconv.ParseInt(u.ID, 10, 64)
		if err != nil {
			fail(fmt.Errorf("register: id %q: %w", u.ID, err))
			return
		}
		ids[i] = id
		wd.st.users.Add(1)
	})
	if firstErr != nil {
		t.Fatalf("%v (%v)", firstErr, w)
	}
	slices.Sort(ids)
	rng := rand.New(rand.NewPCG(w.Seed, 0))
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	wd.users = ids
	for _, id := range ids {
		wd.tokens[id] = s.signer.Sign(id, 24*time.Hour)
		if rng.Float64() < w.ReaderShare {
			wd.readers = append(wd.readers, id)
		}
	}

	// Half the readers open their feed once before anything else happens:
	// they are active (pushed to) from the start, with inboxes built while
	// empty. The other half first read during the workload: their cold
	// inboxes are rebuilt while posts, follows and unfollows go on.
	parallel(w.Workers, len(wd.readers)/2, func(i int) {
		u := wd.readers[2*i]
		if err := s.call(ctx, http.MethodGet, "/api/feed?limit=10", wd.tokens[u], "", nil, nil, http.StatusOK, &wd.st.retries); err != nil {
			fail(err)
			return
		}
		wd.st.reads.Add(1)
	})
	if firstErr != nil {
		t.Fatalf("%v (%v)", firstErr, w)
	}

	// The kinds of operation, in order, with the bursts spread over the
	// second half so there are celebrities to burst.
	kinds := make([]opKind, 0, w.Ops+w.Bursts)
	total := 0
	for _, m := range mix {
		total += m.weight
	}
	for i := 0; i < w.Ops; i++ {
		n := rng.IntN(total)
		for _, m := range mix {
			if n < m.weight {
				kinds = append(kinds, m.kind)
				break
			}
			n -= m.weight
		}
		for b := 0; b < w.Bursts; b++ {
			if i == w.Ops/2+(b*w.Ops/2)/w.Bursts {
				kinds = append(kinds, opBurst)
			}
		}
	}

	next := make(chan int)
	go func() {
		defer close(next)
		for i := range kinds {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for c := 0; c < w.Workers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &client{world: wd, rng: rand.New(rand.NewPCG(w.Seed, uint64(c)+1))}
			cl.zipf = rand.NewZipf(cl.rng, w.ZipfS, 1, uint64(w.Users-1))
			for i := range next {
				if err := cl.do(kinds[i], i); err != nil {
					fail(fmt.Errorf("operation %d: %w", i, err))
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr == nil {
		// A last burst, alone, that leaves its celebrity below the
		// threshold: the posts of its celebrity time must end up in the
		// inboxes of its remaining followers, with no refollow to hide a
		// missed backfill behind the pull path again.
		cl := &client{world: wd, rng: rand.New(rand.NewPCG(w.Seed, 0))}
		if err := cl.burstDown(len(kinds), false); err != nil {
			fail(fmt.Errorf("last burst: %w", err))
		}
		// A celebrity at the end, whatever the bursts left (the last one
		// may have taken the only one below), other than the last burst's.
		if firstErr == nil {
			if err := cl.liftCelebrity(cl.burst); err != nil {
				fail(fmt.Errorf("last lift: %w", err))
			}
		}
		// Last shares, so that each case stands at the end whatever the
		// mix and the interleaving left: an original reposted by two
		// accounts, one of them the most followed (a celebrity after the
		// lift: its repost pulled), and its author's reply to it; an
		// original reposted and then deleted; a quote of a post deleted
		// after.
		if firstErr == nil {
			if err := cl.lastShares(cl.burst); err != nil {
				fail(fmt.Errorf("last shares: %w", err))
			}
		}
		// A last mute, of a followed account, so that one stands at the
		// end whatever the mix and the interleaving left.
		if f, e, ok := cl.existingFollow(); ok && firstErr == nil {
			if err := cl.pairCall(http.MethodPut, "/api/muting/", f, e, &cl.muted, &cl.st.mutes); err != nil {
				fail(fmt.Errorf("last mute: %w", err))
			}
		}
	}
	if firstErr != nil {
		t.Fatalf("workload failed (%v): %v", w, firstErr)
	}
	return wd
}

// parallel runs fn(0..n-1) on k goroutines.
func parallel(k, n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// client is one concurrent HTTP client of the workload.
type client struct {
	*world
	rng  *rand.Rand
	zipf *rand.Zipf
	// burst is the celebrity this client's last burstDown took below the
	// threshold.
	burst int64
}

func (c *client) uniform() int64 { return c.users[c.rng.IntN(len(c.users))] }
func (c *client) popular() int64 { return c.users[c.zipf.Uint64()] }

func (c *client) do(kind opKind, i int) error {
	switch kind {
	case opPost:
		author := c.uniform()
		if c.rng.IntN(2) == 0 {
			author = c.popular() // the followed post more
		}
		_, err := c.post(author, fmt.Sprintf("post %d by %d", i, author), "")
		return err
	case opPostReplay:
		author := c.uniform()
		key := fmt.Sprintf("op-%d-%d", c.w.Seed, i)
		first, err := c.post(author, fmt.Sprintf("replayed post %d", i), key)
		if err != nil {
			return err
		}
		again, _, err := c.send(author, fmt.Sprintf("replayed post %d", i), key)
		if err != nil {
			return err
		}
		if again.ID != first.ID {
			return fmt.Errorf("idempotent replay of a post returned %s, first %s", again.ID, first.ID)
		}
		c.st.replays.Add(1)
		return nil
	case opFollow:
		follower, followee := c.uniform(), c.popular()
		if follower == followee {
			followee = c.users[(slices.Index(c.users, followee)+1)%len(c.users)]
		}
		return c.follow(follower, followee)
	case opFollowAgain:
		f, e, ok := c.existingFollow()
		if !ok {
			return nil
		}
		c.st.followAgain.Add(1)
		return c.follow(f, e)
	case opUnfollow:
		f, e, ok := c.existingFollow()
		if !ok {
			return nil
		}
		return c.unfollow(f, e)
	case opUnfollowNone:
		f, e := c.uniform(), c.uniform()
		c.mu.Lock()
		follows := f == e || c.following[f][e]
		c.mu.Unlock()
		if follows {
			return nil
		}
		c.st.unfollowNone.Add(1)
		return c.s.call(c.ctx, http.MethodDelete, "/api/following/"+itoa(e), c.tokens[f], "", nil, nil, http.StatusNoContent, &c.st.retries)
	case opDelete:
		return c.deleteSome()
	case opEdit:
		return c.editSome(i)
	case opRead:
		return c.read()
	case opMute:
		// Mostly an account the muter follows (its posts are in the
		// inbox or pulled), sometimes any.
		f, e, ok := c.existingFollow()
		if !ok || c.rng.IntN(4) == 0 {
			f, e = c.uniform(), c.popular()
		}
		if f == e {
			return nil
		}
		return c.pairCall(http.MethodPut, "/api/muting/", f, e, &c.muted, &c.st.mutes)
	case opUnmute:
		f, e, ok := c.takePair(&c.muted)
		if !ok {
			return nil
		}
		return c.pairCall(http.MethodDelete, "/api/muting/", f, e, nil, &c.st.unmutes)
	case opBlock:
		f, e, ok := c.existingFollow()
		if !ok {
			return nil
		}
		if c.rng.IntN(2) == 0 {
			f, e = e, f // the followee blocks the follower
		}
		if err := c.pairCall(http.MethodPut, "/api/blocking/", f, e, &c.blocked, &c.st.blocks); err != nil {
			return err
		}
		c.mu.Lock()
		for _, p := range [2][2]int64{{f, e}, {e, f}} {
			delete(c.following[p[0]], p[1])
			delete(c.followers[p[1]], p[0])
		}
		c.mu.Unlock()
		return nil
	case opUnblock:
		f, e, ok := c.takePair(&c.blocked)
		if !ok {
			return nil
		}
		return c.pairCall(http.MethodDelete, "/api/blocking/", f, e, nil, &c.st.unblocks)
	case opBurst:
		return c.burstDown(i, c.rng.IntN(2) == 0)
	case opRepost, opLike:
		// Mostly a popular author's post, by anyone: popular reposters
		// are celebrities (their reposts pulled), the others pushed.
		user := c.uniform()
		if c.rng.IntN(3) == 0 {
			user = c.popular()
		}
		_, post, ok := c.somePost()
		if !ok {
			return nil
		}
		list, n, path := &c.reposted, &c.st.reposts, "/repost"
		if kind == opLike {
			list, n, path = &c.liked, &c.st.likes, "/like"
		}
		return c.shareCall(http.MethodPut, path, user, post, list, n)
	case opUnrepost, opUnlike:
		list, n, path := &c.reposted, &c.st.unreposts, "/repost"
		if kind == opUnlike {
			list, n, path = &c.liked, &c.st.unlikes, "/like"
		}
		user, post, ok := c.takePair(list)
		if !ok {
			return nil
		}
		return c.shareCall(http.MethodDelete, path, user, post, nil, n)
	case opReply, opQuote:
		author := c.uniform()
		if c.rng.IntN(2) == 0 {
			author = c.popular()
		}
		parent, post, ok := c.somePost()
		if !ok {
			return nil
		}
		if kind == opReply && c.rng.IntN(5) == 0 {
			author = parent // a reply to oneself
		}
		body := map[string]any{"content": fmt.Sprintf("reply %d to %d", i, post), "replyTo": itoa(post)}
		n := &c.st.replies
		if kind == opQuote {
			body, n = map[string]any{"content": fmt.Sprintf("quote %d of %d", i, post), "quoteOf": itoa(post)}, &c.st.quotes
		}
		var p apiPost
		err := c.s.call(c.ctx, http.MethodPost, "/api/posts", c.tokens[author], "", body, &p, http.StatusCreated, &c.st.retries)
		if gone(err, http.StatusUnprocessableEntity, http.StatusForbidden) {
			c.st.gone.Add(1) // deleted meanwhile, or its author blocks this one
			return nil
		}
		if err != nil {
			return err
		}
		id, err := strconv.ParseInt(p.ID, 10, 64)
		if err != nil {
			return fmt.Errorf("create post: got %+v", p)
		}
		n.Add(1)
		c.mu.Lock()
		c.live[author] = append(c.live[author], id)
		c.mu.Unlock()
		return nil
	}
	return fmt.Errorf("unknown operation kind %d", kind)
}

// lastShares plays the workload's last shares (see runWorkload), skipping
// skip as an author.
func (c *client) lastShares(skip int64) error {
	c.mu.Lock()
	var top int64
	best := -1
	for _, u := range c.users {
		if n := len(c.followers[u]); u != skip && n > best {
			top, best = u, n
		}
	}
	// No two of the five accounts are in a block: a repost of a post
	// whose author blocks the reposter is refused (403).
	blocks := map[[2]int64]bool{}
	for _, p := range c.blocked {
		blocks[p], blocks[[2]int64{p[1], p[0]}] = true, true
	}
	others := []int64{}
	for _, u := range c.users {
		if u == top || u == skip || len(others) == 4 {
			continue
		}
		free := !blocks[[2]int64{u, top}]
		for _, o := range others {
			free = free && !blocks[[2]int64{u, o}]
		}
		if free {
			others = append(others, u)
		}
	}
	c.mu.Unlock()
	if len(others) < 4 {
		return fmt.Errorf("last shares: %d accounts outside blocks with the most followed, want 4", len(others))
	}
	author, second, quoter, doomed := others[0], others[1], others[2], others[3]
	post := func(a int64, body map[string]any) (int64, error) {
		var p apiPost
		if err := c.s.call(c.ctx, http.MethodPost, "/api/posts", c.tokens[a], "", body, &p, http.StatusCreated, &c.st.retries); err != nil {
			return 0, err
		}
		return strconv.ParseInt(p.ID, 10, 64)
	}
	share := func(user, id int64) error {
		return c.s.call(c.ctx, http.MethodPut, "/api/posts/"+itoa(id)+"/repost", c.tokens[user], "", nil, nil, http.StatusNoContent, &c.st.retries)
	}
	del := func(a, id int64) error {
		return c.s.call(c.ctx, http.MethodDelete, "/api/posts/"+itoa(id), c.tokens[a], "", nil, nil, http.StatusNoContent, &c.st.retries)
	}
	twice, err := post(author, map[string]any{"content": "reposted twice at the end"})
	if err != nil {
		return err
	}
	if err := share(top, twice); err != nil {
		return err
	}
	if err := share(second, twice); err != nil {
		return err
	}
	if _, err := post(author, map[string]any{"content": "a reply to oneself at the end", "replyTo": itoa(twice)}); err != nil {
		return err
	}
	c.st.replies.Add(1)
	gone, err := post(doomed, map[string]any{"content": "reposted, quoted, then deleted"})
	if err != nil {
		return err
	}
	if err := share(second, gone); err != nil {
		return err
	}
	if _, err := post(quoter, map[string]any{"content": "a quote of a post deleted after", "quoteOf": itoa(gone)}); err != nil {
		return err
	}
	c.st.reposts.Add(3)
	c.st.quotes.Add(1)
	return del(doomed, gone)
}

// somePost picks a live post, mostly a popular author's newest.
func (c *client) somePost() (author, post int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for range 10 {
		a := c.popular()
		if c.rng.IntN(3) == 0 {
			a = c.uniform()
		}
		if ps := c.live[a]; len(ps) > 0 {
			return a, ps[len(ps)-1-c.rng.IntN(min(len(ps), 4))], true
		}
	}
	return 0, 0, false
}

// shareCall is a PUT or DELETE of /api/posts/{post}+path (repost, like)
// as user, which must be 204, or 404 when the post was deleted meanwhile,
// or 403 when its author blocks user; a pair list, when given, records
// (user, post) after a 204.
func (c *client) shareCall(method, path string, user, post int64, list *[][2]int64, n *atomic.Int64) error {
	err := c.s.call(c.ctx, method, "/api/posts/"+itoa(post)+path, c.tokens[user], "", nil, nil, http.StatusNoContent, &c.st.retries)
	if gone(err, http.StatusNotFound, http.StatusForbidden) {
		c.st.gone.Add(1)
		return nil
	}
	if err != nil {
		return err
	}
	n.Add(1)
	if list != nil {
		c.mu.Lock()
		*list = append(*list, [2]int64{user, post})
		c.mu.Unlock()
	}
	return nil
}

// gone reports whether err is an answer with one of statuses.
func gone(err error, statuses ...int) bool {
	var se *statusError
	return errors.As(err, &se) && slices.Contains(statuses, se.status)
}

// post creates a post and records it as live.
func (c *client) post(author int64, content, key string) (apiPost, error) {
	p, id, err := c.send(author, content, key)
	if err != nil {
		return p, err
	}
	c.mu.Lock()
	if !slices.Contains(c.live[author], id) {
		c.live[author] = append(c.live[author], id)
		c.st.posts.Add(1)
	}
	c.mu.Unlock()
	return p, nil
}

// send is the POST of a post, checked, without recording it: a replay of
// an Idempotency-Key answers the first post's id even when another
// client deleted or is editing it meanwhile, so only the first call may
// put it among the live posts.
func (c *client) send(author int64, content, key string) (apiPost, int64, error) {
	var p apiPost
	if err := c.s.call(c.ctx, http.MethodPost, "/api/posts", c.tokens[author], key, map[string]string{"content": content}, &p, http.StatusCreated, &c.st.retries); err != nil {
		return p, 0, err
	}
	id, err := strconv.ParseInt(p.ID, 10, 64)
	if err != nil || p.AuthorID != itoa(author) {
		return p, 0, fmt.Errorf("create post: got %+v for author %d", p, author)
	}
	return p, id, nil
}

// pairCall is a PUT or DELETE of path+b as a, which must be 204; a pair
// list, when given, records (a, b).
func (c *client) pairCall(method, path string, a, b int64, list *[][2]int64, n *atomic.Int64) error {
	if err := c.s.call(c.ctx, method, path+itoa(b), c.tokens[a], "", nil, nil, http.StatusNoContent, &c.st.retries); err != nil {
		return err
	}
	if list != nil {
		c.mu.Lock()
		*list = append(*list, [2]int64{a, b})
		c.mu.Unlock()
	}
	n.Add(1)
	return nil
}

// takePair removes and returns a random pair of list.
func (c *client) takePair(list *[][2]int64) (a, b int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(*list) == 0 {
		return 0, 0, false
	}
	j := c.rng.IntN(len(*list))
	p := (*list)[j]
	*list = slices.Delete(*list, j, j+1)
	return p[0], p[1], true
}

// follow follows followee as follower; a follow between two accounts one
// of which blocks the other is 403, and is counted, not recorded.
func (c *client) follow(follower, followee int64) error {
	err := c.s.call(c.ctx, http.MethodPut, "/api/following/"+itoa(followee), c.tokens[follower], "", nil, nil, http.StatusNoContent, &c.st.retries)
	if se := (*statusError)(nil); errors.As(err, &se) && se.status == http.StatusForbidden {
		c.st.blockedFollows.Add(1)
		return nil
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.following[follower] == nil {
		c.following[follower] = map[int64]bool{}
	}
	if c.followers[followee] == nil {
		c.followers[followee] = map[int64]bool{}
	}
	c.following[follower][followee] = true
	c.followers[followee][follower] = true
	c.mu.Unlock()
	c.st.follows.Add(1)
	return nil
}

func (c *client) unfollow(follower, followee int64) error {
	if err := c.s.call(c.ctx, http.MethodDelete, "/api/following/"+itoa(followee), c.tokens[follower], "", nil, nil, http.StatusNoContent, &c.st.retries); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.following[follower], followee)
	delete(c.followers[followee], follower)
	c.mu.Unlock()
	c.st.unfollows.Add(1)
	return nil
}

// existingFollow picks a follow the workload made, uniformly over
// followers (so popular followees lose followers more often).
func (c *client) existingFollow() (follower, followee int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for range 10 {
		f := c.uniform()
		if len(c.following[f]) == 0 {
			continue
		}
		es := sortedKeys(c.following[f])
		return f, es[c.rng.IntN(len(es))], true
	}
	return 0, 0, false
}

func (c *client) deleteSome() error {
	c.mu.Lock()
	var author, post int64
	for range 10 {
		a := c.uniform()
		if c.rng.IntN(2) == 0 {
			a = c.popular()
		}
		if ps := c.live[a]; len(ps) > 0 {
			j := c.rng.IntN(len(ps))
			author, post = a, ps[j]
			c.live[a] = slices.Delete(ps, j, j+1)
			break
		}
	}
	c.mu.Unlock()
	if post == 0 {
		return nil
	}
	c.st.deletes.Add(1)
	return c.s.call(c.ctx, http.MethodDelete, "/api/posts/"+itoa(post), c.tokens[author], "", nil, nil, http.StatusNoContent, &c.st.retries)
}

// editSome edits a live post, mostly of a popular author (whose posts
// are in many feeds), so some posts are edited several times; half of
// the edits carry an Idempotency-Key and are sent twice, the replay
// answering the first body. The post is out of c.live during the call,
// so no concurrent delete takes it (an edit of a deleted post is 404).
func (c *client) editSome(i int) error {
	c.mu.Lock()
	var author, post int64
	for range 10 {
		a := c.popular()
		if c.rng.IntN(4) == 0 {
			a = c.uniform()
		}
		if ps := c.live[a]; len(ps) > 0 {
			j := len(ps) - 1 - c.rng.IntN(min(len(ps), 3)) // the newest: on first pages
			author, post = a, ps[j]
			c.live[a] = slices.Delete(ps, j, j+1)
			break
		}
	}
	c.mu.Unlock()
	if post == 0 {
		return nil
	}
	defer func() {
		c.mu.Lock()
		c.live[author] = append(c.live[author], post)
		c.mu.Unlock()
	}()
	key := ""
	if c.rng.IntN(2) == 0 {
		key = fmt.Sprintf("edit-%d-%d", c.w.Seed, i)
	}
	body := map[string]string{"content": fmt.Sprintf("post %d edited by op %d", post, i)}
	var first, again apiPost
	path := "/api/posts/" + itoa(post)
	if err := c.s.call(c.ctx, http.MethodPatch, path, c.tokens[author], key, body, &first, http.StatusOK, &c.st.retries); err != nil {
		return err
	}
	c.st.edits.Add(1)
	if first.Content != body["content"] || first.ID != itoa(post) || first.EditedAt == "" {
		return fmt.Errorf("edit of post %d answered %+v", post, first)
	}
	if c.rng.IntN(3) == 0 {
		// Edited again at once: the two edits travel close together
		// through CDC, the projector and the change feed.
		body2 := map[string]string{"content": fmt.Sprintf("post %d edited twice by op %d", post, i)}
		var second apiPost
		if err := c.s.call(c.ctx, http.MethodPatch, path, c.tokens[author], "", body2, &second, http.StatusOK, &c.st.retries); err != nil {
			return err
		}
		c.st.edits.Add(1)
		if second.Content != body2["content"] {
			return fmt.Errorf("second edit of post %d answered %+v", post, second)
		}
	}
	if key == "" {
		return nil
	}
	// The replay answers the first edit's body, even after a later edit.
	if err := c.s.call(c.ctx, http.MethodPatch, path, c.tokens[author], key, body, &again, http.StatusOK, &c.st.retries); err != nil {
		return err
	}
	if !reflect.DeepEqual(again, first) {
		return fmt.Errorf("idempotent replay of an edit returned %+v, first %+v", again, first)
	}
	c.st.editReplays.Add(1)
	return nil
}

// read is a reader opening their feed: one page, sometimes two.
func (c *client) read() error {
	if len(c.readers) == 0 {
		return nil
	}
	u := c.readers[c.rng.IntN(len(c.readers))]
	limit := 5 + c.rng.IntN(16)
	pages := 1 + c.rng.IntN(3)
	cursor := ""
	for range pages {
		path := "/api/feed?limit=" + strconv.Itoa(limit)
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		var p apiPage
		if err := c.s.call(c.ctx, http.MethodGet, path, c.tokens[u], "", nil, &p, http.StatusOK, &c.st.retries); err != nil {
			return err
		}
		c.st.reads.Add(1)
		if p.NextCursor == nil {
			break
		}
		cursor = *p.NextCursor
	}
	return nil
}

// liftCelebrity makes sure some account other than skip has at least
// the threshold's followers: when none has, the most followed one gets
// follows until it has.
func (c *client) liftCelebrity(skip int64) error {
	thr := int(c.s.pol.CelebrityThreshold)
	c.mu.Lock()
	var top int64
	best := -1
	for _, u := range c.users {
		if n := len(c.followers[u]); u != skip && n > best {
			top, best = u, n
		}
	}
	c.mu.Unlock()
	for _, f := range c.users {
		c.mu.Lock()
		n, has := len(c.followers[top]), c.followers[top][f]
		c.mu.Unlock()
		if n >= thr {
			return nil
		}
		if f == top || has {
			continue
		}
		if err := c.follow(f, top); err != nil {
			return err
		}
	}
	return nil
}

// burstDown lets the least followed celebrity post, takes it below the
// threshold by unfollows, lets it post while it is pushed, and with comeBack
// takes it back over the threshold with follows and lets it post again
// (pulled).
// Other clients follow it meanwhile, so the count comes from the API, and
// the burst goes on until it is below the threshold.
func (c *client) burstDown(i int, comeBack bool) error {
	thr := c.s.pol.CelebrityThreshold
	c.mu.Lock()
	// The least followed celebrity: the others' follows (skewed towards
	// the most followed) are then least likely to lift it back at once.
	var celeb int64
	best := 0
	for _, u := range c.users {
		if n := len(c.followers[u]); n >= int(thr) && (best == 0 || n < best) {
			celeb, best = u, n
		}
	}
	c.mu.Unlock()
	if celeb == 0 {
		return nil
	}
	c.burst = celeb
	c.st.bursts.Add(1)
	// Posts of a celebrity are pulled, never pushed: when it falls below
	// the threshold, its remaining followers' inboxes must get them.
	for k := range 2 {
		if _, err := c.post(celeb, fmt.Sprintf("post %d.before.%d by %d", i, k, celeb), ""); err != nil {
			return err
		}
	}
	var gone []int64
	for round := 0; ; round++ {
		var u apiUser
		if err := c.s.call(c.ctx, http.MethodGet, "/api/users/"+itoa(celeb), c.tokens[celeb], "", nil, &u, http.StatusOK, &c.st.retries); err != nil {
			return err
		}
		if u.FollowerCount < thr {
			break
		}
		if round == 10 {
			return fmt.Errorf("burst: %d still has %d followers after %d unfollows", celeb, u.FollowerCount, len(gone))
		}
		c.mu.Lock()
		fs := sortedKeys(c.followers[celeb])
		c.mu.Unlock()
		c.rng.Shuffle(len(fs), func(a, b int) { fs[a], fs[b] = fs[b], fs[a] })
		fs = fs[:min(len(fs), int(u.FollowerCount-thr)+1+c.rng.IntN(3))]
		for _, f := range fs {
			if err := c.unfollow(f, celeb); err != nil {
				return err
			}
			c.st.burstUnfollows.Add(1)
		}
		gone = append(gone, fs...)
	}
	for k := range 2 {
		if _, err := c.post(celeb, fmt.Sprintf("post %d.%d by %d after a burst", i, k, celeb), ""); err != nil {
			return err
		}
	}
	if !comeBack {
		return nil
	}
	// Back over the threshold: the same followers return.
	for _, f := range gone {
		if err := c.follow(f, celeb); err != nil {
			return err
		}
		c.st.burstRefollows.Add(1)
	}
	_, err := c.post(celeb, fmt.Sprintf("post %d.back by %d", i, celeb), "")
	return err
}

func sortedKeys(m map[int64]bool) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
