package homefeed

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/readmodel"
)

// The inbox's Redis layout (Inboxes), measured beside a sorted set per
// inbox by BenchmarkInboxLayouts.
//
// A post id is a Snowflake whose high bits are its created_at millisecond
// (snowflake.Time), so the order of ids is the feed order, and an inbox
// can hold 8 bytes per entry in two strings of one hash-tag slot:
//
//	pfeed:{u}   sealed: id* header(8)   ids big-endian, oldest first,
//	            distinct, every one above the floor
//	pfeed:{u}+  buffer: id*             APPENDed by pushes, any order,
//	            duplicates allowed
//
// header (at the end, so the newest ids and it are one GETRANGE) =
// built(1 byte: 1 or 0) hasFloor(1 byte) floor(6 bytes, epoch ms,
// big-endian): ~built and ~floor (readmodel's sentinels). A push is one APPEND
// to the buffer; when its reply says the buffer holds MergeAt ids
// or more, mergeScript folds it into the sealed string (sorted,
// deduplicated, entries at or below the floor dropped, trimmed by the
// Policy's bound rule) and deletes it. Readers take the sealed page and
// the whole buffer and merge them (Read).

// MergeAt is the buffer length, in ids, from which a push's reply
// asks for a merge.
const MergeAt = 64

const header = 8

// keyName is the family of the inbox keys (Keys): `pfeed:{u}` and its
// buffer `pfeed:{u}+`. legacyKeyName is the sorted-set inbox of earlier
// releases, `feed:{u}`: registered with readmodel so that the cleanup
// after `feed rebuild inbox` deletes such keys with their version.
const (
	keyName       = "pfeed:"
	legacyKeyName = "feed:"
)

func init() {
	readmodel.RegisterFamily(readmodel.ProjectionInbox, keyName)
	readmodel.RegisterFamily(readmodel.ProjectionInbox, legacyKeyName)
}

// Key is user's inbox key under keys (its sealed string; the buffer is the
// same name and "+").
func Key(keys readmodel.Keys, user int64) string {
	return keys.Tagged(readmodel.ProjectionInbox, keyName, user, "")
}

// scripts are this package's scripts, loaded by exec on NOSCRIPT.
var scripts = []*redis.Script{mergeScript, removeScript}

// exec is readmodel.Exec for pipelines that may hold this package's
// scripts.
func exec(ctx context.Context, rdb redis.UniversalClient, fill func(redis.Pipeliner)) error {
	return readmodel.ExecWith(ctx, rdb, scripts, fill)
}

// snowEpochMs is the Snowflake epoch in Unix milliseconds.
var snowEpochMs = snowflake.Epoch.UnixMilli()

// idMs is the created_at millisecond (Unix) of a post id.
func idMs(id int64) int64 { return id>>22 + snowEpochMs }

// maxIDAt is the highest id a post of millisecond ms can have.
func maxIDAt(ms int64) int64 { return (ms-snowEpochMs+1)<<22 - 1 }

// mergeScript is the one place that writes a packed inbox's sealed
// string (besides removals, removeScript). It folds the buffer and
// the ids of ARGV[7] into it, raises the floor, sets ~built and the TTL,
// and trims.
//
// KEYS[1] sealed, KEYS[2] buffer (same slot).
// ARGV[1] real entries a trim keeps, ARGV[2] trim when over this many;
// ARGV[3] raise the floor to this ms (” none; it only grows);
// ARGV[4] '1' to set ~built; ARGV[5] TTL seconds ('0' none), ARGV[6]
// 'nx' (only when the key has none) or 'set' (always);
// ARGV[7] ids to add, 8 bytes big-endian each, any order;
// ARGV[8] (optional) the buffer as the client read it, whose ids it sent
// sorted and deduplicated as ARGV[7] (QueueBufferMerge): when the buffer
// still starts with it, that prefix is taken out of the buffer and
// ARGV[7] merged in its place, else ARGV[7] is dropped and the buffer
// merged as it is.
//
// Ids are compared as two 32-bit halves: Lua's string '<' is strcoll, not
// memcmp, and a double holds 53 bits. The common case, new ids ascending
// and above the sealed ones, is appended without sorting: pushes from
// several partitions interleave in a buffer, so the client sorts it
// before the merge (sorting 64 ids here costs as much as the rest of the
// merge). Returns {ids added (new and above the floor), real entries
// after}.
var mergeScript = redis.NewScript(`
local sk, bk = KEYS[1], KEYS[2]
local keep, over = tonumber(ARGV[1]), tonumber(ARGV[2])
local E = ` + strconv.FormatInt(snowEpochMs, 10) + `
local b = redis.call('GET', bk)
local add
local sorted = false -- add is ascending and distinct (the client sorted it)
local seen = ARGV[8]
if b and seen and #seen > 0 and string.sub(b, 1, #seen) == seen then
  -- the buffer still starts with what the client read, sorted and
  -- deduplicated into ARGV[7]; what landed since stays in the buffer
  if #b == #seen then redis.call('DEL', bk) else redis.call('SET', bk, string.sub(b, #seen + 1), 'KEEPTTL') end
  add, sorted = ARGV[7], true
else
  if b then redis.call('DEL', bk) else b = '' end
  if seen and #seen > 0 then
    -- the buffer changed since the client read it (another merge took
    -- it, or a removal took an id from it): ARGV[7] may hold ids no
    -- longer wanted, and every id it held is in the buffer or merged
    add = b
  else
    add = b .. ARGV[7]
  end
end
-- the lowest id strictly above floor ms f, (f + 1 - E) << 22, as halves
local function bound(f)
  local x = f + 1 - E
  if f < 0 or x <= 0 then return 0, 0 end
  return math.floor(x / 1024), (x % 1024) * 4194304
end
local function setTTL()
  local ttl = tonumber(ARGV[5])
  if ttl > 0 and (ARGV[6] == 'set' or redis.call('TTL', sk) == -1) then
    redis.call('EXPIRE', sk, ttl)
  end
end
-- the hot case, a merge of in-order pushes into an existing inbox, looks
-- at the sealed string's ends only and copies the kept ids once, with no
-- loop over them (each Lua copy of the whole string costs about as much as
-- the rest of the merge): the new ids, strictly
-- ascending and above the floor and the newest sealed id, follow the
-- kept sealed ids (a trim keeps them from the first id above the new
-- floor, found in a window after the cut) and the header follows them.
local tail = redis.call('GETRANGE', sk, -16, -1)
if #tail >= 8 and ARGV[3] == '' and ARGV[4] ~= '1' and #add > 0 then
  local built, hasf, fl = struct.unpack('>BBI6', tail, #tail - 7)
  if hasf == 0 then fl = -1 end
  local bh, bl = bound(fl)
  local ph, pl = bh, bl - 1
  if #tail == 16 then
    local h, l = struct.unpack('>I4I4', tail, 1)
    if h > ph or (h == ph and l > pl) then ph, pl = h, l end
  end
  -- ascending ids are all above the floor and the newest sealed id when
  -- the first is: only an unsorted add is walked
  local fast = true
  local last = #add - 7
  if sorted then last = 1 end
  for p = 1, last, 8 do
    local h, l = struct.unpack('>I4I4', add, p)
    if h > ph or (h == ph and l > pl) then ph, pl = h, l else fast = false break end
  end
  if fast then
    local n = (redis.call('STRLEN', sk) - 8) / 8
    local cnt = n + #add / 8
    local from, nf = 0, fl
    if cnt > over then
      local c = cnt - keep - 1
      local w = math.min(32, cnt - c)
      -- entries c .. c+w-1 of the old body followed by add
      local win
      if c >= n then
        win = string.sub(add, 1 + 8 * (c - n), 8 * (c - n + w))
      else
        win = redis.call('GETRANGE', sk, 8 * c, 8 * math.min(c + w, n) - 1)
        if c + w > n then win = win .. string.sub(add, 1, 8 * (c + w - n)) end
      end
      local h, l = struct.unpack('>I4I4', win, 1)
      local ms = h * 1024 + math.floor(l / 4194304) + E
      if ms > nf then nf = ms end
      local j = nil
      for i = 1, w - 1 do
        local h2, l2 = struct.unpack('>I4I4', win, 1 + 8 * i)
        if h2 * 1024 + math.floor(l2 / 4194304) + E > nf then j = c + i break end
      end
      if not j then fast = false else from = j end
    end
    if fast then
      local hf, fv = 0, 0
      if nf >= 0 then hf, fv = 1, nf end
      -- one SET of an exactly sized string: SETRANGE and APPEND grow a
      -- string's allocation to twice what it needs
      local old = ''
      if from < n then old = redis.call('GETRANGE', sk, 8 * from, 8 * n - 1) end
      if from > n then add = string.sub(add, 1 + 8 * (from - n)) end
      redis.call('SET', sk, old .. add .. struct.pack('>BBI6', built, hf, fv), 'KEEPTTL')
      setTTL()
      return {#add / 8, cnt - from}
    end
  end
end
local s = redis.call('GET', sk)
local existed = s ~= false
local built, hasf, fl = 0, 0, -1
if s then
  built, hasf, fl = struct.unpack('>BBI6', s, #s - 7)
  if hasf == 0 then fl = -1 end
  s = string.sub(s, 1, #s - 8)
else
  s = ''
end
if ARGV[4] == '1' then built = 1 end
local nf = fl
if ARGV[3] ~= '' then
  local r = tonumber(ARGV[3])
  if r > nf then nf = r end
end
local bh, bl = bound(nf)
local n = #s / 8
local function at(i) return struct.unpack('>I4I4', s, 1 + 8 * i) end
-- fast path: the new ids strictly ascending, above the floor and above
-- the newest sealed id: appended as they are
local ph, pl = bh, bl - 1
if n > 0 then
  local h, l = at(n - 1)
  if h > ph or (h == ph and l > pl) then ph, pl = h, l end
end
local fast = true
for p = 1, #add - 7, 8 do
  local h, l = struct.unpack('>I4I4', add, p)
  if h > ph or (h == ph and l > pl) then ph, pl = h, l else fast = false break end
end
local body, added
if fast then
  body, added = s .. add, #add / 8
else
  local nh, nl, np, ns = {}, {}, {}, {}
  for p = 1, #add - 7, 8 do
    local h, l = struct.unpack('>I4I4', add, p)
    if h > bh or (h == bh and l >= bl) then
      local i = #nh + 1
      nh[i], nl[i], np[i], ns[i] = h, l, p, i
    end
  end
  table.sort(ns, function(a, c) return nh[a] < nh[c] or (nh[a] == nh[c] and nl[a] < nl[c]) end)
  local out, p = {}, 0
  added = 0
  local lh, ll = -1, -1
  for _, i in ipairs(ns) do
    local h, l = nh[i], nl[i]
    if not (h == lh and l == ll) then
      lh, ll = h, l
      -- the first sealed index at or above the id, from p
      local lo, hi = p, n
      while lo < hi do
        local m = math.floor((lo + hi) / 2)
        local sh, sl = at(m)
        if sh < h or (sh == h and sl < l) then lo = m + 1 else hi = m end
      end
      if lo > p then out[#out + 1] = string.sub(s, 1 + 8 * p, 8 * lo) end
      p = lo
      local dup = false
      if p < n then
        local sh, sl = at(p)
        dup = sh == h and sl == l
      end
      if not dup then
        out[#out + 1] = string.sub(add, np[i], np[i] + 7)
        added = added + 1
      end
    end
  end
  if p < n then out[#out + 1] = string.sub(s, 1 + 8 * p) end
  body = table.concat(out)
end
local cnt = #body / 8
-- the number of leading (oldest) entries at or below floor ms f
local function below(f)
  local h0, l0 = bound(f)
  local lo, hi = 0, cnt
  while lo < hi do
    local m = math.floor((lo + hi) / 2)
    local sh, sl = struct.unpack('>I4I4', body, 1 + 8 * m)
    if sh < h0 or (sh == h0 and sl < l0) then lo = m + 1 else hi = m end
  end
  return lo
end
local from = 0
if nf > fl and cnt > 0 then from = below(nf) end
if cnt - from > over then
  local h, l = struct.unpack('>I4I4', body, 1 + 8 * (cnt - keep - 1))
  local ms = h * 1024 + math.floor(l / 4194304) + E
  if ms > nf then nf = ms end
  from = below(nf)
end
if from > 0 then body = string.sub(body, 1 + 8 * from) end
if not existed and #body == 0 and built == 0 and nf < 0 then
  return {added, 0}
end
local hf, fv = 0, 0
if nf >= 0 then hf, fv = 1, nf end
redis.call('SET', sk, body .. struct.pack('>BBI6', built, hf, fv), 'KEEPTTL')
setTTL()
return {added, #body / 8}
`)

// removeScript removes ids from a packed inbox's sealed string and
// buffer; the floor and ~built are left alone. Ids are found by plain
// string.find (at 8-byte offsets; equality, unlike order, is exact in
// Lua), and a string is written only when it lost an id.
//
// KEYS[1] sealed, KEYS[2] buffer; ARGV[1] the ids, 8 bytes each. Returns
// the number of sealed entries removed.
var removeScript = redis.NewScript(`
local sk, bk = KEYS[1], KEYS[2]
-- the 8-aligned offsets (1-based) of id in str, below limit, by plain find
local function find(str, id, limit, acc)
  local init = 1
  while true do
    local p = string.find(str, id, init, true)
    if not p or p > limit then return end
    if (p - 1) % 8 == 0 then acc[#acc + 1] = p; init = p + 8 else init = p + 1 end
  end
end
local function without(str, offs, keepTail)
  table.sort(offs)
  local out, from = {}, 1
  for _, p in ipairs(offs) do
    if p > from then out[#out + 1] = string.sub(str, from, p - 1) end
    from = p + 8
  end
  if from <= #str then out[#out + 1] = string.sub(str, from) end
  return table.concat(out)
end
local removed = 0
local s = redis.call('GET', sk)
if s then
  local offs = {}
  for q = 1, #ARGV[1] - 7, 8 do find(s, string.sub(ARGV[1], q, q + 7), #s - 15, offs) end
  if #offs > 0 then
    redis.call('SET', sk, without(s, offs), 'KEEPTTL')
    removed = #offs
  end
end
local b = redis.call('GET', bk)
if b then
  local offs = {}
  for q = 1, #ARGV[1] - 7, 8 do find(b, string.sub(ARGV[1], q, q + 7), #b - 7, offs) end
  if #offs > 0 then
    local rest = without(b, offs)
    if #rest == 0 then redis.call('DEL', bk) else redis.call('SET', bk, rest, 'KEEPTTL') end
  end
end
return removed
`)

// Inboxes is the packed inbox layout's operations (see above).
type Inboxes struct {
	keys readmodel.Keys
	pol  readmodel.Policy
}

// NewInboxes returns the packed inbox operations under keys by pol
// (defaulted here).
func NewInboxes(keys readmodel.Keys, pol readmodel.Policy) Inboxes {
	return Inboxes{keys: keys, pol: pol.WithDefaults()}
}

// Keys returns user's sealed and buffer keys.
func (m Inboxes) Keys(user int64) (sealed, buf string) {
	buf = m.keys.Tagged(readmodel.ProjectionInbox, keyName, user, "+") // one allocation for both
	return buf[:len(buf)-1], buf
}

// AppendBufferKey appends user's buffer key to b: the sealed key and "+".
func (m Inboxes) AppendBufferKey(b []byte, user int64) []byte {
	return m.keys.AppendTagged(b, readmodel.ProjectionInbox, keyName, user, "+")
}

func packID(id int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(id)) }

func packIDs(ids []int64) []byte {
	b := make([]byte, 0, 8*len(ids))
	for _, id := range ids {
		b = binary.BigEndian.AppendUint64(b, uint64(id))
	}
	return b
}

// Push is one post's fan-out, prepared once and queued per follower:
// the APPEND's value, boxed once.
type Push struct {
	id any // the post's 8 bytes, as a string
}

// NewPush prepares the fan-out of post.
func (m Inboxes) NewPush(post int64) Push {
	return Push{id: string(packID(post))}
}

// QueuePush queues the APPEND of the post to user's buffer. Give its
// reply to FollowUp after the pipeline ran. It is paid once per
// delivered entry: four allocations (both keys in one string, its
// interface value, the arguments, the command; TestPushAllocations).
func (m Inboxes) QueuePush(ctx context.Context, pipe redis.Pipeliner, user int64, p Push) *redis.IntCmd {
	_, buf := m.Keys(user)
	cmd := redis.NewIntCmd(ctx, "append", buf, p.id)
	_ = pipe.Process(ctx, cmd) // a pipeline only queues: its error is Exec's
	return cmd
}

// FollowUp queues what a push's APPEND reply asks for on a later
// pipeline: the fallback TTL of a buffer the push created (it is deleted
// at the next merge; this only bounds a buffer whose owner went away), and
// once the buffer holds MergeAt ids, the GET of the buffer, returned
// as merge, whose reply QueueBufferMerge takes on the pipeline after. It
// reports whether it queued anything. A lost follow-up (the process died
// between two pipelines) is done by the next push's.
func (m Inboxes) FollowUp(ctx context.Context, pipe redis.Pipeliner, user int64, reply *redis.IntCmd) (merge *redis.StringCmd, queued bool) {
	n := reply.Val()
	switch {
	case n >= 8*MergeAt:
		_, buf := m.Keys(user)
		return pipe.Get(ctx, buf), true
	case n == 8:
		_, buf := m.Keys(user)
		pipe.ExpireNX(ctx, buf, m.pol.InboxTTL())
		return nil, true
	}
	return nil, false
}

// QueueBufferMerge queues the merge of user's buffer as read (the reply of
// FollowUp's GET), its ids sorted and deduplicated here: the script then
// appends them without sorting when they are all newer than the sealed
// ones, the common case, and checks that the buffer still starts with
// what was read (mergeScript, ARGV[8]). A buffer gone meanwhile (an
// earlier merge took it) queues nothing.
func (m Inboxes) QueueBufferMerge(ctx context.Context, pipe redis.Pipeliner, user int64, read *redis.StringCmd) bool {
	seen, err := read.Bytes()
	if err != nil || len(seen) == 0 {
		return false
	}
	args := m.mergeArgs(sortedIDs(seen), "", false, "nx")
	m.queueMergeScript(ctx, pipe, user, append(args, seen))
	return true
}

// sortedIDs returns the 8-byte ids of b, ascending and distinct.
func sortedIDs(b []byte) []byte {
	ids := make([]uint64, len(b)/8)
	for i := range ids {
		ids[i] = binary.BigEndian.Uint64(b[8*i:])
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	out := make([]byte, 0, 8*len(ids))
	for _, id := range ids {
		out = binary.BigEndian.AppendUint64(out, id)
	}
	return out
}

// PushAll pushes p into the inboxes of users: one pipeline of APPENDs,
// then, when any reply asks for one, one pipeline of the follow-ups
// (FollowUp), and when any of those read a buffer to merge, one pipeline
// of the merges (QueueBufferMerge). It returns the number of merges run.
// Every step is idempotent up to duplicates in a buffer, which the merge
// and the readers drop, so a failed call can be retried whole.
func (m Inboxes) PushAll(ctx context.Context, rdb redis.UniversalClient, users []int64, p Push) (int, error) {
	replies := make([]*redis.IntCmd, len(users))
	pipe := rdb.Pipeline()
	for i, u := range users {
		replies[i] = m.QueuePush(ctx, pipe, u, p)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("push: %w", err)
	}
	var toMerge []int64
	var reads []*redis.StringCmd
	followUps := false
	pipe = rdb.Pipeline()
	for i, u := range users {
		r, queued := m.FollowUp(ctx, pipe, u, replies[i])
		followUps = followUps || queued
		if r != nil {
			toMerge, reads = append(toMerge, u), append(reads, r)
		}
	}
	if !followUps {
		return 0, nil
	}
	if err := readmodel.ExecReads(ctx, pipe); err != nil { // a buffer merged meanwhile is redis.Nil
		return 0, fmt.Errorf("push follow-ups: %w", err)
	}
	if len(toMerge) == 0 {
		return 0, nil
	}
	merges := 0
	err := exec(ctx, rdb, func(pipe redis.Pipeliner) {
		merges = 0
		for i, u := range toMerge {
			if m.QueueBufferMerge(ctx, pipe, u, reads[i]) {
				merges++
			}
		}
	})
	if err != nil {
		return 0, fmt.Errorf("push merges: %w", err)
	}
	return merges, nil
}

// mergeArgs are mergeScript's arguments.
func (m Inboxes) mergeArgs(ids []byte, raise string, built bool, ttlMode string) []any {
	b := "0"
	if built {
		b = "1"
	}
	ttl := int64(m.pol.InboxTTL() / time.Second)
	return []any{m.pol.InboxKeep(), m.pol.InboxTrimOver(), raise, b, ttl, ttlMode, ids}
}

func (m Inboxes) queueMergeScript(ctx context.Context, pipe redis.Pipeliner, user int64, args []any) *redis.Cmd {
	s, b := m.Keys(user)
	return mergeScript.EvalSha(ctx, pipe, []string{s, b}, args...)
}

// QueueBackfill queues the copy of posts (a followee's newest) into user's
// inbox and, when raise is set (the followee has more posts than were
// copied), the floor raise to floorMs, the oldest copied one's, with the
// buffer's merge. The floor is raised unconditionally, not only when more
// posts lie above the inbox's current floor: the conditional rule would
// leave a floor that depends on which partition's pushes and trims came
// first.
func (m Inboxes) QueueBackfill(ctx context.Context, pipe redis.Pipeliner, user int64, posts []readmodel.Entry, floorMs int64, raise bool) *redis.Cmd {
	ids := make([]int64, len(posts))
	for i, e := range posts {
		ids[i] = e.ID
	}
	r := ""
	if raise {
		r = strconv.FormatInt(floorMs, 10)
	}
	return m.queueMergeScript(ctx, pipe, user, m.mergeArgs(packIDs(ids), r, false, "nx"))
}

// WriteRebuilt writes a cold rebuild: posts (the user's followees' and
// the user's newest, newest first, at most InboxMax), the floor at the
// oldest one's millisecond when the rebuild was cut at the bound (its own
// millisecond may have lost same-ms posts to the cut), ~built and the
// TTL. It only adds (pushes that landed between the caller's snapshot and
// this write survive, the buffer is folded in) and does not trim, in one
// script, so no reader sees ~built over a half-written inbox.
func (m Inboxes) WriteRebuilt(ctx context.Context, rdb redis.UniversalClient, user int64, posts []readmodel.Entry) error {
	ids := make([]int64, len(posts))
	for i, e := range posts {
		ids[i] = e.ID
	}
	r := ""
	if len(posts) >= m.pol.InboxMax {
		r = strconv.FormatInt(posts[len(posts)-1].Ms, 10)
	}
	args := m.mergeArgs(packIDs(ids), r, true, "set")
	args[1] = math.MaxInt32 // no trim: the next merge trims
	return exec(ctx, rdb, func(pipe redis.Pipeliner) {
		m.queueMergeScript(ctx, pipe, user, args)
	})
}

// Touch moves the inbox's expiry to Policy.InboxTTL from now.
func (m Inboxes) Touch(ctx context.Context, rdb redis.Cmdable, user int64) error {
	s, b := m.Keys(user)
	pipe := rdb.Pipeline()
	pipe.Expire(ctx, s, m.pol.InboxTTL())
	pipe.Expire(ctx, b, m.pol.InboxTTL())
	_, err := pipe.Exec(ctx)
	return err
}

// QueueRemove queues the removal of posts from user's inbox (sealed and
// buffer; the floor is left alone).
func (m Inboxes) QueueRemove(ctx context.Context, pipe redis.Pipeliner, user int64, posts []int64) *redis.Cmd {
	s, b := m.Keys(user)
	return removeScript.EvalSha(ctx, pipe, []string{s, b}, packIDs(posts))
}

// Remove removes posts from user's inbox.
func (m Inboxes) Remove(ctx context.Context, rdb redis.UniversalClient, user int64, posts []int64) error {
	if len(posts) == 0 {
		return nil
	}
	return exec(ctx, rdb, func(pipe redis.Pipeliner) { m.QueueRemove(ctx, pipe, user, posts) })
}

// Posts returns every post id in user's inbox (sealed and buffer,
// distinct, newest first), whatever the floor.
func (m Inboxes) Posts(ctx context.Context, rdb redis.Cmdable, user int64) ([]int64, error) {
	s, b := m.Keys(user)
	pipe := rdb.Pipeline()
	bc := pipe.Get(ctx, b) // the buffer first, as QueueRead
	sc := pipe.Get(ctx, s)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	var ids []int64
	if v := sc.Val(); len(v) >= header {
		ids = appendIDs(ids, v[:len(v)-header])
	}
	ids = appendIDs(ids, bc.Val())
	slices.SortFunc(ids, func(a, b int64) int { return cmpDesc(a, b) })
	return slices.Compact(ids), nil
}

func cmpDesc(a, b int64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

func appendIDs(ids []int64, s string) []int64 {
	for i := 0; i+8 <= len(s); i += 8 {
		ids = append(ids, int64(binary.BigEndian.Uint64([]byte(s[i:i+8]))))
	}
	return ids
}

// Read is a queued page read of a packed inbox.
type Read struct {
	sealed, buf *redis.StringCmd
	maxID       int64
	n           int
	first       bool
}

// QueueRead queues the read of user's inbox from fromMs (inclusive;
// readmodel.MaxScoreMs or more: the first page) with n entries: the first page is
// one GETRANGE of the newest n+1 sealed ids and the header, deeper pages
// read the whole sealed string; both read the buffer.
func (m Inboxes) QueueRead(ctx context.Context, pipe redis.Pipeliner, user, fromMs int64, n int) Read {
	s, b := m.Keys(user)
	r := Read{n: n, maxID: 1<<63 - 1, first: fromMs >= readmodel.MaxScoreMs}
	// The buffer first: a merge that runs between the two reads then
	// leaves its ids in both (the read drops the duplicates), where the
	// other order could miss them.
	r.buf = pipe.Get(ctx, b)
	if r.first {
		r.sealed = pipe.GetRange(ctx, s, -int64(header+8*(n+1)), -1)
	} else {
		r.maxID = maxIDAt(fromMs)
		r.sealed = pipe.Get(ctx, s)
	}
	return r
}

// Page is a read page: Entries newest first, distinct, strictly
// above the floor, at most the n asked; More when the inbox holds more
// entries (above the floor) below the last one; the floor and ~built.
type Page struct {
	Entries []readmodel.Entry
	More    bool
	Floor   *int64
	Built   bool
}

// Result is the page once the pipeline ran (ExecReads).
func (r Read) Result() (Page, error) {
	var p Page
	s, err := r.sealed.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return p, err
	}
	b, err := r.buf.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return p, err
	}
	floorID := int64(-1) // entries must be above it
	var body string      // ascending
	if len(s) >= header {
		h := s[len(s)-header:]
		p.Built = h[0] == 1
		if h[1] == 1 {
			var x [8]byte
			copy(x[2:], h[2:8])
			f := int64(binary.BigEndian.Uint64(x[:]))
			p.Floor = &f
			floorID = maxIDAt(f)
		}
		body = s[:len(s)-header]
	}
	// sealed ids at or below maxID, newest first: the first page's are all
	// of them
	end := len(body)
	if !r.first {
		end = sealedSearch(body, r.maxID)
	}
	ids := make([]int64, 0, r.n+1+len(b)/8)
	for i := end - 8; i >= 0 && len(ids) <= r.n; i -= 8 {
		ids = append(ids, int64(binary.BigEndian.Uint64([]byte(body[i:i+8]))))
	}
	sealedN := len(ids)
	for i := 0; i+8 <= len(b); i += 8 {
		id := int64(binary.BigEndian.Uint64([]byte(b[i : i+8])))
		if id <= r.maxID && id > floorID {
			ids = append(ids, id)
		}
	}
	if len(ids) > sealedN {
		slices.SortFunc(ids, cmpDesc)
		ids = slices.Compact(ids)
	}
	if len(ids) > r.n {
		p.More = true
		ids = ids[:r.n]
	}
	p.Entries = make([]readmodel.Entry, len(ids))
	for i, id := range ids {
		p.Entries[i] = readmodel.Entry{ID: id, Ms: idMs(id)}
	}
	return p, nil
}

// sealedSearch returns the byte offset in body (ids ascending) of the
// first id above maxID.
func sealedSearch(body string, maxID int64) int {
	lo, hi := 0, len(body)/8
	for lo < hi {
		m := (lo + hi) / 2
		if int64(binary.BigEndian.Uint64([]byte(body[8*m:8*m+8]))) <= maxID {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return 8 * lo
}

// BuiltInbox is one user's inbox as a bulk build computed it: the posts
// kept, newest first, all scoring above Floor when HasFloor.
type BuiltInbox struct {
	Kept     []readmodel.Entry
	Floor    int64
	HasFloor bool
}

// Chunk is a run of built inboxes for WriteChunk: Len of them, the i-th
// computed on demand (a writer may ask for one again). Inbox fills b
// (reusing its slices) and returns the owner and when the inbox expires
// (epoch ms); ok is false when there is nothing to write.
type Chunk interface {
	Len() int
	Inbox(i int, b *BuiltInbox) (user, expireMs int64, ok bool)
}

// BuildBuffers are one build worker's reusable buffers.
type BuildBuffers struct {
	in    BuiltInbox
	arena []byte
}

// WriteChunk writes the inboxes of c for `feed rebuild`, in one pipeline:
// per inbox one SET of the finished sealed string (ids oldest first, the
// floor, ~built) with its TTL (expireMs minus nowMs; an inbox that would
// expire before it is written is not written); no buffer. Ids are taken in
// id order (the build orders a millisecond's posts more finely than ids
// do). Safe for concurrent use by the build's workers, each with its own
// BuildBuffers.
func (m Inboxes) WriteChunk(ctx context.Context, rdb redis.UniversalClient, c Chunk, nowMs func() int64, b *BuildBuffers) error {
	pipe := rdb.Pipeline()
	b.arena = b.arena[:0]
	var ids []int64
	for i := range c.Len() {
		user, exp, ok := c.Inbox(i, &b.in)
		if !ok {
			continue
		}
		ttl := exp - nowMs()
		if ttl <= 0 {
			continue
		}
		ids = ids[:0]
		for _, e := range b.in.Kept {
			if !b.in.HasFloor || e.Ms > b.in.Floor {
				ids = append(ids, e.ID)
			}
		}
		slices.Sort(ids)
		ids = slices.Compact(ids)
		start := len(b.arena)
		for _, id := range ids {
			b.arena = binary.BigEndian.AppendUint64(b.arena, uint64(id))
		}
		var h [8]byte
		h[0] = 1
		if b.in.HasFloor {
			binary.BigEndian.PutUint64(h[:], uint64(b.in.Floor))
			h[0], h[1] = 1, 1
		}
		b.arena = append(b.arena, h[:]...)
		s, _ := m.Keys(user)
		pipe.Set(ctx, s, b.arena[start:len(b.arena):len(b.arena)], time.Duration(ttl)*time.Millisecond)
	}
	if pipe.Len() == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("write packed inboxes: %w", err)
	}
	return nil
}
