package queries

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
)

// homeReply is what a home segment reads from Redis about its reader.
type homeReply struct {
	inbox, own setResult
	// newest is the reader's newest-post marker (readmodel.Timelines.MarkNewest),
	// 0 when none: their own timeline is behind it until the timelines
	// projector has written the post.
	newest      int64
	followBuilt bool   // following_v:{u} has ~built: following:{u} is complete
	member      []bool // following:{u} membership of each asked member (of members[:needed] alone when set is not nil)
	// set is following:{u} whole, sorted, when the read cache holds it (or
	// read it now): it answers any follow question of the page.
	set memberSet
	// gen is the read-cache generation the read went through (nil:
	// directly): the page's later follow questions go through it too
	// (followsThrough).
	gen *cacheGen
}

// setResult is a read sorted set (see setRead.result). Cached replies are
// shared between readers: never modified.
type setResult struct {
	src   source
	built bool
}

// readHome reads, in one round trip at most, the reader's inbox and own
// timeline from cur (n entries), their newest-post marker, whether their
// following state is built, and
// whether it holds each of members. When the read cache holds the
// following set whole (homeReply.set), only members[:needed] are answered
// in homeReply.member: the rest were asked for hydration, which the set
// answers. With the read cache on, whatever the
// cache holds costs nothing, and with Config.ReadCacheBarrier a share of
// the barrier: the read first waits for the
// pong of a ping on the node's invalidation connection (shared by the
// reads that wait at the same time, tracker.barrier), so it answers from
// the cache only what no write acknowledged before the read began has
// invalidated. A post written through by another API instance (its 201
// sent after Redis answered that write) is then in its author's next read
// through this one, as without the cache. A fully cached page costs that
// ping's round trip (a share of one PING, not the four reads); one with
// misses, the barrier and then one pipeline.
func (f *Feed) readHome(ctx context.Context, iv *inboxView, user int64, cur key, n int, members []int64, needed int) (homeReply, error) {
	var g *cacheGen
	if f.cache != nil {
		if f.cache.single != nil {
			g = f.cache.single.gen.Load()
		} else {
			g = f.cache.currentFor(f.tl.Key(user)) // the reader's keys share one hash tag: one node
		}
	}
	if g == nil || ctx.Value(directKey{}) != nil {
		if f.cache != nil {
			f.cache.stats.direct.Add(1)
		}
		r, err := f.readHomeDirect(ctx, iv, user, cur, n, members)
		r.gen = g // a live stream's: its hydration still goes through the cache (directKey)
		return r, err
	}
	if f.cfg.ReadCacheBarrier {
		if err := g.t.barrier(ctx); err != nil {
			return homeReply{}, fmt.Errorf("read inbox of %d: %w", user, err)
		}
		if !g.live() {
			// Ended while the read waited (flushed): read without the cache.
			return f.readHomeDirect(ctx, iv, user, cur, n, members)
		}
	}
	r, err := f.readHomeCached(ctx, iv, g, user, cur, n, members, needed)
	if err != nil && !g.live() {
		// The generation ended under the read (its connections may be
		// closing): read without the cache.
		return f.readHomeDirect(ctx, iv, user, cur, n, members)
	}
	r.gen = g
	return r, err
}

// followsThrough answers whether viewer follows each of authors, as
// readHomeCached answers its members: what the read-cache generation g
// holds costs nothing (all of them when it holds following:{viewer}
// whole, which the page's segment read made sure of for a compact set),
// the rest is one SMISMEMBER over g's tracked
// connections, whose answers are cached for the next reads. Hydration asks
// it about the authors a page shows that its first pipeline did not
// (posts pushed since the reader's last page), so that a busy inbox's new
// authors cost a round trip once, not on every read. g is the generation
// of the page's segment read (homeReply.gen), whose barrier, when
// Config.ReadCacheBarrier is set, the page has passed already; nil, or a
// generation that ended, asks Redis directly.
func (f *Feed) followsThrough(ctx context.Context, g *cacheGen, viewer int64, authors []int64) ([]bool, error) {
	if g == nil || !g.live() {
		return f.followsDirect(ctx, viewer, authors)
	}
	c := f.cache
	var kb [96]byte
	b, endF := f.follows.AppendFollowingKeys(kb[:0], viewer)
	kF := string(b[:endF])
	is := make([]bool, len(authors))
	var t tally
	ask, _, _ := c.lookupMembers(kF, authors, len(authors), is, time.Now().UnixNano(), &t)
	c.count(t)
	if len(ask) == 0 {
		return is, nil
	}
	tk := c.begin(g, kF)
	missed := make([]int64, len(ask))
	for j, i := range ask {
		missed[j] = authors[i]
	}
	pipe := g.client.Pipeline()
	cmd := f.follows.QueueFollows(ctx, pipe, viewer, memberArgs(missed)...)
	c.stats.trips.Add(1)
	if err := g.pick().do(pipe.Cmds()); err != nil {
		g.t.endGen(g) // as readHomeCached: the connection may be gone
		return f.followsDirect(ctx, viewer, authors)
	}
	got, err := cmd.Result()
	if err != nil || len(got) != len(ask) {
		if err != nil {
			return nil, fmt.Errorf("check follows of %d: %w", viewer, redisErr(err))
		}
		return nil, fmt.Errorf("check follows of %d: %d answers for %d", viewer, len(got), len(ask))
	}
	for j, i := range ask {
		is[i] = got[j]
	}
	c.storeMembers(tk, kF, authors, ask, got, time.Now().UnixNano())
	return is, nil
}

// followsDirect is followsThrough without the cache.
func (f *Feed) followsDirect(ctx context.Context, viewer int64, authors []int64) ([]bool, error) {
	is, err := f.follows.FollowsEach(ctx, f.rdb, viewer, memberArgs(authors)...)
	if err != nil {
		return nil, fmt.Errorf("check follows of %d: %w", viewer, redisErr(err))
	}
	if len(is) != len(authors) {
		return nil, fmt.Errorf("check follows of %d: %d answers for %d", viewer, len(is), len(authors))
	}
	return is, nil
}

// readHomeDirect is the uncached read: one pipeline (the inbox's two
// reads, the own timeline, the marker, ~built of the following state and
// the members).
func (f *Feed) readHomeDirect(ctx context.Context, iv *inboxView, user int64, cur key, n int, members []int64) (homeReply, error) {
	pipe := f.rdb.Pipeline()
	inbox := iv.inbox.QueueRead(ctx, pipe, user, cur.ms, n)
	own := f.tl.QueueRead(ctx, pipe, user, cur.ms, n)
	newest := f.tl.QueueNewest(ctx, pipe, user)
	followBuilt := f.follows.QueueFollowingBuilt(ctx, pipe, user)
	var isMember *redis.BoolSliceCmd
	if len(members) > 0 {
		args := make([]any, len(members))
		for i, m := range members {
			args[i] = strconv.FormatInt(m, 10)
		}
		isMember = f.follows.QueueFollows(ctx, pipe, user, args...)
	}
	var err error
	switch stream := ctx.Value(directKey{}) != nil; {
	case stream && f.streamReads != nil:
		// A live stream's read: alone, in a pipeline of its own (the
		// autopipeliner's hand-offs would cost a lone read more than they
		// save); while other streams' reads are under way, through the
		// autopipeliner, in pipelines shared with them.
		if f.streamReadsOut.Add(1) > 1 {
			f.metrics.streamShared.Inc()
			err = readmodel.ExecReadsVia(ctx, f.streamReads, pipe)
		} else {
			f.metrics.streamOwn.Inc()
			err = readmodel.ExecReads(ctx, pipe)
		}
		f.streamReadsOut.Add(-1)
	case stream:
		f.metrics.streamOwn.Inc()
		err = readmodel.ExecReads(ctx, pipe)
	default:
		err = readmodel.ExecReads(ctx, pipe)
	}
	if err != nil {
		return homeReply{}, fmt.Errorf("read inbox of %d: %w", user, redisErr(err))
	}
	var r homeReply
	if r.inbox, err = packedResultOf(inbox); err != nil {
		return homeReply{}, fmt.Errorf("read inbox of %d: %w", user, err)
	}
	if r.own, err = setResultOf(own); err != nil {
		return homeReply{}, fmt.Errorf("read own timeline of %d: %w", user, err)
	}
	r.newest = readmodel.NewestOf(newest)
	r.followBuilt = followBuilt.Val()
	if isMember != nil {
		if r.member, err = isMember.Result(); err != nil {
			return homeReply{}, fmt.Errorf("read follows of %d: %w", user, err)
		}
	}
	return r, nil
}

// setSig is the cache signature of a sorted set read from cur.
func setSig(cur key, n int, wantBuilt bool) string {
	if cur.ms == startKey.ms && n < len(firstPageSigs) {
		return firstPageSigs[n][b2i(wantBuilt)]
	}
	return makeSetSig(cur, n, wantBuilt)
}

// firstPageSigs are the signatures of first-page reads by n and
// wantBuilt, made once: most reads are first pages.
var firstPageSigs = func() (s [2*MaxLimit + 16][2]string) {
	for n := range s {
		s[n] = [2]string{makeSetSig(startKey, n, false), makeSetSig(startKey, n, true)}
	}
	return s
}()

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func makeSetSig(cur key, n int, wantBuilt bool) string {
	b := make([]byte, 0, 32)
	b = append(b, 'z')
	if wantBuilt {
		b = append(b, 'b')
	}
	b = strconv.AppendInt(b, cur.ms, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(n), 10)
	return string(b)
}

// builtSig is the cache signature of following_v:{u}'s ~built answer,
// newestSig of the newest-post marker's value.
const (
	builtSig  = "b"
	newestSig = "n"
)

// readHomeCached answers from the cache what it holds and reads the rest
// in one pipeline through generation g's tracking connections, caching
// each reply unless an invalidation raced it (see readCache).
func (f *Feed) readHomeCached(ctx context.Context, iv *inboxView, g *cacheGen, user int64, cur key, n int, members []int64, needed int) (homeReply, error) {
	c := f.cache
	now := time.Now().UnixNano()
	// The reader's keys, in one string: newest-post marker, own timeline,
	// following set and versions, inbox (its buffer's, whose sealed key is
	// the same but its last byte).
	var kb [224]byte
	b := f.tl.AppendNewestKey(kb[:0], user)
	endNew := len(b)
	b = f.tl.AppendKey(b, user)
	endOwn := len(b)
	b, endF := f.follows.AppendFollowingKeys(b, user)
	endFV := len(b)
	b = iv.inbox.AppendBufferKey(b, user)
	ks := string(b)
	kNew, kOwn, kF, kFV := ks[:endNew], ks[endNew:endOwn], ks[endOwn:endF], ks[endF:endFV]
	var r homeReply
	var pipe redis.Pipeliner // made for the first miss; it only queues: the commands go out in the connection's next batch
	queue := func() redis.Pipeliner {
		if pipe == nil {
			pipe = g.client.Pipeline()
		}
		return pipe
	}

	// tickets before the commands are sent, one per key read
	var inT, bufT, ownT, newT, fT, fvT ticket
	var own readmodel.SetRead
	var inbox homefeed.Read
	sigIn, sigOwn := setSig(cur, n, true), setSig(cur, n, false)
	// An inbox is two keys, its sealed string and its buffer: the reply is
	// cached under the sealed key, and a marker of it under the buffer's,
	// each stored only if no invalidation of its key raced the read. A hit
	// needs both, so a write to either key (an invalidation drops that
	// key's entry) makes the next read go to Redis.
	kBuf := ks[endFV:]
	kIn := kBuf[:len(kBuf)-1]
	inHit, ownHit := false, false
	var t tally
	if v, ok := c.lookupTally(kIn, sigIn, now, &t); ok && c.hasMarker(kBuf, sigIn, now, &t) {
		r.inbox, inHit = v.(setResult), true
	} else {
		inT = c.begin(g, kIn)
		bufT = c.begin(g, kBuf)
		inbox = iv.inbox.QueueRead(ctx, queue(), user, cur.ms, n)
	}
	if v, ok := c.lookupTally(kOwn, sigOwn, now, &t); ok {
		r.own, ownHit = v.(setResult), true
	} else {
		ownT = c.begin(g, kOwn)
		own = f.tl.QueueRead(ctx, queue(), user, cur.ms, n)
	}
	var newC *redis.StringCmd
	if v, ok := c.lookupTally(kNew, newestSig, now, &t); ok {
		r.newest = v.(int64)
	} else {
		newT = c.begin(g, kNew)
		newC = f.tl.QueueNewest(ctx, queue(), user)
	}
	var fvB *redis.BoolCmd
	if v, ok := c.lookupTally(kFV, builtSig, now, &t); ok {
		r.followBuilt = v.(bool)
	} else {
		fvT = c.begin(g, kFV)
		fvB = f.follows.QueueFollowingBuilt(ctx, queue(), user)
	}
	// following:{u}: a compact set is read whole (one SSCAN step) when
	// the cache does not hold it, so that the page's later follow
	// questions (authors new to the inbox, followsThrough) are answered
	// in process; the members not answered are asked too, for a set that
	// turns out large.
	r.member = make([]bool, len(members))
	ask, set, large := c.lookupMembers(kF, members, needed, r.member, now, &t) // ask: indexes of members not cached
	r.set = set
	c.count(t)
	var isMember *redis.BoolSliceCmd
	var scan *redis.ScanCmd
	readWhole := set == nil && !large
	if readWhole || len(ask) > 0 {
		fT = c.begin(g, kF)
	}
	if readWhole {
		scan = f.follows.QueueFollowingScan(ctx, queue(), user)
	}
	if len(ask) > 0 {
		args := make([]any, len(ask))
		for j, i := range ask {
			args[j] = strconv.FormatInt(members[i], 10)
		}
		isMember = f.follows.QueueFollows(ctx, queue(), user, args...)
	}
	if pipe == nil {
		return r, nil // all cached: no round trip
	}
	c.stats.trips.Add(1)
	if err := g.pick().do(pipe.Cmds()); err != nil {
		// The connection may be gone, and with it what Redis tracked for
		// it: the generation ends (the caller reads without the cache).
		g.t.endGen(g)
		return homeReply{}, fmt.Errorf("read inbox of %d: %w", user, redisErr(err))
	}
	now = time.Now().UnixNano()
	var err error
	if !inHit {
		if r.inbox, err = packedResultOf(inbox); err != nil {
			return homeReply{}, fmt.Errorf("read inbox of %d: %w", user, err)
		}
		c.store(inT, kIn, sigIn, r.inbox, now)
		c.store(bufT, kBuf, sigIn, packedMarker{}, now)
	}
	if !ownHit {
		if r.own, err = setResultOf(own); err != nil {
			return homeReply{}, fmt.Errorf("read own timeline of %d: %w", user, err)
		}
		c.store(ownT, kOwn, sigOwn, r.own, now)
	}
	if newC != nil {
		if err := newC.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return homeReply{}, fmt.Errorf("read own newest post of %d: %w", user, err)
		}
		r.newest = readmodel.NewestOf(newC)
		c.store(newT, kNew, newestSig, r.newest, now)
	}
	if fvB != nil {
		v, err := fvB.Result()
		if err != nil {
			return homeReply{}, fmt.Errorf("read follows of %d: %w", user, err)
		}
		r.followBuilt = v
		c.store(fvT, kFV, builtSig, v, now)
	}
	if scan != nil {
		v, err := memberSetOf(scan)
		if err != nil {
			return homeReply{}, fmt.Errorf("read follows of %d: %w", user, err)
		}
		c.store(fT, kF, wholeSig, v, now)
		r.set, _ = v.(memberSet)
	}
	if isMember != nil {
		is, err := isMember.Result()
		if err != nil || len(is) != len(ask) {
			return homeReply{}, fmt.Errorf("read follows of %d: %w (%d answers for %d)", user, err, len(is), len(ask))
		}
		for j, i := range ask {
			r.member[i] = is[j]
		}
		if r.set == nil { // a whole set answers the next reads: no answers per member beside it
			c.storeMembers(fT, kF, members, ask, is, now)
		}
	}
	return r, nil
}
