package cdc

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
)

// txn is one transaction in flight: its events were handed to the lanes
// and are acknowledged one by one, in any order across lanes.
type txn struct {
	commitLSN  pglogrepl.LSN
	commitTime time.Time
	// receivedAt is when its begin message arrived.
	receivedAt time.Time
	// endLSN is set when the commit message arrived; 0 before.
	endLSN pglogrepl.LSN
	// pending counts events handed to lanes and not yet acknowledged.
	pending atomic.Int64
	// submitted counts events handed to lanes (reader only).
	submitted int64
	// complete is set once the commit message arrived: no more events come.
	complete atomic.Bool

	// The visibility gate's (visibility.go): xid as decoded; visible is
	// closed (and shown set) once PostgreSQL shows the transaction to new
	// snapshots; held, heldAt and told belong to the gate's goroutine.
	xid     uint32
	visible chan struct{}
	shown   atomic.Bool
	held    bool
	heldAt  time.Time
	told    bool
}

// waitVisible returns true once t is visible in PostgreSQL, false if ctx
// ends first. A transaction never registered with the gate (tests that
// drive the checkpointer alone) counts as visible.
func (t *txn) waitVisible(ctx context.Context) bool {
	if t.visible == nil || t.shown.Load() {
		return true
	}
	select {
	case <-t.visible:
		return true
	case <-ctx.Done():
		return false
	}
}

// ack records that Kafka acknowledged one event of t.
func (t *txn) ack() { t.pending.Add(-1) }

// done reports whether every event of t was acknowledged.
func (t *txn) done() bool { return t.complete.Load() && t.pending.Load() == 0 }

// checkpointer decides which LSN may be confirmed to PostgreSQL: the end
// LSN of the newest transaction such that it and every transaction before it
// (in commit order, the order the slot sends them) were acknowledged by
// Kafka completely. The lanes acknowledge in any order across keys, so a
// transaction acknowledged early waits for the older ones.
type checkpointer struct {
	mu        sync.Mutex
	txns      []*txn // commit order; the head is the oldest unconfirmed
	confirmed pglogrepl.LSN
	// lastCommitAt is the commit time of the newest fully acknowledged
	// transaction.
	lastCommitAt time.Time
}

func newCheckpointer(start pglogrepl.LSN) *checkpointer {
	return &checkpointer{confirmed: start}
}

// begin registers a transaction the reader starts handing to the lanes.
func (c *checkpointer) begin(commitLSN pglogrepl.LSN, commitTime time.Time) *txn {
	t := &txn{commitLSN: commitLSN, commitTime: commitTime, receivedAt: time.Now()}
	c.mu.Lock()
	c.txns = append(c.txns, t)
	c.mu.Unlock()
	return t
}

// commit records that every event of t has been handed to the lanes.
func (c *checkpointer) commit(t *txn, endLSN pglogrepl.LSN) {
	c.mu.Lock()
	t.endLSN = endLSN
	c.mu.Unlock()
	t.complete.Store(true)
}

// abandon forgets an incomplete transaction whose stream broke before its
// commit message: the slot sends it again, whole, after the reconnect. Its
// events already handed to the lanes are still published (duplicates).
func (c *checkpointer) abandon(t *txn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.txns {
		if x == t {
			c.txns = append(c.txns[:i], c.txns[i+1:]...)
			return
		}
	}
}

// progress is the checkpointer's view at one moment.
type progress struct {
	// confirmed is the LSN that may be sent to PostgreSQL as flushed.
	confirmed pglogrepl.LSN
	// idle is true when no transaction is in flight.
	idle bool
	// oldestPending is the commit time of the oldest transaction not yet
	// fully acknowledged (zero when idle).
	oldestPending time.Time
	// lastCommitAt is the commit time of the newest fully acknowledged
	// transaction.
	lastCommitAt time.Time
	inFlightTxns int
}

// advance pops the acknowledged prefix of transactions and returns the new
// progress.
func (c *checkpointer) advance() progress {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for n < len(c.txns) && c.txns[n].done() {
		t := c.txns[n]
		if t.endLSN > c.confirmed {
			c.confirmed = t.endLSN
		}
		c.lastCommitAt = t.commitTime
		c.txns[n] = nil
		n++
	}
	if n > 0 {
		c.txns = c.txns[n:]
	}
	p := progress{confirmed: c.confirmed, idle: len(c.txns) == 0, lastCommitAt: c.lastCommitAt, inFlightTxns: len(c.txns)}
	if len(c.txns) > 0 {
		p.oldestPending = c.txns[0].commitTime
	}
	return p
}

// confirmIdle moves the confirmed LSN to the server's WAL position when no
// transaction is in flight, so an idle slot does not hold WAL. The slot
// sends transactions in order on one stream, so once everything received
// is acknowledged, nothing before serverLSN is still to come.
func (c *checkpointer) confirmIdle(serverLSN pglogrepl.LSN) pglogrepl.LSN {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.txns) == 0 && serverLSN > c.confirmed {
		c.confirmed = serverLSN
	}
	return c.confirmed
}
