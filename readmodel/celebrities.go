package readmodel

import (
	"cmp"
	"context"
	"fmt"
	"slices"
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
//
// A downward crossing is two steps in two groups: this projector removes
// the author from the set, the inbox projector backfills the author's
// recent posts into every active follower's inbox (those posts were
// pulled, never pushed). Between the two the posts would be in neither
// place. So the removal also records the author in the leaving hash
// (Leaving) with the removing event's Order, the inbox projector records
// the crossings it has finished backfilling (Backfilled), and the query
// side goes on pulling an author while its leaving Order is newer than
// its backfilled one (Pending). A move back in deletes the leaving entry.
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
// A move out that removes a member records the author in the leaving
// hash with the event's Order; a move in deletes it.
//
// KEYS[1] celebrities; KEYS[2] its order hash; KEYS[3] its leaving hash;
// ARGV[1] author id; ARGV[2] the event's Order; ARGV[3] '1' in, '0' out.
// Returns 1 when applied, 0 when a later decision was there.
var celebrityScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if cur and cur >= ARGV[2] then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if ARGV[3] == '1' then
  redis.call('SADD', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
elseif redis.call('SREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
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
// undo a newer one. Without an Order it is QueueSet, which records no
// leaving entry (events that did not come through CDC: the query side
// does not bridge their crossings). Run the pipeline with Exec (it loads
// the script on NOSCRIPT).
func (m Celebrities) QueueSetOrdered(ctx context.Context, pipe redis.Pipeliner, author int64, celebrity bool, order Order) {
	if order == "" {
		m.QueueSet(ctx, pipe, author, celebrity)
		return
	}
	in := "0"
	if celebrity {
		in = "1"
	}
	celebrityScript.EvalSha(ctx, pipe, []string{m.keys.Celebrities(), m.keys.CelebritiesOrder(), m.keys.CelebritiesLeaving()}, itoa(author), string(order), in)
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
	return celebrityMembers(rdb.SMembers(ctx, m.keys.Celebrities()))
}

// QueueMembers queues the read of Members and of the crossings still
// pending (Pending) against the backfills of inboxes. The set and the
// leaving hash share a slot, and the set is read first: an author the
// set no longer holds when it is read is in the leaving hash read after
// it (one script moves both). The backfilled hash may be read before or
// after them: an older reply only pulls longer.
// The returned function reads the replies once the pipeline has run.
func (m Celebrities) QueueMembers(ctx context.Context, pipe redis.Pipeliner, inboxes Backfilled) func() (members []Celebrity, built bool, pending []Celebrity, err error) {
	set := pipe.SMembers(ctx, m.keys.Celebrities())
	leaving := pipe.HGetAll(ctx, m.keys.CelebritiesLeaving())
	done := pipe.HGetAll(ctx, inboxes.keys.InboxBackfilled())
	return func() ([]Celebrity, bool, []Celebrity, error) {
		members, built, err := celebrityMembers(set)
		if err != nil {
			return nil, false, nil, err
		}
		lv, err := leaving.Result()
		if err != nil {
			return nil, false, nil, fmt.Errorf("read leaving celebrities: %w", err)
		}
		bf, err := done.Result()
		if err != nil {
			return nil, false, nil, fmt.Errorf("read backfilled crossings: %w", err)
		}
		return members, built, Pending(lv, bf), nil
	}
}

// Pending lists the authors whose downward crossing (leaving: author to
// the Order that removed it from the set) the inboxes have not finished
// backfilling (backfilled: author to the Order of the last crossing
// backfilled), by id: the query side pulls them as it pulls celebrities.
// A crossing without an Order is never pending.
func Pending(leaving, backfilled map[string]string) []Celebrity {
	var out []Celebrity
	for a, o := range leaving {
		if o == "" || backfilled[a] >= o {
			continue
		}
		if id, err := strconv.ParseInt(a, 10, 64); err == nil && id > 0 {
			out = append(out, Celebrity{ID: id, Decimal: a})
		}
	}
	slices.SortFunc(out, func(a, b Celebrity) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Leaving reads the leaving hash: author id to the Order of the event
// that removed it from the set.
func (m Celebrities) Leaving(ctx context.Context, rdb redis.Cmdable) (map[string]string, error) {
	lv, err := rdb.HGetAll(ctx, m.keys.CelebritiesLeaving()).Result()
	if err != nil {
		return nil, fmt.Errorf("read leaving celebrities: %w", err)
	}
	return lv, nil
}

func celebrityMembers(cmd *redis.StringSliceCmd) ([]Celebrity, bool, error) {
	ss, err := cmd.Result()
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

// Backfilled is the inbox projector's record of the downward celebrity
// crossings whose backfill has reached every active follower: per author,
// the Order of the last such crossing (Celebrities explains the pair). It
// belongs to the inbox version: a new version starts from what its build
// covered (the leaving entries it read before its snapshot, Record).
type Backfilled struct{ keys Keys }

// NewBackfilled returns the backfilled crossings of the inbox version in
// keys.
func NewBackfilled(keys Keys) Backfilled { return Backfilled{keys: keys} }

// backfilledScript raises an author's backfilled Order, never lowers it:
// a late backfill of an older crossing must not mark a newer, finished
// one pending again.
//
// KEYS[1] the hash; ARGV pairs of author id and Order.
var backfilledScript = redis.NewScript(`
for i = 1, #ARGV, 2 do
  local cur = redis.call('HGET', KEYS[1], ARGV[i])
  if not cur or cur < ARGV[i+1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i+1])
  end
end
return 0
`)

// Record marks crossings (author id to Order) as backfilled. Entries
// without an Order are left out.
func (b Backfilled) Record(ctx context.Context, rdb redis.Scripter, crossings map[string]string) error {
	args := make([]any, 0, 2*len(crossings))
	for a, o := range crossings {
		if o != "" {
			args = append(args, a, o)
		}
	}
	if len(args) == 0 {
		return nil
	}
	if err := backfilledScript.Run(ctx, rdb, []string{b.keys.InboxBackfilled()}, args...).Err(); err != nil {
		return fmt.Errorf("record backfilled crossings: %w", err)
	}
	return nil
}
