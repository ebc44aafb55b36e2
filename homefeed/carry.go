package homefeed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// FollowUps carries the follow-ups of packed pushes (FollowUp: a new
// buffer's fallback TTL, the GET of a buffer due for a merge, then its
// merge) over to the pipeline of the next push, so that a push is one
// round trip to Redis instead of PushAll's three (the APPENDs, the
// follow-ups, the merges): where a round trip costs more than the
// commands in it (every service on loopback in a virtual machine), that
// shows in the read and write calls a post of Redis and of `feed dev`
// (`feedbench` writes only, docs/benchmarks.md "I/O calls per unit of
// work"), and a push holds its in-flight slot (FanoutInflight) for one
// round trip instead of three. PushAll, the plain version, stays beside
// it.
//
// Nothing a carried follow-up does is needed for a correct feed: readers
// merge the buffer with the sealed string whatever its length, and every
// follow-up is idempotent. A merge runs at most two pushes (or
// flushAfter) after the push whose reply asked for it, on the bytes
// its GET read; the merge script takes them out of the buffer only if it
// still starts with them, and merges the buffer as it is otherwise.
// Follow-ups lost with the process (it died between two pushes) are
// redone by later pushes as PushAll's are: a buffer past MergeAt
// asks for its merge again on its next APPEND; the fallback TTL of a
// buffer the push created is asked for on the buffer's second APPEND too
// (settle), so that one lost with the process is set by the next push. A
// pipeline that fails puts back what it took.
//
// When pushes stop, what is left runs flushAfter after the last one
// (a timer; FlushFollowUps). Safe for concurrent use by the pushes of
// every partition.
type FollowUps struct {
	mu      sync.Mutex
	expire  []int64        // users whose buffer a push created: its fallback TTL
	read    []int64        // users whose buffer is due for a merge: its GET
	merge   []pendingMerge // buffers read, to merge
	pending map[int64]bool // users with a read or a merge carried
	timer   *time.Timer    // the flush armed after a push that left work
	flush   func()         // what the timer runs (set by the first push)
	after   time.Duration  // the timer's delay: flushAfter
	merges  int64          // merges run (Merges)
}

type pendingMerge struct {
	user int64
	seen []byte
}

// flushAfter is how long after the last push carried follow-ups wait
// for the next push's pipeline before they run on their own.
const flushAfter = 20 * time.Millisecond

// NewFollowUps returns an empty carrier.
func NewFollowUps() *FollowUps {
	return &FollowUps{pending: map[int64]bool{}, after: flushAfter}
}

// Pending reports how many follow-ups c carries (TTLs, reads, merges).
func (c *FollowUps) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pendingLocked()
}

// pendingLocked is Pending with c.mu held.
func (c *FollowUps) pendingLocked() int { return len(c.expire) + len(c.read) + len(c.merge) }

// Merges reports how many merges c has run.
func (c *FollowUps) Merges() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.merges
}

// putBack returns what a failed pipeline took.
func (c *FollowUps) putBack(k carried) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire = append(c.expire, k.expire...)
	c.read = append(c.read, k.read...)
	c.merge = append(c.merge, k.merge...)
}

// carried is what one pipeline runs of c's follow-ups (takeCarried).
type carried struct {
	expire, read []int64
	merge        []pendingMerge
	gets         []*redis.StringCmd
}

// takeCarried empties c into what one pipeline runs.
func takeCarried(c *FollowUps) carried {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := carried{expire: c.expire, read: c.read, merge: c.merge, gets: make([]*redis.StringCmd, len(c.read))}
	c.expire, c.read, c.merge = nil, nil, nil
	return k
}

// queueCarried queues k on pipe (again on Exec's retry): the merges first
// (their buffers were read by an earlier pipeline), then the TTLs and the
// reads.
func (m Inboxes) queueCarried(ctx context.Context, pipe redis.Pipeliner, k *carried) {
	for _, x := range k.merge {
		args := m.mergeArgs(sortedIDs(x.seen), "", false, "nx")
		m.queueMergeScript(ctx, pipe, x.user, append(args, x.seen))
	}
	for _, u := range k.expire {
		_, buf := m.Keys(u)
		pipe.ExpireNX(ctx, buf, m.pol.InboxTTL())
	}
	for i, u := range k.read {
		_, buf := m.Keys(u)
		k.gets[i] = pipe.Get(ctx, buf)
	}
}

// settle records in c what k's pipeline did: the merges are done, each
// buffer read becomes a merge (none when it was gone: an earlier merge
// took it), and the APPENDs' replies (users[i], replies[i]) ask for more.
func (c *FollowUps) settle(k carried, users []int64, replies []*redis.IntCmd) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range k.merge {
		delete(c.pending, x.user)
	}
	c.merges += int64(len(k.merge))
	for i, u := range k.read {
		seen, err := k.gets[i].Bytes()
		if err != nil || len(seen) == 0 {
			delete(c.pending, u)
			continue
		}
		c.merge = append(c.merge, pendingMerge{user: u, seen: seen})
	}
	for i, u := range users {
		switch n := replies[i].Val(); {
		case n >= 8*MergeAt:
			if !c.pending[u] {
				c.pending[u] = true
				c.read = append(c.read, u)
			}
		case n == 8 || n == 16:
			c.expire = append(c.expire, u)
		}
	}
}

// PushCarried pushes p into the inboxes of users in one pipeline that
// also runs the follow-ups c carries from earlier pushes, and leaves in c
// the follow-ups this push's replies ask for (FollowUps). The buffer
// of a user whose expiring[i] is set (the inbox is past its TTL, so the
// buffer may be all of it; expiring may be nil) gets its TTL in the same
// pipeline, not a push later. A failed call can be retried whole, as
// PushAll.
func (m Inboxes) PushCarried(ctx context.Context, rdb redis.UniversalClient, users []int64, expiring []bool, p Push, c *FollowUps) error {
	k := takeCarried(c)
	replies := make([]*redis.IntCmd, len(users))
	err := exec(ctx, rdb, func(pipe redis.Pipeliner) {
		m.queueCarried(ctx, pipe, &k)
		for i, u := range users {
			replies[i] = m.QueuePush(ctx, pipe, u, p)
			if expiring != nil && expiring[i] {
				_, buf := m.Keys(u)
				pipe.ExpireNX(ctx, buf, m.pol.InboxTTL())
			}
		}
	})
	if err == nil || errors.Is(err, redis.Nil) { // a buffer merged meanwhile reads as redis.Nil
		// Exec reports the first failed command: a GET's redis.Nil may
		// come before an APPEND that failed (OOM), so each APPEND is
		// checked.
		err = nil
		for _, r := range replies {
			if err = r.Err(); err != nil {
				break
			}
		}
	}
	if err != nil {
		c.putBack(k)
		return fmt.Errorf("push: %w", err)
	}
	c.settle(k, users, replies)
	m.armFlush(rdb, c)
	return nil
}

// FlushFollowUps runs what c carries, without a push: the TTLs and reads,
// then the merges of the buffers read (at most two pipelines).
func (m Inboxes) FlushFollowUps(ctx context.Context, rdb redis.UniversalClient, c *FollowUps) error {
	for range 2 {
		if c.Pending() == 0 {
			return nil
		}
		k := takeCarried(c)
		err := exec(ctx, rdb, func(pipe redis.Pipeliner) { m.queueCarried(ctx, pipe, &k) })
		if err != nil && !errors.Is(err, redis.Nil) {
			c.putBack(k)
			return fmt.Errorf("push follow-ups: %w", err)
		}
		c.settle(k, nil, nil)
	}
	return nil
}

// armFlush starts c's timer when c carries anything and none is armed:
// what the next push would have run runs flushAfter later on its
// own (a push before then takes it, and the timer finds nothing).
func (m Inboxes) armFlush(rdb redis.UniversalClient, c *FollowUps) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pendingLocked() == 0 {
		return
	}
	if c.flush == nil {
		c.flush = func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// An error leaves the follow-ups in c for the next push.
			_ = m.FlushFollowUps(ctx, rdb, c)
		}
	}
	if c.timer == nil {
		c.timer = time.AfterFunc(c.after, c.flush)
		return
	}
	c.timer.Reset(c.after)
}
