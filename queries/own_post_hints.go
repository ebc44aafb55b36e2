package queries

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ownPostsChannel is the PostgreSQL notification channel of the
// read-your-writes hints. WARNING: every API instance of a deployment
// must use the same name; renaming it splits them during a rolling
// upgrade.
const ownPostsChannel = "feed_own_posts"

// hintWait bounds how long announce waits for its own notification to
// come back through this process's listener; hintSendTimeout bounds the
// NOTIFY itself (a connection of the pool may have to be made first).
const (
	hintWait        = 250 * time.Millisecond
	hintSendTimeout = 2 * time.Second
)

// ownPostHints carries the read-your-writes fallback across API instances.
// An instance whose write-through of a new post failed (or was skipped)
// cannot tell the others through Redis; PostgreSQL, which has just
// committed the post, is up. So it sends "author:nonce" on ownPostsChannel
// (pg_notify), and every instance, this one included, LISTENs on one
// connection and marks the author as if its own write-through had failed:
// their home reads probe PostgreSQL for the author's own posts for
// OwnPostsWindow.
//
// PostgreSQL delivers a notification to every listening session at the
// commit of the NOTIFY, at the same moment. announce waits (up to
// hintWait) until the notification came back through this process's own
// listener before the POST is answered, so the other instances' listeners
// have been sent it too by the time the client can ask one of them. What
// it cannot cover: an instance whose listener is not connected (it
// reconnects every second and logs it), or one so loaded that it serves
// the author's next read before its listener goroutine ran.
type ownPostHints struct {
	f    *Feed
	pool *pgxpool.Pool

	listening atomic.Bool
	mu        sync.Mutex
	waiters   map[string]chan struct{}

	stop  context.CancelFunc
	done  chan struct{}
	ready chan struct{} // closed once the first LISTEN is active
}

// hintStartWait bounds how long New waits for the listener's first LISTEN,
// so that an instance does not serve reads before it hears the hints.
const hintStartWait = 5 * time.Second

// startOwnPostHints starts the listener and waits (up to hintStartWait)
// until it listens; past that it logs and goes on (the listener keeps
// trying).
func startOwnPostHints(f *Feed, pool *pgxpool.Pool) *ownPostHints {
	ctx, cancel := context.WithCancel(context.Background())
	h := &ownPostHints{f: f, pool: pool, waiters: map[string]chan struct{}{}, stop: cancel,
		done: make(chan struct{}), ready: make(chan struct{})}
	go h.listen(ctx)
	select {
	case <-h.ready:
	case <-time.After(hintStartWait):
		f.log.Warn("queries: read-your-writes hints: not listening yet; going on without waiting", "waited", hintStartWait)
	}
	return h
}

// close stops the listener and waits for it.
func (h *ownPostHints) close() {
	if h == nil {
		return
	}
	h.stop()
	<-h.done
}

// announce tells every instance that author's new post may be missing from
// Redis, and waits (bounded) until its own listener has heard it.
func (h *ownPostHints) announce(ctx context.Context, author int64) {
	if h == nil {
		return
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	nonce := hex.EncodeToString(b)
	heard := make(chan struct{})
	h.mu.Lock()
	h.waiters[nonce] = heard
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.waiters, nonce)
		h.mu.Unlock()
	}()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hintSendTimeout)
	defer cancel()
	if _, err := h.f.db.Exec(sctx, `SELECT pg_notify($1, $2)`, ownPostsChannel, strconv.FormatInt(author, 10)+":"+nonce); err != nil {
		h.f.log.Warn("queries: read-your-writes hint to the other API instances failed", "author", author, "err", err)
		return
	}
	if !h.listening.Load() {
		return
	}
	select {
	case <-heard:
	case <-time.After(hintWait):
	}
}

// listen holds one connection that LISTENs on ownPostsChannel and marks
// every announced author, reconnecting every second after a failure.
func (h *ownPostHints) listen(ctx context.Context) {
	defer close(h.done)
	for ctx.Err() == nil {
		err := h.listenOnce(ctx)
		h.listening.Store(false)
		if ctx.Err() != nil {
			return
		}
		h.f.log.Warn("queries: read-your-writes hints: listener lost; reconnecting", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (h *ownPostHints) listenOnce(ctx context.Context) error {
	conn, err := h.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The session LISTENs: it goes back to no pool.
	defer func() { _ = conn.Hijack().Close(context.Background()) }()
	if _, err := conn.Exec(ctx, "LISTEN "+ownPostsChannel); err != nil {
		return err
	}
	if h.listening.CompareAndSwap(false, true) {
		select {
		case <-h.ready:
		default:
			close(h.ready)
		}
	}
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		a, nonce, _ := strings.Cut(n.Payload, ":")
		author, err := strconv.ParseInt(a, 10, 64)
		if err != nil || author <= 0 {
			continue
		}
		h.f.recent.mark(author, h.f.now())
		h.mu.Lock()
		if w := h.waiters[nonce]; w != nil {
			close(w)
			delete(h.waiters, nonce)
		}
		h.mu.Unlock()
	}
}
