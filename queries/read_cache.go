package queries

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// readCache is the server-assisted client-side cache of the per-reader
// Redis reads of a home page (the inbox and own-timeline ranges, whether
// following:{u} and following_v:{u} exist, and following:{u} memberships):
// a repeated read of an unchanged inbox costs no Redis round trip.
//
// It is hand-written because go-redis's own client-side cache
// (Options.ClientSideCacheConfig, v9.23) cannot do this job:
//
//   - it serves single commands only: a pipeline, and the home read is
//     one, goes to Redis uncached;
//   - it serves a standalone client on database 0 only (ClusterOptions
//     has no cache);
//   - it keeps raw replies by command and arguments and parses them again
//     on every hit, where this one keeps parsed pages and a compact
//     following set whole (SSCAN is not on its list);
//   - it applies an invalidation when it next reads the connection that
//     carries it (an idle one every DrainInterval, 5 ms by default), and
//     offers neither a way to drop a key's entries at once (this
//     process's write-through, invalidate) nor a ping to wait behind
//     (sync, the barrier of cross-instance read-your-writes).
//
// And where it can serve the home read (its pipeline run as single
// commands), it costs three times as much: BenchmarkHomeClientSideCache,
// one server, medians of 3 alternated rounds of 20,000 first pages,
// process CPU a read against no cache 0.20-0.21 with this cache and
// 0.66-0.68 with go-redis's (11.4-11.5 µs against 37.2-37.6 µs),
// 0.27-0.38 against 0.88-1.17 with a write every 10 reads; 9
// allocations a read against 99.
//
// Redis CLIENT TRACKING in its default mode (the server remembers the
// keys each tracking connection read) with REDIRECT: the reads that fill
// the cache go over their own connections (a go-redis client per
// generation, below), each of which turns tracking on at connect,
// redirecting its invalidation messages to one connection subscribed to
// __redis__:invalidate. A write to a key read through those connections
// makes Redis send the key's name there; the entry is then dropped.
//
// Correctness:
//
//   - A value read before an invalidation is never cached after it. Every
//     key hashes to a shard with an epoch; a read takes a ticket (the
//     generation and its key's shard epoch) before it sends its commands,
//     and stores its reply only if, under the shard lock, neither changed.
//     Every invalidation of a key bumps its shard's epoch, so a reply that
//     raced an invalidation (the write happened after Redis executed the
//     read, and its invalidation arrived before the reply was stored) is
//     dropped, never cached.
//   - FLUSHALL and FLUSHDB (of any database of the server) empty Redis's
//     tracking table and send a null invalidation: the whole cache is
//     flushed, and stays on (what is read next is tracked anew).
//   - A generation is one life of the invalidation connection (its CLIENT
//     ID). When that connection fails, does not answer a ping, or receives
//     anything it cannot parse, the whole cache is flushed and turned
//     off, the generation's data connections (redirecting to a client id
//     that no longer exists, so no longer told of writes) are closed, and
//     a new connection subscribes; only when Redis confirms the
//     subscription does a new generation (new data connections,
//     redirecting to the new id) start filling the cache.
//   - On a Redis Cluster each master has its own tracker (invalidation
//     connection and generations, since REDIRECT reaches only a
//     connection of the same node); a reader's keys share one hash tag,
//     so its misses go to one of them. A change of the slot map (read
//     every readCachePing) flushes the whole cache: a moved slot's keys
//     live on a node that never tracked them for us.
//   - Entries also expire after maxAge (a minute), a bound on any staleness
//     a lost invalidation could cause.
//   - Writes by this process (PostCreated's newest-post marker, a cold rebuild)
//     invalidate their keys here synchronously, so read-your-writes does
//     not wait for the invalidation message; writes by other processes
//     (the projectors) become visible when their invalidation arrives,
//     normally well under a millisecond after the write, far below the
//     projectors' own lag.
//
// Bounded: at most maxKeys Redis keys, in two generations of half each per
// shard (as the post cache), and at most maxSigs cached replies per key.
type readCache struct {
	log      *slog.Logger
	maxAge   int64 // nanos
	shards   []rcShard
	seed     maphash.Seed
	stats    cacheStats
	dial     func(ctx context.Context, network, addr string) (net.Conn, error) // the invalidation connections' (tests); nil: go-redis's
	dataDial func(ctx context.Context, network, addr string) (net.Conn, error) // the data connections' (tests); nil: the client's

	// One node: its tracker. A cluster: a tracker per master (by address),
	// started for the masters of the slot map topology last read.
	single  *tracker
	cluster *redis.ClusterClient // the main client: MasterForKey routes as its reads do
	topoCl  *redis.ClusterClient // the topology watcher's own (CLUSTER SLOTS), beside the main client's hooks and pool
	mu      sync.RWMutex
	nodes   map[string]*tracker
	topo    string // the slot map (CLUSTER SLOTS) last read; "" before the first

	closing  atomic.Bool // run is ending: retire connections at once
	genMu    sync.Mutex
	genCh    chan struct{} // closed (and replaced) when a generation starts or ends: tests wait on it (genChanged)
	retMu    sync.Mutex
	retiring map[*cacheGen]*time.Timer // ended generations whose connections close after their reads in flight
}

// tracker is the invalidation connection of one Redis node (the server,
// or a master of a cluster) and the generations of data connections
// redirecting to it.
type tracker struct {
	c       *readCache
	addr    string
	base    redis.Options // the node's client options, for each generation's data client
	inval   *redis.Client // the invalidation connection's client (RESP2: pubsub messages)
	pending atomic.Int64  // CLIENT ID of the invalidation connection, set when it connects
	gen     atomic.Pointer[cacheGen]
	gens    atomic.Int64       // generations started
	cancel  context.CancelFunc // ends the tracker's run (a cluster's tracker: set by runTopology)
	done    chan struct{}      // closed when its run returned

	// Pings of the invalidation connection, in the order they were sent,
	// and the pongs received: sync() waits for its own ping's pong, a
	// barrier() for the pong of the first ping sent after it began.
	// next is the channel of the barriers waiting for a ping not sent yet
	// (it goes out with the next pong, or from the barrier leading it);
	// nil when none waits.
	pingMu     sync.Mutex
	ps         *redis.PubSub
	sent, recv uint64
	next       chan struct{}
	leading    bool // a barrier is about to send next's ping
	waiters    []waiter
}

type waiter struct {
	seq uint64
	ch  chan struct{}
}

// cacheStats are the cache's counters (also exported as metrics).
type cacheStats struct {
	hits, misses, stored, dropped, invalidated, flushes, generations atomic.Int64
	trips, direct                                                    atomic.Int64 // home reads through the cache that needed a round trip; home reads without it (no generation)
}

// cacheGen is one life of the invalidation connection and of the data
// connections redirecting to it. Redis keeps the tracked keys per data
// connection: one that closes takes its keys' future invalidations with
// it. So the data connections are readCacheConns dedicated connections,
// opened at the start, and the generation ends (the cache is flushed) on
// any error of one, or on any connect beyond the first readCacheConns (a
// connection replaced under the hood).
type cacheGen struct {
	t        *tracker
	id       int64         // the invalidation connection's CLIENT ID
	client   *redis.Client // owns the dedicated connections
	conns    []*trackConn
	next     atomic.Uint32
	connects atomic.Int64
}

// trackConn is one dedicated tracking connection, auto-pipelined: the
// commands of every read queued while a batch is in flight go out
// together as the next batch (one write, one read, on both sides).
type trackConn struct {
	mu sync.Mutex // the connection: held by the batch in flight (or watch's ping)
	cn *redis.Conn

	qmu     sync.Mutex
	queue   []*batchReq
	leading bool // a reader (or a drain) is sending batches
}

type batchReq struct {
	cmds []redis.Cmder
	err  error
	// done receives true when the request is to lead (send the queued
	// batch, its own in it), and is closed once it is answered.
	done chan bool
}

// do sends cmds in the connection's next batch and returns the first
// error of theirs (redis.Nil is an answer, not an error). The reader that
// finds no batch in flight sends the queue as one batch, its own request
// in it; once that is answered, it hands the lead to the first request
// queued meanwhile (which sends the next batch), so that no reader waits
// for more than the batch in flight and its own.
func (tc *trackConn) do(cmds []redis.Cmder) error {
	r := &batchReq{cmds: cmds, done: make(chan bool, 1)}
	tc.qmu.Lock()
	tc.queue = append(tc.queue, r)
	if tc.leading {
		tc.qmu.Unlock()
		if lead := <-r.done; !lead {
			return r.err // answered in another's batch
		}
		tc.qmu.Lock() // handed the lead: r is the first of the queue
	}
	tc.leading = true
	batch := tc.queue
	tc.queue = nil
	tc.qmu.Unlock()
	tc.send(batch) // holds r
	tc.qmu.Lock()
	if len(tc.queue) == 0 {
		tc.leading = false
	} else {
		tc.queue[0].done <- true // buffered, and nothing else sends to it
	}
	tc.qmu.Unlock()
	return r.err
}

// send runs one batch as one pipeline. Not cancelled with any request: a
// read cut halfway would leave the connection unusable (and end the
// generation); go-redis's read and write timeouts bound it.
func (tc *trackConn) send(batch []*batchReq) {
	ctx := context.Background()
	tc.mu.Lock()
	pipe := tc.cn.Pipeline()
	for _, r := range batch {
		for _, c := range r.cmds {
			_ = pipe.Process(ctx, c)
		}
	}
	_, _ = pipe.Exec(ctx) // every command carries its own error, a connection's included
	tc.mu.Unlock()
	for _, r := range batch {
		for _, c := range r.cmds {
			if e := c.Err(); e != nil && !errors.Is(e, redis.Nil) {
				r.err = e
				break
			}
		}
		close(r.done)
	}
}

// readCacheConns is the number of tracking connections of a generation:
// only cache misses use them. One: the misses of concurrent reads then
// share its batches (one write and one read on each side for all of
// them), and the busier the process, the larger the batch. Spread over
// several connections they went out in more, smaller batches, which cost
// Redis more CPU per read in the full mix (docs/benchmarks.md, "End to
// end": one connection against eight, alternated `feedbench` runs).
const readCacheConns = 1

// pick returns the connection of the next read (round robin: each
// batches what its readers queue).
func (g *cacheGen) pick() *trackConn {
	return g.conns[g.next.Add(1)%uint32(len(g.conns))]
}

type rcShard struct {
	mu       sync.RWMutex // read-locked for a hit in the new generation (most lookups)
	epoch    uint64       // bumped by every invalidation or flush touching the shard
	half     int
	cur, old map[string]*rcEntry
	// counts and countsOld hold posts' counts (counts:{p}, lookupCounts)
	// by the hash of their key, bounded as cur and old are: the commonest
	// question of a page answered by one probe of an integer map.
	counts, countsOld map[uint64]countsVal
	_                 [8]byte
}

// countsVal is a post's counts as cached: p names the post, so that
// another key of the same hash (two keys in 2^64) is a miss, not another
// post's counts.
type countsVal struct {
	c  Counts
	p  int64
	at int64 // unix nanos stored
}

// rcEntry is what is cached for one Redis key: replies by signature (the
// command and its arguments).
type rcEntry struct {
	vals    []sigVal           // by signature; a key holds a few (one for most), searched in order
	members map[int64]rcMember // set membership answers (SMISMEMBER), by member (an id)
}

type sigVal struct {
	sig string
	rcVal
}

// get returns the reply cached under sig.
func (e *rcEntry) get(sig string) (rcVal, bool) {
	for i := range e.vals {
		if e.vals[i].sig == sig {
			return e.vals[i].rcVal, true
		}
	}
	return rcVal{}, false
}

// put caches v under sig, replacing what sig held; past maxSigs the
// key's replies start over.
func (e *rcEntry) put(sig string, v rcVal) {
	for i := range e.vals {
		if e.vals[i].sig == sig {
			e.vals[i].rcVal = v
			return
		}
	}
	if len(e.vals) >= maxSigs {
		clear(e.vals)
		e.vals = e.vals[:0]
	}
	e.vals = append(e.vals, sigVal{sig, v})
}

type rcMember struct {
	is bool
	at int64
}

type rcVal struct {
	v  any
	at int64 // unix nanos stored
}

const (
	readCacheShards     = 256
	maxSigs             = 128 // cached replies per key (deeper pages)
	maxMembers          = 256 // cached membership answers per set (a page asks the celebrities and up to 80 hinted authors)
	invalidationChannel = "__redis__:invalidate"
	readCachePing       = 250 * time.Millisecond // idle pings of the invalidation connection; a generation ended by a data connection restarts within it
	readCacheMaxAge     = time.Minute
)

// readCacheKeys returns the configured bound: Config.ReadCacheKeys, else
// the default; negative means off (0).
func readCacheKeys(cfg int) (int, error) {
	if cfg != 0 {
		return max(cfg, 0), nil
	}
	return defaultReadCacheKeys, nil
}

// defaultReadCacheKeys: a reader's first page caches four keys (inbox,
// own timeline, following:{u} with its membership answers, following_v),
// about 6 KB in all with a full follow hint, so 10,000 readers and about
// 60 MB.
const defaultReadCacheKeys = 40_000

// newReadCache builds a cache of maxKeys keys over the server rdb talks
// to: the invalidation connection of a single-node client
// (*redis.Client), or one per master of a cluster client
// (*redis.ClusterClient). Other clients get no cache (nil). dial, if not
// nil, dials the invalidation connections (tests). Nothing connects
// before run: until then (and after it) the cache is off and reads go to
// Redis.
func newReadCache(rdb redis.UniversalClient, maxKeys int, log *slog.Logger, dial, dataDial func(ctx context.Context, network, addr string) (net.Conn, error)) *readCache {
	if maxKeys <= 0 {
		return nil
	}
	rc := &readCache{log: log, maxAge: int64(readCacheMaxAge), seed: maphash.MakeSeed(), dial: dial, dataDial: dataDial,
		retiring: make(map[*cacheGen]*time.Timer), genCh: make(chan struct{})}
	rc.shards = make([]rcShard, readCacheShards)
	for i := range rc.shards {
		half := max(maxKeys/2/readCacheShards, 1)
		rc.shards[i] = rcShard{half: half, cur: make(map[string]*rcEntry)}
	}
	switch c := rdb.(type) {
	case *redis.Client:
		rc.single = rc.newTracker(c.Options())
	case *redis.ClusterClient:
		rc.cluster = c
		o := *c.Options()
		o.PoolSize, o.MinIdleConns, o.MaxIdleConns = 2, 0, 2
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		rc.topoCl = redis.NewClusterClient(&o)
		rc.nodes = make(map[string]*tracker)
	default:
		return nil
	}
	return rc
}

// newTracker builds the tracker of the node whose client options are o;
// its run connects.
func (c *readCache) newTracker(o *redis.Options) *tracker {
	t := &tracker{c: c, addr: o.Addr, base: *o, done: make(chan struct{})}
	// go-redis updates a client's MaintNotificationsConfig in place as
	// it connects: this cache's clients (RESP2, which has none of those
	// notifications) get one of their own, never shared.
	t.base.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	io := t.base
	io.Protocol = 2 // invalidations as pubsub messages
	io.PoolSize, io.MinIdleConns, io.MaxIdleConns = 1, 0, 0
	io.ClientName = "feed-read-cache-invalidations"
	if c.dial != nil {
		io.Dialer = c.dial
	}
	io.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		id, err := cn.ClientID(ctx).Result()
		if err != nil {
			return err
		}
		t.pending.Store(id)
		return nil
	}
	t.inval = redis.NewClient(&io)
	return t
}

// run keeps the cache on until ctx ends: the node's tracker, or the
// cluster's topology watcher and a tracker per master. It returns once
// their goroutines have, every connection of the cache closed (the cache
// is off from then on). One run per cache.
func (c *readCache) run(ctx context.Context) {
	if c.single != nil {
		c.single.run(ctx)
	} else {
		c.runTopology(ctx)
	}
	c.close()
}

// close closes the invalidation connections and the data connections,
// once nothing runs.
func (c *readCache) close() {
	c.closing.Store(true)
	for _, t := range c.trackers() {
		t.down()
		_ = t.inval.Close()
	}
	if c.topoCl != nil {
		_ = c.topoCl.Close()
	}
	c.retMu.Lock()
	defer c.retMu.Unlock()
	for g, tm := range c.retiring {
		tm.Stop()
		_ = g.client.Close()
		delete(c.retiring, g)
	}
}

// trackers returns the node's tracker, or the cluster's.
func (c *readCache) trackers() []*tracker {
	if c.single != nil {
		return []*tracker{c.single}
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	ts := make([]*tracker, 0, len(c.nodes))
	for _, t := range c.nodes {
		ts = append(ts, t)
	}
	return ts
}

// stop ends t (a node that is no longer a master of the cluster).
func (t *tracker) stop() {
	t.cancel()
	<-t.done
	t.down()
	_ = t.inval.Close()
}

// runTopology reads the cluster's slot map every readCachePing until ctx
// ends (see topology), running a tracker for each master; it returns once
// every tracker's run has.
func (c *readCache) runTopology(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	tk := time.NewTicker(readCachePing)
	defer tk.Stop()
	for {
		for _, t := range c.topology(ctx) {
			tctx, cancel := context.WithCancel(ctx)
			t.cancel = cancel
			wg.Add(1)
			go func() {
				defer wg.Done()
				t.run(tctx)
			}()
		}
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// topology reads the cluster's slot map (CLUSTER SLOTS). When it differs
// from the one read before, the whole cache is flushed: a slot that moved
// (resharding, a failover) takes its keys to a node that never tracked
// them for us, whose writes would invalidate nothing here. It then stops
// the trackers of nodes that are no longer masters and returns a new one
// for each master without one, for runTopology to run. No tracker runs
// (so nothing is cached) before the first slot map is read.
func (c *readCache) topology(ctx context.Context) []*tracker {
	slots, err := c.topoCl.ClusterSlots(ctx).Result()
	if err != nil || len(slots) == 0 {
		if ctx.Err() == nil {
			c.log.Debug("queries: read cache: CLUSTER SLOTS", "err", err)
		}
		return nil // the nodes' own connections notice a node that is gone
	}
	slices.SortFunc(slots, func(a, b redis.ClusterSlot) int { return cmp.Compare(a.Start, b.Start) })
	masters := make(map[string]bool)
	var sig strings.Builder
	for _, sl := range slots {
		if len(sl.Nodes) == 0 {
			continue
		}
		masters[sl.Nodes[0].Addr] = true
		fmt.Fprintf(&sig, "%d-%d=%s,", sl.Start, sl.End, sl.Nodes[0].Addr)
	}
	var stop []*tracker
	c.mu.Lock()
	changed := c.topo != "" && c.topo != sig.String()
	c.topo = sig.String()
	for addr, t := range c.nodes {
		if !masters[addr] {
			delete(c.nodes, addr)
			stop = append(stop, t)
		}
	}
	missing := len(c.nodes) < len(masters)
	c.mu.Unlock()
	if changed {
		c.flush()
		c.log.Info("queries: read cache flushed: the cluster's slot map changed", "masters", len(masters))
	}
	for _, t := range stop {
		t.stop()
	}
	if !missing {
		return nil
	}
	var started []*tracker
	_ = c.topoCl.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		o := node.Options()
		if !masters[o.Addr] {
			return nil // go-redis's own view is behind: a later read
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.nodes[o.Addr] == nil && !c.closing.Load() {
			t := c.newTracker(o)
			c.nodes[o.Addr] = t
			started = append(started, t)
		}
		return nil
	})
	return started
}

// run keeps the invalidation connection subscribed and applies what it
// receives, until ctx ends; beside it, keepAlive watches the connection
// and watch the generation's data connections. It returns once they have.
func (t *tracker) run(ctx context.Context) {
	defer close(t.done)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		t.watch(ctx)
	}()
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		ps := t.inval.Subscribe(ctx, invalidationChannel)
		t.pingMu.Lock()
		t.ps, t.sent, t.recv = ps, 0, 0
		t.pingMu.Unlock()
		gens := t.gens.Load()
		var last atomic.Int64 // unix nanos of the last message received; busy while a generation starts
		last.Store(time.Now().UnixNano())
		kctx, stopKeepAlive := context.WithCancel(ctx)
		silent := make(chan error, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.keepAlive(kctx, ps, &last, silent)
		}()
		err := t.receive(ctx, ps, &last, silent)
		stopKeepAlive()
		if t.gens.Load() != gens {
			backoff = 50 * time.Millisecond // it worked for a while
		}
		t.pingMu.Lock()
		t.ps = nil
		t.pingMu.Unlock()
		_ = ps.Close()
		t.down()
		if ctx.Err() != nil {
			return
		}
		t.c.log.Warn("queries: read cache off until the invalidation connection is back", "node", t.addr, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// receive applies messages until something is wrong: a connection error,
// an unanswered ping, or a message it cannot read: every one of them ends
// the generation. The null invalidation of FLUSHALL / FLUSHDB is not one
// of them: it flushes the cache, which stays on.
//
// Its reads have no deadline. One that expired in the middle of a message
// would leave go-redis's reader mid-message on a connection it keeps (a
// timeout is not a broken connection to it): the rest of the message
// would then be read as the next one, and a key's name read as a pong is
// an invalidation lost without a trace. keepAlive, beside it, notices a
// silent connection instead, and closes it (saying why on silent); last
// is the time of the last message received, which receive keeps.
func (t *tracker) receive(ctx context.Context, ps *redis.PubSub, last *atomic.Int64, silent <-chan error) error {
	// up connects the data connections (a round trip each, longer on a
	// loaded machine) while nothing reads this connection: keepAlive
	// must not take that time for silence, or it would close the
	// connection the data connections are redirecting to.
	up := func() error {
		last.Store(busy)
		err := t.up(ctx, t.pending.Load())
		last.Store(time.Now().UnixNano())
		return err
	}
	subscribed := false
	for {
		if subscribed && t.gen.Load() == nil {
			// A data connection ended the generation: start the next one.
			if err := up(); err != nil {
				return err
			}
		}
		msg, err := ps.Receive(ctx)
		if err != nil && isFlushInvalidation(err) {
			// FLUSHALL or FLUSHDB (of any database of the server): Redis
			// has emptied its tracking table, so no key read before it
			// will be invalidated again. Drop everything; the data
			// connections keep tracking what they read from now on.
			t.c.flush()
			last.Store(time.Now().UnixNano())
			continue
		}
		if err != nil {
			select {
			case why := <-silent:
				return why // keepAlive closed the connection
			default:
				return err
			}
		}
		last.Store(time.Now().UnixNano())
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && m.Channel == invalidationChannel {
				subscribed = true
				if err := up(); err != nil {
					return err
				}
			}
		case *redis.Message:
			if m.Channel != invalidationChannel {
				continue
			}
			if m.PayloadSlice == nil {
				t.c.invalidate(m.Payload)
				continue
			}
			for _, k := range m.PayloadSlice {
				t.c.invalidate(k)
			}
		case *redis.Pong:
			t.pong()
		}
	}
}

// isFlushInvalidation reports whether err is go-redis's refusal of the
// invalidation Redis sends for FLUSHALL and FLUSHDB: a message whose
// payload is a null array (RESP2 "*-1"), which go-redis reports as an
// error of its own after reading the whole message, so the connection is
// still in step (TestReadCacheSurvivesFlush keeps this true across
// go-redis versions).
func isFlushInvalidation(err error) bool {
	return strings.HasSuffix(err.Error(), "unsupported pubsub message payload: <nil>")
}

// busy is receive's last-message time while it starts a generation:
// later than any time, so keepAlive neither pings nor gives up meanwhile.
const busy = math.MaxInt64

// keepAlive pings the invalidation connection once it has been quiet for
// readCachePing, and closes it (after saying why on silent) when nothing
// arrives within readCachePing of a ping, or when ctx ends: the receive
// loop's read then fails.
func (t *tracker) keepAlive(ctx context.Context, ps *redis.PubSub, last *atomic.Int64, silent chan<- error) {
	tk := time.NewTicker(readCachePing / 5)
	defer tk.Stop()
	var pingedAt int64 // unix nanos of the ping not answered yet; 0: none
	fail := func(err error) {
		silent <- err
		_ = ps.Close()
	}
	for {
		select {
		case <-ctx.Done():
			_ = ps.Close()
			return
		case <-tk.C:
		}
		now := time.Now().UnixNano()
		l := last.Load()
		if pingedAt != 0 && l >= pingedAt {
			pingedAt = 0 // anything received since shows the connection alive
		}
		switch {
		case pingedAt != 0 && now-pingedAt >= int64(readCachePing):
			fail(errors.New("invalidation connection: no pong"))
			return
		case pingedAt == 0 && now-l >= int64(readCachePing):
			if _, err := t.ping(ctx); err != nil {
				fail(err)
				return
			}
			pingedAt = now
		}
	}
}

// up starts a generation redirecting to the invalidation connection id,
// unless one runs.
func (t *tracker) up(ctx context.Context, id int64) error {
	if id == 0 {
		return errors.New("invalidation connection without a client id")
	}
	if g := t.gen.Load(); g != nil && g.id == id {
		return nil
	}
	o := t.base
	o.Protocol = 2 // no RESP3 push handling on every read
	o.ClientName = "feed-read-cache"
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns = readCacheConns, 0, readCacheConns
	o.MaxRetries = -1      // an error ends the generation: never hidden by a retry on another connection
	o.ConnMaxIdleTime = -1 // (dedicated connections are never idle in the pool anyway)
	o.ConnMaxLifetime = 0
	g := &cacheGen{t: t, id: id}
	if t.c.dataDial != nil {
		o.Dialer = t.c.dataDial
	}
	next := t.base.OnConnect
	o.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		if g.connects.Add(1) > readCacheConns {
			t.endGen(g) // a replaced connection: its tracked keys are forgotten by Redis
		}
		if next != nil {
			if err := next(ctx, cn); err != nil {
				return err
			}
		}
		return cn.Do(ctx, "CLIENT", "TRACKING", "ON", "REDIRECT", id).Err()
	}
	g.client = redis.NewClient(&o)
	for range readCacheConns {
		cn := g.client.Conn()
		// Connect now: a server refusing tracking turns the cache off here
		// rather than on every read.
		if err := cn.Ping(ctx).Err(); err != nil {
			_ = g.client.Close()
			return err
		}
		g.conns = append(g.conns, &trackConn{cn: cn})
	}
	t.c.flush()
	t.gen.Store(g)
	t.gens.Add(1)
	t.c.stats.generations.Add(1)
	t.c.genChange()
	return nil
}

// genChanged returns a channel closed when a generation of any node next
// starts or ends.
func (c *readCache) genChanged() <-chan struct{} {
	c.genMu.Lock()
	defer c.genMu.Unlock()
	return c.genCh
}

// genChange closes the channel genChanged returned.
func (c *readCache) genChange() {
	c.genMu.Lock()
	defer c.genMu.Unlock()
	close(c.genCh)
	c.genCh = make(chan struct{})
}

// watch pings the idle data connections of the running generation every
// readCachePing until ctx ends: a connection the server closed while idle
// (its tracked keys forgotten) ends the generation within that time, not
// at its next use.
func (t *tracker) watch(ctx context.Context) {
	tk := time.NewTicker(readCachePing)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		g := t.gen.Load()
		if g == nil {
			continue
		}
		for _, tc := range g.conns {
			if !tc.mu.TryLock() {
				continue // in use: its own errors end the generation
			}
			err := tc.cn.Ping(ctx).Err()
			tc.mu.Unlock()
			if err != nil {
				t.endGen(g)
				break
			}
		}
	}
}

// endGen ends generation g if it still runs (a data connection failed):
// the cache is flushed and off until the receive loop starts the next.
func (t *tracker) endGen(g *cacheGen) {
	if !t.gen.CompareAndSwap(g, nil) {
		return
	}
	t.c.flush()
	t.retire(g)
	t.c.genChange()
}

// retire closes g's connections once the reads in flight on it are done
// (they will not store: their tickets hold g): 10 s later, or when the
// cache's run ends, whichever comes first.
func (t *tracker) retire(g *cacheGen) {
	c := t.c
	c.retMu.Lock()
	defer c.retMu.Unlock()
	if c.closing.Load() {
		_ = g.client.Close()
		return
	}
	c.retiring[g] = time.AfterFunc(10*time.Second, func() {
		c.retMu.Lock()
		defer c.retMu.Unlock()
		if _, ok := c.retiring[g]; ok {
			delete(c.retiring, g)
			_ = g.client.Close()
		}
	})
}

// down ends the generation: the cache is flushed and off until the next.
func (t *tracker) down() {
	g := t.gen.Swap(nil)
	t.c.flush()
	t.wakeAll() // sync() callers: nothing cached is left to be stale
	if g != nil {
		t.retire(g)
		t.c.genChange()
	}
}

// current returns the generation reads may use on a single node, nil when
// the cache is off (or on a cluster: see currentFor).
func (c *readCache) current() *cacheGen {
	if c == nil || c.single == nil {
		return nil
	}
	return c.single.gen.Load()
}

// currentFor returns the generation reads of key k may use: the one of
// the node that holds k (as the cluster client routes it), nil when the
// cache is off there. A read through a node that no longer holds k gets
// MOVED, an error, which ends that node's generation; its caller reads
// without the cache (and the cluster client learns the new slot map).
func (c *readCache) currentFor(k string) *cacheGen {
	if c == nil {
		return nil
	}
	if c.single != nil {
		return c.single.gen.Load()
	}
	node, err := c.cluster.MasterForKey(context.Background(), k)
	if err != nil {
		return nil
	}
	c.mu.RLock()
	t := c.nodes[node.Options().Addr]
	c.mu.RUnlock()
	if t == nil {
		return nil
	}
	return t.gen.Load()
}

// live reports whether g is still its node's generation.
func (g *cacheGen) live() bool { return g.t.gen.Load() == g }

func (c *readCache) shard(k string) *rcShard {
	return &c.shards[maphash.String(c.seed, k)%readCacheShards]
}

// tally counts one read's hits and misses, added to the shared stats once
// (count) rather than by each lookup.
type tally struct{ hits, misses int64 }

// count adds t to the stats.
func (c *readCache) count(t tally) {
	if t.hits > 0 {
		c.stats.hits.Add(t.hits)
	}
	if t.misses > 0 {
		c.stats.misses.Add(t.misses)
	}
}

// lookupTally returns the cached reply of sig on k, counting the hit or
// miss in t (added to the stats by count, once per read).
func (c *readCache) lookupTally(k, sig string, now int64, t *tally) (any, bool) {
	sh := c.shard(k)
	var v rcVal
	ok := false
	sh.mu.RLock()
	e := sh.cur[k]
	if e != nil {
		v, ok = e.get(sig)
	}
	sh.mu.RUnlock()
	if e == nil {
		sh.mu.Lock()
		if e = sh.promoteLocked(k); e != nil {
			v, ok = e.get(sig)
		}
		sh.mu.Unlock()
	}
	ok = ok && now-v.at <= c.maxAge // an expired reply is replaced by the next store
	if ok {
		t.hits++
		return v.v, true
	}
	t.misses++
	return nil, false
}

// lookupCounts returns post p's counts cached under the key kb
// (counts:{p}, readmodel.Engagement.AppendCountsKey), counting the hit or
// miss in t. The key's hash picks the shard, as shard(k) does, and names
// the entry: a key of another version of the posts projection misses.
func (c *readCache) lookupCounts(kb []byte, p, now int64, t *tally) (Counts, bool) {
	kh := maphash.Bytes(c.seed, kb)
	sh := &c.shards[kh%readCacheShards]
	sh.mu.RLock()
	v, ok := sh.counts[kh]
	if !ok {
		v, ok = sh.countsOld[kh]
	}
	sh.mu.RUnlock()
	if ok && v.p == p && now-v.at <= c.maxAge {
		t.hits++
		return v.c, true
	}
	t.misses++
	return Counts{}, false
}

// storeCounts caches p's counts read under k, unless the generation
// ended or an invalidation reached k's shard since t was taken (store).
func (c *readCache) storeCounts(t ticket, k string, p int64, cnt Counts, now int64) {
	kh := maphash.String(c.seed, k)
	sh := &c.shards[kh%readCacheShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !t.holds(sh) {
		c.stats.dropped.Add(1)
		return
	}
	if _, ok := sh.counts[kh]; !ok && len(sh.counts) >= sh.half {
		sh.countsOld, sh.counts = sh.counts, nil
	}
	if sh.counts == nil {
		sh.counts = make(map[uint64]countsVal, sh.half)
	}
	sh.counts[kh] = countsVal{c: cnt, p: p, at: now}
	delete(sh.countsOld, kh)
	c.stats.stored.Add(1)
}

// ticket is what a read must still match when it stores its reply.
type ticket struct {
	gen   *cacheGen
	epoch uint64
}

// holds reports whether a reply read under t may still be stored in sh
// (locked): its generation is live and no invalidation or flush reached
// the shard since t was taken.
func (t ticket) holds(sh *rcShard) bool { return sh.epoch == t.epoch && t.gen.live() }

// begin takes the ticket of a read of k through g: before its commands
// are sent.
func (c *readCache) begin(g *cacheGen, k string) ticket {
	sh := c.shard(k)
	sh.mu.Lock()
	e := sh.epoch
	sh.mu.Unlock()
	return ticket{gen: g, epoch: e}
}

// packedMarker is what the cache holds under a packed inbox's buffer key
// for a reply cached under its sealed key (readHomeCached).
type packedMarker struct{}

// hasMarker reports whether k holds a packedMarker for sig (counted in t).
func (c *readCache) hasMarker(k, sig string, now int64, t *tally) bool {
	v, ok := c.lookupTally(k, sig, now, t)
	if !ok {
		return false
	}
	_, ok = v.(packedMarker)
	return ok
}

// store caches v as the reply of sig on k, unless the generation ended or
// an invalidation reached k's shard since t was taken.
func (c *readCache) store(t ticket, k, sig string, v any, now int64) {
	sh := c.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !t.holds(sh) {
		c.stats.dropped.Add(1)
		return
	}
	e := sh.cur[k]
	if e == nil {
		e = c.entryLocked(sh, k)
	}
	e.put(sig, rcVal{v: v, at: now})
	c.stats.stored.Add(1)
}

// entryLocked returns k's entry, made (and promoted) if need be.
func (c *readCache) entryLocked(sh *rcShard, k string) *rcEntry {
	e := sh.cur[k]
	if e == nil {
		if e = sh.old[k]; e == nil {
			e = &rcEntry{}
		}
		sh.putLocked(k, e)
	}
	return e
}

// wholeSig is the signature under which a set's whole membership is
// cached (a memberSet), or that it is too large to be read whole (a
// largeSet).
const wholeSig = "s"

// memberSet is a set's whole membership, sorted: every membership
// question about it is answered in process, whoever the member. Read by
// one SSCAN step when the set is compact (readHomeCached).
type memberSet []int64

func (s memberSet) has(m int64) bool {
	_, ok := slices.BinarySearch(s, m)
	return ok
}

// largeSet marks a set whose first SSCAN step did not return it whole:
// its membership is asked and cached per member.
type largeSet struct{}

// memberSetOf is the cache value of an SSCAN step from cursor 0 over a
// set of ids (readmodel.Follows.QueueFollowingScan): a memberSet when the
// step returned the whole set, else largeSet{}.
func memberSetOf(cmd *redis.ScanCmd) (any, error) {
	ms, cursor, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	if cursor != 0 {
		return largeSet{}, nil
	}
	s := make(memberSet, len(ms))
	for i, m := range ms {
		id, err := strconv.ParseInt(m, 10, 64)
		if err != nil {
			return largeSet{}, nil // not ids: answered per member
		}
		s[i] = id
	}
	slices.Sort(s) // an intset comes sorted already
	return s, nil
}

// lookupMembers answers, in one lock, what the cache holds of the
// membership of members in set k (counted in t). When it holds the set
// whole, it returns it (set) with members[:needed] answered in is and
// nothing to ask (the set counts as one answer). Else it fills is with
// the answers it holds one by one and returns the indexes of the members
// not cached (ask), and large when the set is known to be too large to
// be held whole (its first SSCAN step was not all of it).
func (c *readCache) lookupMembers(k string, members []int64, needed int, is []bool, now int64, t *tally) (ask []int, set memberSet, large bool) {
	sh := c.shard(k)
	sh.mu.RLock()
	e := sh.cur[k]
	if e == nil {
		sh.mu.RUnlock()
		sh.mu.Lock()
		e = sh.promoteLocked(k)
		sh.mu.Unlock()
		sh.mu.RLock()
		if e != nil && sh.cur[k] != e {
			e = nil // invalidated in between
		}
	}
	if e != nil {
		if v, ok := e.get(wholeSig); ok && now-v.at <= c.maxAge {
			switch w := v.v.(type) {
			case memberSet:
				sh.mu.RUnlock()
				for i, m := range members[:needed] {
					is[i] = w.has(m)
				}
				t.hits++
				return nil, w, false
			case largeSet:
				large = true
			}
		}
	}
	for i, m := range members {
		var v rcMember
		ok := false
		if e != nil {
			v, ok = e.members[m]
			ok = ok && now-v.at <= c.maxAge
		}
		if !ok {
			ask = append(ask, i)
			continue
		}
		is[i] = v.is
	}
	sh.mu.RUnlock()
	t.hits += int64(len(members) - len(ask))
	t.misses += int64(len(ask))
	return ask, nil, large
}

// storeMembers caches the answers is[j] of members[ask[j]] in set k (as
// store: unless raced).
func (c *readCache) storeMembers(t ticket, k string, members []int64, ask []int, is []bool, now int64) {
	sh := c.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !t.holds(sh) {
		c.stats.dropped.Add(int64(len(ask)))
		return
	}
	e := c.entryLocked(sh, k)
	if e.members == nil || len(e.members)+len(ask) > maxMembers {
		e.members = make(map[int64]rcMember, len(ask))
	}
	for j, i := range ask {
		e.members[members[i]] = rcMember{is: is[j], at: now}
	}
	c.stats.stored.Add(int64(len(ask)))
}

// promoteLocked moves k's entry from the old generation to the new one
// and returns it (nil if absent).
func (sh *rcShard) promoteLocked(k string) *rcEntry {
	e := sh.cur[k]
	if e == nil {
		if e = sh.old[k]; e != nil {
			sh.putLocked(k, e)
		}
	}
	return e
}

func (sh *rcShard) putLocked(k string, e *rcEntry) {
	if _, ok := sh.cur[k]; !ok && len(sh.cur) >= sh.half {
		sh.old, sh.cur = sh.cur, make(map[string]*rcEntry, sh.half)
	}
	sh.cur[strings.Clone(k)] = e // k may be part of a larger string (readHomeCached's keys)
	delete(sh.old, k)
}

// invalidate drops k and fails every read of its shard in flight.
func (c *readCache) invalidate(k string) {
	if c == nil {
		return
	}
	kh := maphash.String(c.seed, k)
	sh := &c.shards[kh%readCacheShards] // shard(k)
	sh.mu.Lock()
	sh.epoch++
	delete(sh.cur, k)
	delete(sh.old, k)
	delete(sh.counts, kh) // when k is a counts:{p}
	delete(sh.countsOld, kh)
	sh.mu.Unlock()
	c.stats.invalidated.Add(1)
}

// flush drops everything and fails every read in flight.
func (c *readCache) flush() {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		sh.epoch++
		clear(sh.cur)
		sh.old = nil
		sh.counts, sh.countsOld = nil, nil
		sh.mu.Unlock()
	}
	c.stats.flushes.Add(1)
}

// sync returns once every invalidation Redis sent before the call has been
// applied, or the cache is off or flushed: it pings the invalidation
// connection, whose pong Redis queues after them; when that connection is
// going, it waits for the flush that ends the generation. For tests, and
// for a caller that wants a write by another client visible at once.
func (c *readCache) sync(ctx context.Context) error {
	if c == nil {
		return nil
	}
	for _, t := range c.trackers() {
		if err := t.sync(ctx); err != nil {
			return err
		}
	}
	return nil
}

// sync is readCache.sync for t's node.
func (t *tracker) sync(ctx context.Context) error {
	if t.gen.Load() == nil {
		return nil
	}
	ch := make(chan struct{})
	t.pingMu.Lock()
	if t.ps == nil {
		t.pingMu.Unlock()
		return nil
	}
	t.sent++
	t.waiters = append(t.waiters, waiter{seq: t.sent, ch: ch})
	err := t.ps.Ping(ctx)
	t.pingMu.Unlock()
	if err != nil {
		// The connection is closing or gone (keepAlive closes a silent
		// one): the receive loop fails too, ends the generation, flushes,
		// and then wakes this waiter (down). Returning the error at once
		// would tell the caller a write might still be hidden, when it is
		// about to be visible; wait for the flush instead.
		t.c.log.Debug("queries: read cache sync: ping failed; waiting for the flush", "err", err)
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// barrier returns once every invalidation Redis had sent to t's
// invalidation connection when barrier was called has been applied (or
// the generation ended: nothing cached is left to be stale), like sync,
// but concurrent barriers share their pings. Every barrier joins the
// group of the next ping; a barrier that finds no ping in flight leads
// it (yields once, so that the reads ready to run join, then sends it),
// otherwise the next pong sends it. So a node's invalidation connection
// carries about one barrier ping per round trip at most, however many
// reads wait.
//
// Why it is enough for a read that must see every write Redis
// acknowledged before the read began (read-your-writes through another
// API instance): Redis queues a key's invalidation on this connection
// while it executes the write, before it answers the writer; the ping
// is sent after the read began, so after that answer, and Redis queues
// its pong behind the invalidation on the same connection; the receive
// loop applies messages in order.
func (t *tracker) barrier(ctx context.Context) error {
	t.pingMu.Lock()
	if t.ps == nil {
		t.pingMu.Unlock()
		return nil // no connection: no generation either
	}
	if t.next == nil {
		t.next = make(chan struct{})
	}
	ch := t.next
	lead := t.sent == t.recv && !t.leading
	if lead {
		t.leading = true
	}
	t.pingMu.Unlock()
	if lead {
		// Let the reads that are ready to run reach their barrier first:
		// they share this ping.
		runtime.Gosched()
		t.pingMu.Lock()
		t.leading = false
		t.sendNextLocked()
		t.pingMu.Unlock()
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendNextLocked sends the ping of the barriers waiting for one, if any.
// Not cancelled with a read: go-redis's write timeout bounds it. On an
// error the connection is going: the receive loop fails, ends the
// generation and wakes every waiter (down).
func (t *tracker) sendNextLocked() {
	if t.next == nil || t.ps == nil {
		return
	}
	t.sent++
	t.waiters = append(t.waiters, waiter{seq: t.sent, ch: t.next})
	t.next = nil
	_ = t.ps.Ping(context.Background())
}

// ping sends a keep-alive ping on the invalidation connection.
func (t *tracker) ping(ctx context.Context) (uint64, error) {
	t.pingMu.Lock()
	defer t.pingMu.Unlock()
	if t.ps == nil {
		return 0, nil
	}
	t.sent++
	return t.sent, t.ps.Ping(ctx)
}

// pong counts a pong (they come in the order of the pings) and releases
// the sync() callers whose ping it answers.
func (t *tracker) pong() {
	t.pingMu.Lock()
	defer t.pingMu.Unlock()
	t.recv++
	kept := t.waiters[:0]
	for _, w := range t.waiters {
		if w.seq <= t.recv {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	t.waiters = kept
	if !t.leading {
		t.sendNextLocked()
	}
}

func (t *tracker) wakeAll() {
	t.pingMu.Lock()
	defer t.pingMu.Unlock()
	for _, w := range t.waiters {
		close(w.ch)
	}
	t.waiters = nil
	if t.next != nil {
		close(t.next)
		t.next = nil
	}
}
