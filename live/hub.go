// Package live delivers the home feed to open streams as it is projected
// (docs/streams.md): the Hub wakes a process's streams up through Redis
// sharded Pub/Sub when a projector wrote something they show, and a
// Stream, woken up, reads the entries above its position through the
// query side and says what to send, each event with a resume id (Resume)
// that makes a reconnection exact. The HTTP side (api) writes the events.
package live

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/internal/service"
	"github.com/feedco/feed/readmodel"
)

// HubConfig tunes a Hub. Zero values take the defaults.
type HubConfig struct {
	// Keys names the channels (its Prefix only).
	Keys readmodel.Keys
	// OnlineTTL is how long a user's registration as online lasts (default
	// 30 s); the hub renews its users' every OnlineTTL/3.
	OnlineTTL time.Duration
	// OnAuthorWake, when set, is called with the author of every
	// WakeAuthor message, before the listeners wake up (the query side's
	// ForgetTimelineHead: their read then sees the post).
	OnAuthorWake func(author int64)
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Hub is a process's one Pub/Sub subscription (one connection per Redis
// node on a cluster: a sharded channel is served by the node of its
// slot) carrying the union of its streams' channels, and the registry of
// its users with an open stream (readmodel.Live.MarkOnline), which the
// inbox projector reads to publish only for them. Safe for concurrent
// use; its background work runs in Run.
type Hub struct {
	cfg  HubConfig
	rdb  redis.UniversalClient
	live readmodel.Live
	log  *slog.Logger

	mu      sync.Mutex
	chans   map[string]map[*Listener]struct{}
	users   map[int64]int
	shards  map[string]*redis.PubSub // by node address ("" on a single server)
	pending []*redis.PubSub          // shards Run has not started a receiver for
	added   chan struct{}            // a shard was added to pending

	// changesSeen counts the changes channel's messages and subscription
	// replies: a stream whose last read of the changes stream began at
	// the same count has nothing new to read there (ChangesSeen), while
	// changesUp says the channel is subscribed (its reply received since
	// the hub last subscribed or unsubscribed it).
	changesSeen atomic.Uint64
	changesUp   atomic.Bool

	ran   atomic.Bool
	ready chan struct{}
}

// NewHub returns a hub over rdb; nothing runs before Run.
func NewHub(cfg HubConfig, rdb redis.UniversalClient) (*Hub, error) {
	if rdb == nil {
		return nil, errors.New("live: nil Redis client")
	}
	cfg.OnlineTTL = cmp.Or(cfg.OnlineTTL, 30*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Hub{cfg: cfg, rdb: rdb, live: readmodel.NewLive(cfg.Keys), log: cfg.Logger,
		chans: map[string]map[*Listener]struct{}{}, users: map[int64]int{}, shards: map[string]*redis.PubSub{},
		added: make(chan struct{}, 1), ready: make(chan struct{})}, nil
}

// Live is the hub's channel names.
func (h *Hub) Live() readmodel.Live { return h.live }

// Redis is the hub's client (the changes stream is read through it).
func (h *Hub) Redis() redis.UniversalClient { return h.rdb }

// ChangesSeen counts the wake-ups of the changes channel this hub has
// received (its messages, and its subscription replies, after which a
// message may have been lost), and reports whether the channel is
// subscribed now (up). The posts projector publishes on the channel after
// every append to the changes stream, so while the channel is up, a read
// of the stream that began at count n holds every change appended before
// the n-th wake-up: while the count is still n, another read finds
// nothing new (Stream.Step skips it). A change whose publish failed waits
// for the next change's wake-up, as an entry waits for the next wake-up.
func (h *Hub) ChangesSeen() (n uint64, up bool) {
	up = h.changesUp.Load()
	return h.changesSeen.Load(), up
}

// Listener is one stream's registration: C receives a value (coalesced)
// whenever one of its channels is published, or resubscribed after a
// reconnection (a wake-up may have been missed).
type Listener struct {
	C     chan struct{}
	fn    func() // when set, called instead of a send on C (ListenFunc)
	h     *Hub
	user  int64
	chans []string
}

// Listen registers a stream of user listening to channels, and marks the
// user online.
func (h *Hub) Listen(ctx context.Context, user int64, channels []string) (*Listener, error) {
	return h.listen(ctx, &Listener{C: make(chan struct{}, 1), h: h, user: user}, channels)
}

// ListenFunc is Listen with fn called on each wake-up instead of a send
// on C: fn runs on the hub's receiving goroutine and must not block.
func (h *Hub) ListenFunc(ctx context.Context, user int64, channels []string, fn func()) (*Listener, error) {
	return h.listen(ctx, &Listener{fn: fn, h: h, user: user}, channels)
}

// listen counts l's user among the streams (marking them online at their
// first) and subscribes l to channels.
func (h *Hub) listen(ctx context.Context, l *Listener, channels []string) (*Listener, error) {
	h.mu.Lock()
	h.users[l.user]++
	first := h.users[l.user] == 1
	h.mu.Unlock()
	if first {
		if err := h.live.MarkOnline(ctx, h.rdb, []int64{l.user}, time.Now().Add(h.cfg.OnlineTTL)); err != nil {
			h.log.Warn("live: mark a user online", "user", l.user, "err", err)
		}
	}
	if err := l.SetChannels(ctx, channels); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// SetChannels makes l listen to channels (instead of its former ones).
func (l *Listener) SetChannels(ctx context.Context, channels []string) error {
	h := l.h
	want := map[string]bool{}
	for _, c := range channels {
		want[c] = true
	}
	var subscribe, unsubscribe []string
	h.mu.Lock()
	for _, c := range l.chans {
		if !want[c] {
			ls := h.chans[c]
			delete(ls, l)
			if len(ls) == 0 {
				delete(h.chans, c)
				unsubscribe = append(unsubscribe, c)
			}
		}
	}
	had := map[string]bool{}
	for _, c := range l.chans {
		had[c] = true
	}
	for c := range want {
		if had[c] {
			continue
		}
		ls := h.chans[c]
		if ls == nil {
			ls = map[*Listener]struct{}{}
			h.chans[c] = ls
			subscribe = append(subscribe, c)
		}
		ls[l] = struct{}{}
	}
	l.chans = l.chans[:0]
	for c := range want {
		l.chans = append(l.chans, c)
	}
	h.mu.Unlock()
	if ch := h.live.ChangesChannel(); slices.Contains(subscribe, ch) || slices.Contains(unsubscribe, ch) {
		h.changesUp.Store(false) // until its subscription reply (ChangesSeen)
	}
	var errs []error
	for _, c := range unsubscribe {
		if ps, err := h.shard(ctx, c, false); err == nil && ps != nil {
			errs = append(errs, ps.SUnsubscribe(ctx, c))
		}
	}
	for _, c := range subscribe {
		ps, err := h.shard(ctx, c, true)
		if err == nil {
			err = ps.SSubscribe(ctx, c)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("subscribe %s: %w", c, err))
		}
	}
	return errors.Join(errs...)
}

// Close ends l's registration.
func (l *Listener) Close() {
	h := l.h
	_ = l.SetChannels(context.Background(), nil)
	h.mu.Lock()
	if h.users[l.user]--; h.users[l.user] <= 0 {
		delete(h.users, l.user)
	}
	h.mu.Unlock()
}

// shard returns the subscription of channel's node, made when create is
// set.
func (h *Hub) shard(ctx context.Context, channel string, create bool) (*redis.PubSub, error) {
	addr := ""
	if cc, ok := h.rdb.(*redis.ClusterClient); ok {
		n, err := cc.MasterForKey(ctx, channel)
		if err != nil {
			return nil, fmt.Errorf("find the node of %s: %w", channel, err)
		}
		addr = n.Options().Addr
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if ps := h.shards[addr]; ps != nil || !create {
		return ps, nil
	}
	// On a cluster the subscription connects to the node of the first
	// channel it is given: this one.
	ps := h.rdb.SSubscribe(ctx)
	h.shards[addr] = ps
	h.pending = append(h.pending, ps)
	select {
	case h.added <- struct{}{}:
	default:
	}
	return ps, nil
}

// Streams returns the number of listeners (open streams) of the process.
func (h *Hub) Streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.users {
		n += c
	}
	return n
}

// Run receives the subscriptions' messages and wakes the listeners up,
// and renews the registrations of the process's users, until ctx ends;
// it returns once every goroutine it started has.
func (h *Hub) Run(ctx context.Context) error {
	if !h.ran.CompareAndSwap(false, true) {
		return errors.New("live: hub Run called twice")
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	close(h.ready)
	renew := time.NewTicker(h.cfg.OnlineTTL / 3)
	defer renew.Stop()
	select { // shards made before Run
	case h.added <- struct{}{}:
	default:
	}
	for {
		select {
		case <-ctx.Done():
			h.mu.Lock()
			for _, ps := range h.shards {
				_ = ps.Close()
			}
			h.mu.Unlock()
			return nil
		case <-h.added:
			h.mu.Lock()
			started := h.pending
			h.pending = nil
			h.mu.Unlock()
			for _, ps := range started {
				wg.Add(1)
				go func() {
					defer wg.Done()
					h.receive(ctx, ps)
				}()
			}
		case <-renew.C:
			h.mu.Lock()
			users := make([]int64, 0, len(h.users))
			for u := range h.users {
				users = append(users, u)
			}
			h.mu.Unlock()
			if err := h.live.MarkOnline(ctx, h.rdb, users, time.Now().Add(h.cfg.OnlineTTL)); err != nil && ctx.Err() == nil {
				h.log.Warn("live: renew online users", "err", err)
			}
		}
	}
}

// receive dispatches one subscription's messages until ctx ends. A
// subscription reply (the first one, or a resubscription after go-redis
// reconnected) wakes the channel's listeners too: a wake-up published
// while the connection was down is lost, so they read.
func (h *Hub) receive(ctx context.Context, ps *redis.PubSub) {
	backoff := 50 * time.Millisecond
	for {
		msg, err := ps.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, redis.ErrClosed) {
				return
			}
			h.log.Warn("live: pub/sub receive", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Message:
			if m.Channel == h.live.ChangesChannel() {
				h.changesSeen.Add(1) // before the wake-up (ChangesSeen)
			}
			if h.cfg.OnAuthorWake != nil {
				if a, ok := h.live.WokenAuthor(m.Channel); ok {
					h.cfg.OnAuthorWake(a)
				}
			}
			h.wake(m.Channel)
		case *redis.Subscription:
			switch {
			case m.Kind == "ssubscribe":
				if m.Channel == h.live.ChangesChannel() {
					h.changesSeen.Add(1)
					h.changesUp.Store(true)
				}
				h.wake(m.Channel)
			case m.Kind == "sunsubscribe" && m.Channel == h.live.ChangesChannel():
				h.changesUp.Store(false) // the server's order of the two replies is the truth
			}
		}
	}
}

// wake signals every listener of channel.
func (h *Hub) wake(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for l := range h.chans[channel] {
		if l.fn != nil {
			l.fn()
			continue
		}
		select {
		case l.C <- struct{}{}:
		default:
		}
	}
}

// Ready is closed once Run runs.
func (h *Hub) Ready() <-chan struct{} { return h.ready }

// Service returns a service that runs the hub.
func (h *Hub) Service() *service.Service {
	return service.New("live", h.Run, service.ReadyWhen(h.ready), service.StopTimeout(10*time.Second))
}
