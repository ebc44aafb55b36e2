package queries

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/internal/genmap"
	"github.com/feedco/feed/readmodel"
)

// A page's entries become items here: the feed rules (homefeed.Judge,
// Earliest, QuoteAvailable) decide which are shown, and the shown ones are
// hydrated with what changes between pages: the author's name, the
// counts, the viewer's own state, the quoted post and a repost's
// original. The bodies come from the process's post cache like the
// entries' (a body it does not hold is read from Redis, or PostgreSQL,
// in one more round trip at most per level: originals and quoted posts,
// then the posts the originals quote); everything else is one round trip
// at most (shareAsk), through the read cache when the page's segment read
// went through it (share_cache.go: what the cache holds costs nothing): the viewer's relations to the accounts the entries name
// (one HMGET of following_v:{viewer}), follows not known from the page
// (one SMISMEMBER), counts (one HMGET of counts:{p} per post), the
// viewer's likes and reposts (two SMISMEMBER for the whole page, never a
// command per item), the names the process does not hold (one GET each),
// and the first page of each repost's earlier reposts (one ZRANGE BYLEX
// each). Only a repost with more earlier reposts than a page, or earlier
// reposters whose follow is not known yet, costs one more. While Redis is
// unavailable (and for the read of a page from PostgreSQL alone) the same
// questions go to PostgreSQL's tables (pg_shares.go): the same items.

// shareSource says where a page's questions go.
type shareSource uint8

const (
	fromRedis shareSource = iota
	fromPG
)

// repostsPageSize is how many earlier reposts of an original one ZRANGE
// reads.
const repostsPageSize = 32

// cand is one entry a page may show: its key (the entry's own time and
// id) and its body.
type cand struct {
	k  key
	cp *cachedPost
}

// shareAsk is what a page asks beyond the bodies, and the answers.
type shareAsk struct {
	viewer   int64
	gen      *cacheGen // the read-cache generation of the page's segment read (visibility.gen): sharesThrough
	accounts []int64   // relations (mutes, blocks) of the viewer to them
	follows  []int64   // follow questions the page did not answer
	posts    []int64   // counts and viewer state
	names    []int64   // names the process does not hold
	reposts  []int64   // repost entries whose earlier reposts are asked
	origs    []int64   // their originals (origs[i] of reposts[i])

	rel     pageVals[readmodel.Relation]
	follow  map[int64]bool
	counts  pageVals[Counts]
	state   pageVals[ViewerState]
	name    pageVals[string]
	earlier map[int64][]homefeed.Repost // per repost id, the live reposts of its original before it
	more    map[int64]bool              // per repost id: the first page was full, more may follow

	dyn []dynamic // the items' counts and states (plain)
}

// init makes the answers' stores once the questions are known, each
// sized for its questions: a page's answers are then allocated once, not
// grown while they are filled.
func (a *shareAsk) init() {
	a.rel = makePageVals[readmodel.Relation](len(a.accounts))
	a.follow = make(map[int64]bool, len(a.follows))
	a.counts = makePageVals[Counts](len(a.posts))
	a.state = makePageVals[ViewerState](len(a.posts))
	a.name = makePageVals[string](len(a.names))
	a.earlier = make(map[int64][]homefeed.Repost, len(a.reposts))
	a.more = make(map[int64]bool, len(a.reposts))
}

// pageVals holds a page's answers by id: the ids a batch names (a few
// dozen for a page of 20, under two hundred at MaxLimit), searched in order.
// For so few, a search costs less than a map's lookup, and the page
// allocates one array instead of a map's groups.
type pageVals[V any] struct {
	ids  []int64
	vals []V
}

func makePageVals[V any](n int) pageVals[V] {
	return pageVals[V]{ids: make([]int64, 0, n), vals: make([]V, 0, n)}
}

// get returns id's value, the zero value when it has none.
func (m *pageVals[V]) get(id int64) V {
	v, _ := m.lookup(id)
	return v
}

// lookup returns id's value and whether it has one.
func (m *pageVals[V]) lookup(id int64) (V, bool) {
	if i := slices.Index(m.ids, id); i >= 0 {
		return m.vals[i], true
	}
	var zero V
	return zero, false
}

// set makes v id's value.
func (m *pageVals[V]) set(id int64, v V) {
	if i := slices.Index(m.ids, id); i >= 0 {
		m.vals[i] = v
		return
	}
	m.ids = append(m.ids, id)
	m.vals = append(m.vals, v)
}

// addUnique appends v to s unless it is 0 or in s already (a page names a
// few dozen).
func addUnique(s []int64, v int64) []int64 {
	if v == 0 || slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// nameCache holds users' names in process: they never change, so an
// entry is never stale; bounded like the post cache (genmap).
type nameCache struct {
	mu sync.RWMutex
	m  genmap.Map[int64, string]
}

func newNameCache(size int) *nameCache {
	return &nameCache{m: genmap.New[int64, string](size / 2)}
}

func (c *nameCache) get(u int64) (string, bool) {
	return c.m.GetShared(&c.mu, u)
}

func (c *nameCache) put(u int64, name string) {
	c.mu.Lock()
	c.m.Put(u, name)
	c.mu.Unlock()
}

// home says which rules a page applies: a home feed's (homefeed.Judge
// for the viewer), or else an author page's (every post of the author; a repost
// while its original is live and its author neither muted by the viewer
// nor in a block with them).
func (vis visibility) home() bool { return vis.author == 0 }

// show appends to out, up to limit items, the candidates the rules show
// to vis.viewer, hydrated. known answers the follows the page already
// asked (ok false: not asked).
func (f *Feed) show(ctx context.Context, src shareSource, vis visibility, known func(a int64) (follows, ok bool), cands []cand, out []item, limit int) ([]item, error) {
	if len(cands) == 0 || len(out) >= limit {
		return out, nil
	}
	viewer := vis.viewer
	cands = sureCut(vis, cands, limit-len(out))
	// The originals and quoted posts, then the posts the originals quote.
	var need []int64
	for _, c := range cands {
		need = addUnique(need, c.cp.facts.repostOf)
		need = addUnique(need, c.cp.facts.quoteOf)
	}
	bodies, err := f.bodiesOf(ctx, src, vis.fresh, need, nil)
	if err != nil {
		return nil, err
	}
	need = need[:0]
	for _, c := range cands {
		if o := bodies[c.cp.facts.repostOf]; o != nil && !o.deleted {
			if q := o.facts.quoteOf; q != 0 {
				if _, ok := bodies[q]; !ok {
					need = addUnique(need, q)
				}
			}
		}
	}
	if len(need) > 0 {
		if bodies, err = f.bodiesOf(ctx, src, vis.fresh, need, bodies); err != nil {
			return nil, err
		}
	}
	live := func(id int64) *cachedPost {
		if b := bodies[id]; b != nil && !b.deleted {
			return b
		}
		return nil
	}

	a := shareAsk{viewer: viewer, gen: vis.gen, dyn: make([]dynamic, 0, len(cands)+len(cands)/4)}
	// The questions' lists in one array, sized for a page of posts that
	// mostly neither quote nor reply: a post and its author a candidate,
	// a quarter more posts and accounts (quotes, parents, reposted
	// authors). A list that outgrows its part moves to an array of its
	// own (append).
	n := len(cands)
	np, nn, na := n+n/4+1, n+1, n/4+2
	ids := make([]int64, 0, np+nn+na)
	a.posts, a.names, a.accounts = ids[0:0:np], ids[np:np:np+nn], ids[np+nn:np+nn:np+nn+na]
	account := func(x int64) {
		if x != viewer {
			a.accounts = addUnique(a.accounts, x)
		}
	}
	post := func(cp *cachedPost) {
		a.posts = addUnique(a.posts, cp.facts.id)
		a.names = addUnique(a.names, cp.author)
		if q := live(cp.facts.quoteOf); q != nil {
			a.posts = addUnique(a.posts, q.facts.id)
			a.names = addUnique(a.names, q.author)
		}
		account(cp.facts.replyToAuthor)
		account(cp.facts.quoteAuthor)
	}
	for _, c := range cands {
		fa := &c.cp.facts
		if fa.repostOf == 0 {
			post(c.cp)
			continue
		}
		a.names = addUnique(a.names, c.cp.author)
		account(fa.repostOfAuthor)
		o := live(fa.repostOf)
		if o == nil {
			continue
		}
		post(o)
		if vis.home() {
			a.reposts = append(a.reposts, fa.id)
			a.origs = append(a.origs, fa.repostOf)
		}
	}
	if vis.home() {
		for _, x := range a.accounts {
			if _, ok := known(x); !ok {
				a.follows = append(a.follows, x)
			}
		}
	}
	if viewer == 0 {
		a.accounts, a.follows, a.reposts, a.origs = nil, nil, nil, nil
	}
	a.init()
	if err := f.askShares(ctx, src, &a); err != nil {
		return nil, err
	}
	follows := func(x int64) bool {
		if is, ok := known(x); ok {
			return is
		}
		return a.follow[x]
	}
	rel := func(x int64) homefeed.Relation {
		r := a.rel.get(x)
		return homefeed.Relation{Follows: follows(x), Muted: r.Muted, Blocked: r.Blocked()}
	}

	// The rules, then the earliest-repost question of the reposts left.
	verdicts := make([]homefeed.Verdict, len(cands))
	var unknown []int64 // earlier reposters whose follow is not known
	for i, c := range cands {
		fa := &c.cp.facts
		o := live(fa.repostOf)
		e := homefeed.Entry{ID: fa.id, Author: c.cp.author, Deleted: c.cp.deleted, ReplyToAuthor: fa.replyToAuthor,
			RepostOf: fa.repostOf, RepostOfAuthor: fa.repostOfAuthor, OriginalDeleted: fa.repostOf != 0 && o == nil}
		if o != nil {
			e.ReplyToAuthor = o.facts.replyToAuthor
		}
		if !vis.home() {
			verdicts[i] = authorVerdict(viewer, e, rel)
			continue
		}
		verdicts[i] = homefeed.Judge(viewer, e, rel)
		if verdicts[i] != homefeed.ShowIfEarliest {
			continue
		}
		if a.more[fa.id] {
			rest, err := f.moreEarlier(ctx, fa.repostOf, fa.id, a.earlier[fa.id])
			if err != nil {
				return nil, err
			}
			a.earlier[fa.id] = rest
		}
		for _, r := range a.earlier[fa.id] {
			if r.Reposter == viewer {
				continue
			}
			if _, ok := known(r.Reposter); !ok {
				if _, asked := a.follow[r.Reposter]; !asked {
					unknown = addUnique(unknown, r.Reposter)
				}
			}
		}
	}
	if len(unknown) > 0 {
		is, err := f.followsVia(ctx, src, vis.gen, viewer, unknown)
		if err != nil {
			return nil, err
		}
		for j, x := range unknown {
			a.follow[x] = is[j]
		}
	}
	for i, c := range cands {
		if len(out) >= limit {
			break
		}
		switch verdicts[i] {
		case homefeed.Hide:
			continue
		case homefeed.ShowIfEarliest:
			if !homefeed.Earliest(viewer, c.cp.facts.id, a.earlier[c.cp.facts.id], follows) {
				continue
			}
		}
		it := item{key: c.k}
		if c.cp.facts.repostOf == 0 {
			it.post = a.item(c.cp, live, rel)
		} else {
			it.post = c.cp.it.post
			it.post.Author.Name = a.name.get(c.cp.author)
			orig := a.item(live(c.cp.facts.repostOf), live, rel)
			it.post.RepostOf = &orig
		}
		out = append(out, it)
	}
	return out, nil
}

// sureCut drops the candidates that cannot be shown because need
// candidates before them are shown whatever the answers: a post that
// neither reposts nor replies (or replies to the viewer) is shown on a
// home page once its author's follow is checked (the caller did), and
// every post is on an author's page. A batch over-fetches in case some
// entries are hidden; this keeps its questions to the entries that may
// be shown, so a page of plain posts asks about exactly its items.
func sureCut(vis visibility, cands []cand, need int) []cand {
	sure := 0
	for i, c := range cands {
		fa := &c.cp.facts
		if c.cp.deleted || fa.repostOf != 0 || (vis.home() && fa.replyToAuthor != 0 && fa.replyToAuthor != vis.viewer) {
			continue
		}
		if sure++; sure == need {
			return cands[:i+1]
		}
	}
	return cands
}

// authorVerdict is an author page's rule: a post shows; a repost while
// its original is live and the original's author is neither muted by the
// viewer nor in a block with them.
func authorVerdict(viewer int64, e homefeed.Entry, rel func(int64) homefeed.Relation) homefeed.Verdict {
	if e.Deleted {
		return homefeed.Hide
	}
	if e.RepostOf == 0 {
		return homefeed.Show
	}
	if e.OriginalDeleted || (e.RepostOfAuthor != viewer && viewer != 0 && rel(e.RepostOfAuthor).Hidden()) {
		return homefeed.Hide
	}
	return homefeed.Show
}

// item hydrates the post cp (live) as an item: name, counts, viewer
// state, and its quote one level deep.
func (a *shareAsk) item(cp *cachedPost, live func(int64) *cachedPost, rel func(int64) homefeed.Relation) Post {
	p := a.plain(cp)
	if q := cp.facts.quoteOf; q != 0 {
		quote := &Quote{ID: strconv.FormatInt(q, 10)}
		qp := live(q)
		if a.viewer != 0 && qp != nil && !homefeed.QuoteAvailable(a.viewer, true, false, qp.author, rel) {
			qp = nil
		}
		if qp == nil {
			quote.Unavailable = true
		} else {
			inner := a.plain(qp)
			if qq := qp.facts.quoteOf; qq != 0 {
				inner.Quote = &Quote{ID: strconv.FormatInt(qq, 10)} // one level deep: the id alone
			}
			quote.Post = &inner
		}
		p.Quote = quote
	}
	return p
}

// plain is cp's item without its quote.
func (a *shareAsk) plain(cp *cachedPost) Post {
	p := cp.it.post
	p.Author.Name = a.name.get(cp.author)
	if len(a.dyn) == cap(a.dyn) {
		a.dyn = make([]dynamic, 0, max(2*cap(a.dyn), 8))
	}
	a.dyn = append(a.dyn, dynamic{a.counts.get(cp.facts.id), a.state.get(cp.facts.id)})
	d := &a.dyn[len(a.dyn)-1]
	p.Counts, p.Viewer = &d.counts, &d.state
	return p
}

// dynamic is the part of an item a page sets, allocated for a batch's
// items together.
type dynamic struct {
	counts Counts
	state  ViewerState
}

// askShares answers a: names from the process cache first, the rest from
// src in one round trip, names Redis lacks from PostgreSQL.
func (f *Feed) askShares(ctx context.Context, src shareSource, a *shareAsk) error {
	missing := a.names[:0:0]
	for _, u := range a.names {
		if n, ok := f.names.get(u); ok {
			a.name.set(u, n)
		} else {
			missing = append(missing, u)
		}
	}
	a.names = missing
	var err error
	if src == fromRedis && f.live != nil && f.live.EngagementLost() {
		src = fromPG // Redis lost them under a running system (readmodel.LostField)
	}
	if src == fromRedis {
		handled := false
		if g := a.gen; g != nil && g.live() {
			handled, err = f.sharesThrough(ctx, g, a)
		}
		if !handled && err == nil {
			err = f.redisShares(ctx, a)
		}
	} else {
		err = f.pgShares(ctx, a)
	}
	if err != nil {
		return err
	}
	var lacking []int64
	for _, u := range a.names {
		if _, ok := a.name.lookup(u); !ok {
			lacking = append(lacking, u)
		}
	}
	if len(lacking) > 0 {
		got, err := f.pgNames(ctx, lacking)
		if err != nil {
			return err
		}
		for u, n := range got {
			a.name.set(u, n)
			f.names.put(u, n)
		}
	}
	return nil
}

// redisShares asks Redis a's questions in one pipeline.
func (f *Feed) redisShares(ctx context.Context, a *shareAsk) error {
	pipe := f.rdb.Pipeline()
	rels := f.follows.QueueRelations(ctx, pipe, a.viewer, a.accounts)
	var fc followCheck
	if len(a.follows) > 0 {
		fc = followCheck{cmd: f.follows.QueueFollows(ctx, pipe, a.viewer, memberArgs(a.follows)...), authors: a.follows}
	}
	// The counts and the viewer's state of posts older than the horizon
	// are PostgreSQL's (old): Redis has dropped them.
	hz, now := f.horizon(), f.now()
	recent, old := byHorizon(hz, now, a.posts)
	counts := f.engagement.QueueCounts(ctx, pipe, recent)
	var state readmodel.ViewerStateReads
	if a.viewer != 0 {
		state = f.engagement.QueueViewerState(ctx, pipe, a.viewer, recent)
	}
	names := f.userNames.QueueNames(ctx, pipe, a.names)
	// A repost entry older than the horizon may have outlived its
	// original's set of reposts (it expires with the newest repost):
	// PostgreSQL's too.
	var incOrigs, incReposts []int64
	pages := make([]readmodel.RepostsPage, len(a.reposts))
	for j, r := range a.reposts {
		if !hz.Within(r, now) {
			incOrigs, incReposts = append(incOrigs, a.origs[j]), append(incReposts, r)
			continue
		}
		pages[j] = f.engagement.QueueRepostsPage(ctx, pipe, a.origs[j], r, readmodel.Repost{}, repostsPageSize)
	}
	if len(pipe.Cmds()) == 0 {
		return f.pgOld(ctx, a, old, incOrigs, incReposts)
	}
	if err := readmodel.ExecReads(ctx, pipe); err != nil {
		return fmt.Errorf("hydrate items: %w", redisErr(err))
	}
	rs, err := rels.All()
	if err != nil {
		return fmt.Errorf("read relations of %d: %w", a.viewer, err)
	}
	for j, r := range rs {
		a.rel.set(a.accounts[j], r)
	}
	if err := fc.into(a.follow); err != nil {
		return err
	}
	for j, p := range recent {
		c, err := counts.At(j)
		if err != nil {
			return fmt.Errorf("read counts: %w", err)
		}
		a.counts.set(p, Counts{Likes: c.Likes, Reposts: c.Reposts, Replies: c.Replies})
	}
	ss, err := state.All()
	if err != nil {
		return fmt.Errorf("read the viewer state of %d: %w", a.viewer, err)
	}
	for j, s := range ss {
		a.state.set(recent[j], ViewerState{Liked: s.Liked, Reposted: s.Reposted})
	}
	if err := f.namesInto(a, names, a.names); err != nil {
		return err
	}
	// A set of reposts marked incomplete (created after its original left
	// the horizon) leaves the question to PostgreSQL.
	for j, r := range a.reposts {
		if !hz.Within(r, now) {
			continue // asked of PostgreSQL
		}
		got, more, err := pages[j].Result()
		if err != nil {
			return fmt.Errorf("read the reposts of %d: %w", a.origs[j], err)
		}
		if pages[j].Incomplete() {
			incOrigs, incReposts = append(incOrigs, a.origs[j]), append(incReposts, r)
			continue
		}
		a.earlier[r] = toRepostsOf(got)
		a.more[r] = more
	}
	return f.pgOld(ctx, a, old, incOrigs, incReposts)
}

// byHorizon splits posts into those inside the horizon hz at now
// (recent) and those older (old), whose counts and viewer state Redis
// has dropped.
func byHorizon(hz readmodel.Horizon, now time.Time, posts []int64) (recent, old []int64) {
	i := slices.IndexFunc(posts, func(p int64) bool { return !hz.Within(p, now) })
	if i < 0 {
		return posts, nil // a live feed's page: every post recent, nothing to allocate
	}
	recent = append(make([]int64, 0, len(posts)), posts[:i]...)
	for _, p := range posts[i:] {
		if hz.Within(p, now) {
			recent = append(recent, p)
		} else {
			old = append(old, p)
		}
	}
	return recent, old
}

// namesInto takes into a (and the process's name cache) the names
// reads holds of users, in order; a user without one is left to
// PostgreSQL (askShares).
func (f *Feed) namesInto(a *shareAsk, reads readmodel.NameReads, users []int64) error {
	for j, u := range users {
		n, ok, err := reads.At(j)
		if err != nil {
			return fmt.Errorf("read the name of %d: %w", u, err)
		}
		if ok {
			a.name.set(u, n)
			f.names.put(u, n)
		}
	}
	return nil
}

// pgOld answers from PostgreSQL what Redis no longer holds: the counts
// and the viewer's state of the posts old (older than the horizon), and
// the earlier reposts of the reposts incReposts of the originals
// incOrigs whose set is marked incomplete.
func (f *Feed) pgOld(ctx context.Context, a *shareAsk, old, incOrigs, incReposts []int64) error {
	if len(old) == 0 && len(incReposts) == 0 {
		return nil
	}
	f.metrics.hydPG.Add(float64(len(old)))
	if err := f.pgCountsInto(ctx, a, old); err != nil {
		return err
	}
	return f.pgEarlierInto(ctx, a, incOrigs, incReposts)
}

func toRepostsOf(rs []readmodel.Repost) []homefeed.Repost {
	out := make([]homefeed.Repost, len(rs))
	for i, r := range rs {
		out[i] = homefeed.Repost{ID: r.ID, Reposter: r.Reposter}
	}
	return out
}

// moreEarlier pages on through the reposts of original below repost
// after the first page (have), to the end: the answer is exact.
func (f *Feed) moreEarlier(ctx context.Context, original, repost int64, have []homefeed.Repost) ([]homefeed.Repost, error) {
	after := readmodel.Repost{}
	if len(have) > 0 {
		last := have[len(have)-1]
		after = readmodel.Repost{ID: last.ID, Reposter: last.Reposter}
	}
	for {
		pipe := f.rdb.Pipeline()
		page := f.engagement.QueueRepostsPage(ctx, pipe, original, repost, after, 4*repostsPageSize)
		if err := readmodel.ExecReads(ctx, pipe); err != nil {
			return nil, fmt.Errorf("read the reposts of %d: %w", original, redisErr(err))
		}
		rs, more, err := page.Result()
		if err != nil {
			return nil, fmt.Errorf("read the reposts of %d: %w", original, err)
		}
		have = append(have, toRepostsOf(rs)...)
		if !more || len(rs) == 0 {
			return have, nil
		}
		after = rs[len(rs)-1]
	}
}

// followsVia answers whether viewer follows each of accounts, from src
// (Redis through the read-cache generation g when it is live).
func (f *Feed) followsVia(ctx context.Context, src shareSource, g *cacheGen, viewer int64, accounts []int64) ([]bool, error) {
	if src == fromRedis {
		return f.followsThrough(ctx, g, viewer, accounts)
	}
	return f.pgFollows(ctx, viewer, accounts)
}

// bodiesOf adds to into (made when nil) the bodies of ids: from the
// process's post cache, else from src (Redis, then PostgreSQL for what
// Redis lacks) in one round trip. A post nobody knows maps to nil.
func (f *Feed) bodiesOf(ctx context.Context, src shareSource, fresh bool, ids []int64, into map[int64]*cachedPost) (map[int64]*cachedPost, error) {
	if into == nil {
		into = make(map[int64]*cachedPost, len(ids))
	}
	if len(ids) == 0 {
		return into, nil
	}
	found := make([]*cachedPost, len(ids))
	ask, _ := f.posts.lookup(ids, f.now(), fresh, found)
	for i, cp := range found {
		if cp != nil {
			into[ids[i]] = cp
		}
	}
	if len(ask) == 0 {
		return into, nil
	}
	get := make([]int64, len(ask))
	for j, i := range ask {
		get[j] = ids[i]
	}
	var missing []int64
	if src == fromRedis {
		// Posts older than the horizon are PostgreSQL's.
		hz, now := f.horizon(), f.now()
		recent := get[:0:0]
		for _, id := range get {
			if hz.Within(id, now) {
				recent = append(recent, id)
			} else {
				missing = append(missing, id)
			}
		}
		get = recent
	}
	if src == fromRedis && len(get) > 0 {
		pipe := f.rdb.Pipeline()
		_, single := f.rdb.(*redis.Client) // see queueBodies
		reads := f.bodies.QueueGet(ctx, pipe, get, single)
		if err := readmodel.ExecReads(ctx, pipe); err != nil {
			return nil, fmt.Errorf("hydrate originals and quotes: %w", redisErr(err))
		}
		now := f.now().UnixNano()
		for j, id := range get {
			cp, ok := cachedFromRedis(reads, j, id, 0, now)
			if !ok {
				missing = append(missing, id)
				continue
			}
			into[id] = f.posts.store(cp)
		}
	} else if src != fromRedis {
		missing = get
	}
	if len(missing) > 0 {
		rows, err := f.pgPostsByID(ctx, missing)
		if err != nil {
			return nil, err
		}
		now := f.now().UnixNano()
		for _, id := range missing {
			if r, ok := rows[id]; ok {
				into[id] = f.posts.store(&cachedPost{it: itemOf(r.facts), facts: r.facts, author: r.facts.author, version: r.version, deleted: r.deleted, checkedAt: now})
			} else {
				into[id] = nil
			}
		}
	}
	return into, nil
}
