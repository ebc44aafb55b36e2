package readmodel

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Celebrities is the `celebrities` set: the authors whose follower count
// is at or over Policy.CelebrityThreshold, or inside the celebrity band
// after it was (Policy.Decided, CelebrityBefore), kept by the followers
// projector from the counts the follow events carry. The query side pulls the
// timelines of the celebrities a reader follows.
//
// The set is complete only with its ~built member, which only a build
// writes (the bulk build of `feed rebuild followers`, or WriteRebuilt from
// PostgreSQL (LoadCelebrities) when a reader found it missing). The
// projector's moves never create it: a set lost with Redis and recreated
// by the next follow names one author, and must not read as "no other
// celebrity". A rebuild only adds: an author it adds from a snapshot
// older than the projector's last removal stays a member until that
// author's next follow event, which costs a pulled timeline the inbox
// also holds (the merge drops the duplicates), never a missing post.
type Celebrities struct{ keys Keys }

// NewCelebrities returns the celebrity set operations under keys.
func NewCelebrities(keys Keys) Celebrities { return Celebrities{keys: keys} }

// QueueSet queues author's membership: in when celebrity, else out.
func (m Celebrities) QueueSet(ctx context.Context, pipe redis.Pipeliner, author int64, celebrity bool) {
	if celebrity {
		pipe.SAdd(ctx, m.keys.Celebrities(), itoa(author))
	} else {
		pipe.SRem(ctx, m.keys.Celebrities(), itoa(author))
	}
}

// celebrityScript moves one author in or out of the celebrity set unless
// an event at or after this one in the log already decided it: the order
// hash keeps, per author, the Order of the last applied decision (a
// fixed-width string, so comparing strings compares places).
//
// KEYS[1] celebrities; KEYS[2] its order hash; ARGV[1] author id; ARGV[2]
// the event's Order; ARGV[3] '1' in, '0' out. Returns 1 when applied, 0
// when a later decision was there.
var celebrityScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if cur and cur >= ARGV[2] then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if ARGV[3] == '1' then
  redis.call('SADD', KEYS[1], ARGV[1])
else
  redis.call('SREM', KEYS[1], ARGV[1])
end
return 1
`)

// Order is an event's place in the log, comparable across partitions,
// consumers and processes: its transaction's commit LSN, then its
// position within the transaction (positions grow in insertion order
// inside one transaction, although not across transactions). Two follow
// events of one followee are in different transactions or in one, in
// order, so their Orders are in commit order. The zero Order is unknown
// (an event that did not come through CDC).
type Order string

// OrderOf builds the Order of an event from its commit LSN as PostgreSQL
// prints it ("16/B374D848") and its position; "" when the LSN is empty or
// malformed.
func OrderOf(commitLSN string, position int64) Order {
	hi, lo, ok := strings.Cut(commitLSN, "/")
	if !ok {
		return ""
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil || position < 0 {
		return ""
	}
	return Order(fmt.Sprintf("%016x%016x", h<<32|l, uint64(position)))
}

// QueueSetOrdered queues author's membership as the event at order
// decided it (in when celebrity), unless a later event's decision was
// applied already: so a projector instance that applies an old event late
// (a partition moved away from it while the event was in flight) cannot
// undo a newer one. Without an Order it is QueueSet. Run the pipeline
// with Exec (it loads the script on NOSCRIPT).
func (m Celebrities) QueueSetOrdered(ctx context.Context, pipe redis.Pipeliner, author int64, celebrity bool, order Order) {
	if order == "" {
		m.QueueSet(ctx, pipe, author, celebrity)
		return
	}
	in := "0"
	if celebrity {
		in = "1"
	}
	celebrityScript.EvalSha(ctx, pipe, []string{m.keys.Celebrities(), m.keys.CelebritiesOrder()}, itoa(author), string(order), in)
}

// QueueAdd queues the bulk build's addition of authors (ids).
func (m Celebrities) QueueAdd(ctx context.Context, pipe redis.Pipeliner, authors []any) {
	pipe.SAdd(ctx, m.keys.Celebrities(), authors...)
}

// QueueBuilt queues the bulk build's last step: the set is complete.
func (m Celebrities) QueueBuilt(ctx context.Context, pipe redis.Pipeliner) {
	pipe.SAdd(ctx, m.keys.Celebrities(), SentinelBuilt)
}

// WriteRebuilt adds authors, the celebrities of a PostgreSQL snapshot,
// and then ~built.
func (m Celebrities) WriteRebuilt(ctx context.Context, rdb redis.Cmdable, authors []int64) error {
	for len(authors) > 0 {
		chunk := authors[:min(len(authors), rebuildChunk)]
		authors = authors[len(chunk):]
		ids := make([]any, len(chunk))
		for i, a := range chunk {
			ids[i] = itoa(a)
		}
		if err := rdb.SAdd(ctx, m.keys.Celebrities(), ids...).Err(); err != nil {
			return fmt.Errorf("write rebuilt celebrities: %w", err)
		}
	}
	if err := rdb.SAdd(ctx, m.keys.Celebrities(), SentinelBuilt).Err(); err != nil {
		return fmt.Errorf("write rebuilt celebrities: %w", err)
	}
	return nil
}

// Celebrity is a member of the set: its id and its decimal.
type Celebrity struct {
	ID      int64
	Decimal string
}

// Members reads the set (members that are not positive ids left out), and
// whether it is complete (~built).
func (m Celebrities) Members(ctx context.Context, rdb redis.Cmdable) ([]Celebrity, bool, error) {
	ss, err := rdb.SMembers(ctx, m.keys.Celebrities()).Result()
	if err != nil {
		return nil, false, fmt.Errorf("read celebrities: %w", err)
	}
	out := make([]Celebrity, 0, len(ss))
	built := false
	for _, s := range ss {
		if s == SentinelBuilt {
			built = true
			continue
		}
		if id, err := strconv.ParseInt(s, 10, 64); err == nil && id > 0 {
			out = append(out, Celebrity{ID: id, Decimal: s})
		}
	}
	return out, built, nil
}
