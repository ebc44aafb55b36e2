// Package snowflake generates 64-bit, time-ordered ids: 41 bits of
// milliseconds since Epoch, 10 bits of node id, 12 bits of sequence.
package snowflake

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Epoch is the id's time origin (2020-01-01T00:00:00Z).
// WARNING: changing it reorders every id ever issued.
var Epoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	nodeBits = 10
	seqBits  = 12
	maxNode  = 1<<nodeBits - 1
	maxSeq   = 1<<seqBits - 1
)

// Generator issues unique ids for one node. Safe for concurrent use.
type Generator struct {
	mu     sync.Mutex
	node   int64
	lastMs int64
	seq    int64
	now    func() time.Time
}

// New returns a generator for node (0..1023). Two processes must never share
// a node id.
func New(node int64) (*Generator, error) {
	if node < 0 || node > maxNode {
		return nil, fmt.Errorf("snowflake node %d out of range 0..%d", node, maxNode)
	}
	return &Generator{node: node, now: time.Now}, nil
}

// NewWithClock is New with the clock now instead of time.Now: for tests
// and simulations of clocks that stop or step back.
func NewWithClock(node int64, now func() time.Time) (*Generator, error) {
	g, err := New(node)
	if err != nil {
		return nil, err
	}
	g.now = now
	return g, nil
}

// Next returns a new id and the millisecond it encodes. If the clock goes
// backwards, it keeps using the last millisecond until the clock catches up,
// so ids never decrease.
func (g *Generator) Next() (id int64, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ms := g.now().Sub(Epoch).Milliseconds()
	if ms < g.lastMs {
		ms = g.lastMs
	}
	if ms == g.lastMs {
		g.seq++
		if g.seq > maxSeq {
			// Sequence exhausted in this millisecond: borrow the next one.
			ms++
			g.seq = 0
		}
	} else {
		g.seq = 0
	}
	g.lastMs = ms
	id = ms<<(nodeBits+seqBits) | g.node<<seqBits | g.seq
	return id, Time(id)
}

// Resume makes g issue only ids past the millisecond ms (since Epoch),
// whatever the clock says: the high-water mark of its node's lease.
func (g *Generator) Resume(ms int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ms > g.lastMs {
		g.lastMs, g.seq = ms, maxSeq // the next id is in the millisecond after ms
	}
}

// Skip moves g past a random number (1 to 256) of the ids it would issue
// next: after one of its ids was found taken (issued by another process
// on the same node id), its next ones are unlikely to be the other's too.
func (g *Generator) Skip() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seq += 1 + rand.Int64N(256)
	if g.seq > maxSeq {
		g.lastMs++
		g.seq = 0
	}
}

// last is the last millisecond g issued an id in (or resumed past).
func (g *Generator) last() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lastMs
}

// msSince is t in milliseconds since Epoch.
func msSince(t time.Time) int64 { return t.Sub(Epoch).Milliseconds() }

// Time returns the millisecond an id encodes, in UTC.
func Time(id int64) time.Time {
	return Epoch.Add(time.Duration(id>>(nodeBits+seqBits)) * time.Millisecond).UTC()
}
