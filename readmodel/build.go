package readmodel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The bulk builds of `feed rebuild` (docs/rebuild.md) write whole read
// models into fresh, versioned keys; this file holds how a finished inbox
// or timeline is written. What is written is what the projectors' scripts
// could have produced: the newest posts kept, ~floor at the score of the
// first one cut (nothing at or below it kept), then ~built.

// BuiltInbox is one user's inbox as a bulk build computed it: the posts
// kept, newest first, all scoring above Floor when HasFloor.
type BuiltInbox struct {
	Kept     []Entry
	Floor    int64
	HasFloor bool
}

// InboxChunk is a run of built inboxes for an InboxBuildWriter: Len of
// them, the i-th computed on demand (a writer may ask for one again). In
// fills b (reusing its slices) and returns the owner and when the inbox
// expires (epoch ms); ok is false when there is nothing to write.
type InboxChunk interface {
	Len() int
	Inbox(i int, b *BuiltInbox) (user, expireMs int64, ok bool)
}

// InboxBuildWriter writes the inboxes of a bulk build, a chunk in one
// pipeline, each with its TTL (expireMs minus nowMs; an inbox that would
// expire before it is written is not written). Safe for concurrent use by
// the build's workers, each with its own BuildBuffers.
type InboxBuildWriter interface {
	WriteChunk(ctx context.Context, rdb redis.UniversalClient, c InboxChunk, nowMs func() int64, b *BuildBuffers) error
}

// BuildBuffers are one build worker's reusable buffers.
type BuildBuffers struct {
	in      BuiltInbox
	entries []lpEntry
	scratch []byte
	arena   []byte
}

// ZaddBuildWriter is the plain InboxBuildWriter: per inbox one ZADD of the
// members, the floor and ~built, then PEXPIRE. Its cost in Redis grows with
// the square of an inbox's size while the set is a listpack (each ZADD of
// a member scans it): RestoreBuildWriter exists for that.
func (m Inboxes) ZaddBuildWriter() InboxBuildWriter { return zaddWriter{m} }

type zaddWriter struct{ m Inboxes }

// WriteChunk implements InboxBuildWriter.
func (w zaddWriter) WriteChunk(ctx context.Context, rdb redis.UniversalClient, c InboxChunk, nowMs func() int64, b *BuildBuffers) error {
	pipe := rdb.Pipeline()
	for i := range c.Len() {
		user, exp, ok := c.Inbox(i, &b.in)
		if !ok {
			continue
		}
		if ttl := exp - nowMs(); ttl > 0 {
			w.m.queueZadd(ctx, pipe, user, &b.in, ttl)
		}
	}
	if pipe.Len() == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("write inboxes: %w", err)
	}
	return nil
}

// queueZadd queues in as the plain writer writes it: one ZADD of the
// members (newest first), the floor and ~built, then the TTL.
func (m Inboxes) queueZadd(ctx context.Context, pipe redis.Pipeliner, user int64, in *BuiltInbox, ttlMs int64) {
	key := m.keys.Inbox(user)
	zs := make([]redis.Z, 0, len(in.Kept)+2)
	for _, e := range in.Kept {
		zs = append(zs, redis.Z{Score: float64(e.Ms), Member: itoa(e.ID)})
	}
	if in.HasFloor {
		zs = append(zs, redis.Z{Score: float64(in.Floor), Member: SentinelFloor})
	}
	zs = append(zs, redis.Z{Score: math.Inf(1), Member: SentinelBuilt})
	pipe.ZAdd(ctx, key, zs...)
	pipe.PExpire(ctx, key, time.Duration(ttlMs)*time.Millisecond)
}

// RestoreBuildWriter returns a writer that writes each inbox as one RESTORE
// of the finished sorted set in Redis's listpack encoding (listpack.go),
// with its TTL: a ZADD of n members into a listpack costs Redis O(n²), a
// RESTORE one copy. BenchmarkBuildInboxRestoreVsZadd measures the two on
// full inboxes; TestBuildWritersAgree checks that both write the same
// inboxes. When the server refuses the payload (a server older than Redis
// 7.0, RESTORE disabled) the writer falls back to ZADD for the rest of the
// build; when the key exists already (BUSYKEY: nothing should have written
// it), ZADD adds to it. One writer per build: the fallback is shared by its
// workers.
func (m Inboxes) RestoreBuildWriter() InboxBuildWriter {
	w := &restoreWriter{m: m}
	w.restore.Store(true)
	return w
}

type restoreWriter struct {
	m       Inboxes
	restore atomic.Bool // false once the server refused a payload
}

// WriteChunk implements InboxBuildWriter.
func (w *restoreWriter) WriteChunk(ctx context.Context, rdb redis.UniversalClient, c InboxChunk, nowMs func() int64, b *BuildBuffers) error {
	pipe := rdb.Pipeline()
	type restored struct {
		i   int
		cmd *redis.Cmd
	}
	var sent []restored
	useRestore := w.restore.Load()
	b.arena = b.arena[:0]
	for i := range c.Len() {
		user, exp, ok := c.Inbox(i, &b.in)
		if !ok {
			continue
		}
		ttl := exp - nowMs()
		if ttl <= 0 {
			continue // expired during the build, as the live inbox has
		}
		if useRestore {
			start := len(b.arena)
			var err error
			b.entries = b.in.listpack(b.entries[:0])
			if b.arena, b.scratch, err = appendListpackPayload(b.arena, b.scratch, b.entries); err == nil {
				sent = append(sent, restored{i, pipe.Do(ctx, "restore", w.m.keys.Inbox(user), ttl, b.arena[start:len(b.arena):len(b.arena)])})
				continue
			}
			b.arena = b.arena[:start]
		}
		w.m.queueZadd(ctx, pipe, user, &b.in, ttl)
	}
	if pipe.Len() == 0 {
		return nil
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil && !errors.As(err, new(redis.Error)) {
		return fmt.Errorf("write inboxes: %w", err)
	}
	// A refused RESTORE is written again with ZADD; any other error fails
	// the build.
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil && cmd.Name() != "restore" {
			return fmt.Errorf("write inboxes: %w", err)
		}
	}
	var again []int
	for _, r := range sent {
		err := r.cmd.Err()
		if err == nil {
			continue
		}
		var rerr redis.Error
		if !errors.As(err, &rerr) {
			return fmt.Errorf("write inboxes: %w", err)
		}
		if !strings.HasPrefix(err.Error(), "BUSYKEY") && w.restore.Swap(false) {
			slog.Default().Warn("readmodel: Redis refused a RESTORE of an inbox; the build writes inboxes with ZADD instead (slower)", "err", err)
		}
		again = append(again, r.i)
	}
	if len(again) == 0 {
		return nil
	}
	pipe = rdb.Pipeline()
	for _, i := range again {
		user, exp, _ := c.Inbox(i, &b.in)
		if ttl := exp - nowMs(); ttl > 0 {
			w.m.queueZadd(ctx, pipe, user, &b.in, ttl)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("write inboxes: %w", err)
	}
	return nil
}

// listpack appends the inbox's entries in listpack order: the floor (below
// every member), the members by score and, within one millisecond, by their
// decimal's bytes, then ~built.
func (in *BuiltInbox) listpack(es []lpEntry) []lpEntry {
	if in.HasFloor {
		es = append(es, lpEntry{score: float64(in.Floor), str: SentinelFloor})
	}
	first := len(es)
	for i := len(in.Kept) - 1; i >= 0; i-- {
		e := in.Kept[i]
		es = append(es, lpEntry{score: float64(e.Ms), id: e.ID})
	}
	// Kept may be ordered more finely than by millisecond (the build orders
	// by microsecond): only runs of one millisecond may be out of the
	// listpack's order.
	for i := first; i < len(es); {
		j := i + 1
		for j < len(es) && es[j].score == es[i].score {
			j++
		}
		if j-i > 1 {
			sortListpack(es[i:j])
		}
		i = j
	}
	return append(es, lpEntry{score: math.Inf(1), str: SentinelBuilt})
}

// QueueBuilt queues the bulk build of author's timeline from newest, the
// author's newest posts (newest first, at most the bound + 1 read): the
// first max kept, the floor at the next one's score when there is one
// (entries at or below it left out, the bounded-add rule), and ~built, in
// one ZADD. It returns the members queued (0: nothing, no posts).
func (m Timelines) QueueBuilt(ctx context.Context, pipe redis.Pipeliner, author int64, newest []Entry) int {
	if len(newest) == 0 {
		return 0
	}
	floor := math.Inf(-1)
	if len(newest) > m.max {
		floor = float64(newest[m.max].Ms)
		newest = newest[:m.max]
	}
	zs := make([]redis.Z, 0, len(newest)+2)
	for _, e := range newest {
		if s := float64(e.Ms); s > floor {
			zs = append(zs, redis.Z{Score: s, Member: itoa(e.ID)})
		}
	}
	if !math.IsInf(floor, -1) {
		zs = append(zs, redis.Z{Score: floor, Member: SentinelFloor})
	}
	zs = append(zs, redis.Z{Score: math.Inf(1), Member: SentinelBuilt})
	pipe.ZAdd(ctx, m.keys.Timeline(author), zs...)
	return len(zs)
}

// ListpackEntries is the zset-max-listpack-entries a Redis server needs so
// full inboxes stay in the compact listpack encoding: InboxMax real
// entries (trims start at or below it: InboxTrimBand), the overshoot
// between two sampled trims (a gap longer than 20 × InboxTrimEvery pushes
// has odds of about e^-20; it would only turn that inbox into a skiplist)
// and the two sentinels: 822 with the defaults. docs/projections.md
// explains the memory and speed trade-off; production uses 1024.
func (p Policy) ListpackEntries() int {
	p = p.WithDefaults()
	return p.InboxMax + 20*p.InboxTrimEvery + 2
}

// WarnListpack logs once at start when pol's inboxes are sorted sets and
// the server keeps full ones in the larger skiplist encoding (packed
// inboxes are strings: nothing to say). The projector never changes
// server settings.
func WarnListpack(ctx context.Context, rdb redis.UniversalClient, pol Policy, log *slog.Logger) {
	if pol.WithDefaults().InboxLayout != InboxLayoutZset {
		return
	}
	want := pol.ListpackEntries()
	v, err := rdb.ConfigGet(ctx, "zset-max-listpack-entries").Result()
	if err != nil {
		return // CONFIG may be disabled on managed servers
	}
	got, err := strconv.Atoi(v["zset-max-listpack-entries"])
	if err == nil && got < want {
		log.Warn("projections: Redis keeps full inboxes as skiplists (about 110 bytes an entry); "+
			"set zset-max-listpack-entries to at least "+strconv.Itoa(want)+" for about 21 bytes an entry "+
			"(see docs/projections.md)", "zset-max-listpack-entries", got)
	}
}
