package readmodel

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Blocks live beside mutes in following_v:{u}: "b:{a}" holds the version
// of the block pair (u, a) when u blocks a, and "x:{a}" the version of the
// pair (a, u) when a blocks u (odd: blocked, even: unblocked). A block
// event (blocker B, blocked V) writes "b:V" in following_v:{B} and "x:B"
// in following_v:{V}, each only when its version is above the stored one
// (blockFieldScript), so a block pair's events apply in any order and at
// most once. They do not touch following:{u}: a block removes the follows
// both ways with Unfollowed events of their own, and the write side
// refuses a follow while it stands. The query side reads a page's
// relations with one HMGET (QueueRelations).

// BlockField is the field of following_v:{u} that holds the version of
// u's block pair with blocked.
func BlockField(blocked int64) string { return "b:" + itoa(blocked) }

// BlockedByField is the field of following_v:{u} that holds the version
// of blocker's block pair with u.
func BlockedByField(blocker int64) string { return "x:" + itoa(blocker) }

// blockFieldScript sets a pair version field of one hash when the version
// is above the stored one.
//
// KEYS[1] following_v:{u}; ARGV[1] the field; ARGV[2] the version.
// Returns 1 when set, 0 when a version as new or newer is stored.
var blockFieldScript = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) <= cur then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
`)

// QueueApplyBlock queues one block-pair event (Blocked, odd version, or
// Unblocked, even) of blocker and blocked: "b:{blocked}" in
// following_v:{blocker} and "x:{blocker}" in following_v:{blocked}, two
// single-key scripts. Run the pipeline with Exec.
func (m Follows) QueueApplyBlock(ctx context.Context, pipe redis.Pipeliner, blocker, blocked, version int64) {
	blockFieldScript.EvalSha(ctx, pipe, []string{m.keys.FollowingVersions(blocker)}, BlockField(blocked), version)
	blockFieldScript.EvalSha(ctx, pipe, []string{m.keys.FollowingVersions(blocked)}, BlockedByField(blocker), version)
}

// Relation is what the viewer's following state says of one account
// beside the follow: whether the viewer mutes it, blocks it, or is
// blocked by it.
type Relation struct{ Muted, Blocks, BlockedBy bool }

// Blocked reports a block either way.
func (r Relation) Blocked() bool { return r.Blocks || r.BlockedBy }

// RelationReads is a queued read of a viewer's relations (QueueRelations).
type RelationReads struct{ cmd *redis.SliceCmd }

// QueueRelations queues the viewer's relations to each of accounts: one
// HMGET of following_v:{viewer}, fields "m:", "b:" and "x:" of each
// account (none when there are no accounts).
func (m Follows) QueueRelations(ctx context.Context, pipe redis.Pipeliner, viewer int64, accounts []int64) RelationReads {
	if len(accounts) == 0 {
		return RelationReads{}
	}
	fields := make([]string, 0, 3*len(accounts))
	for _, a := range accounts {
		fields = append(fields, MuteField(a), BlockField(a), BlockedByField(a))
	}
	return RelationReads{cmd: pipe.HMGet(ctx, m.keys.FollowingVersions(viewer), fields...)}
}

// All returns the relation to every account queued, in order.
func (r RelationReads) All() ([]Relation, error) {
	if r.cmd == nil {
		return nil, nil
	}
	vals, err := r.cmd.Result()
	if err != nil {
		return nil, err
	}
	out := make([]Relation, len(vals)/3)
	for i := range out {
		var on [3]bool
		for k := range on {
			v, err := intOf(vals[3*i+k])
			if err != nil {
				return nil, fmt.Errorf("relation field %s: %w", r.cmd.Args()[2+3*i+k], err)
			}
			on[k] = v%2 == 1
		}
		out[i] = Relation{Muted: on[0], Blocks: on[1], BlockedBy: on[2]}
	}
	return out, nil
}

// RelationsScanCount is the COUNT of QueueRelationsScan: a following_v:{u}
// holds ~built, the mute and block fields and the follow pairs' versions
// the set does not imply (refollows), a few fields for nearly everyone.
const RelationsScanCount = 512

// QueueRelationsScan queues one HSCAN step of following_v:{viewer} from
// cursor 0. When the step returns the whole hash (RelationsOf's whole),
// it answers the viewer's relation to every account: the query side's
// read cache keeps it so, instead of one HMGET per page.
func (m Follows) QueueRelationsScan(ctx context.Context, pipe redis.Pipeliner, viewer int64) *redis.ScanCmd {
	return pipe.HScan(ctx, m.keys.FollowingVersions(viewer), 0, "", RelationsScanCount)
}

// RelationsOf returns the relations an HSCAN step of following_v:{u}
// (QueueRelationsScan) holds: the accounts with a mute or a block either
// way (odd version), and whole, true when the step returned the whole
// hash (cursor 0): then an account it does not name has no relation.
func RelationsOf(cmd *redis.ScanCmd) (rels map[int64]Relation, whole bool, err error) {
	kv, cursor, err := cmd.Result()
	if err != nil {
		return nil, false, err
	}
	for i := 0; i+1 < len(kv); i += 2 {
		f, v := kv[i], kv[i+1]
		if len(f) < 3 || f[1] != ':' || (f[0] != 'm' && f[0] != 'b' && f[0] != 'x') {
			continue // ~built, a follow pair's version
		}
		ver, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, false, fmt.Errorf("relation field %s: %w", f, err)
		}
		if ver%2 == 0 {
			continue
		}
		a, err := strconv.ParseInt(f[2:], 10, 64)
		if err != nil {
			return nil, false, fmt.Errorf("relation field %s: %w", f, err)
		}
		if rels == nil {
			rels = map[int64]Relation{}
		}
		r := rels[a]
		switch f[0] {
		case 'm':
			r.Muted = true
		case 'b':
			r.Blocks = true
		case 'x':
			r.BlockedBy = true
		}
		rels[a] = r
	}
	return rels, cursor == 0, nil
}

// VersionsKey is following_v:{viewer}: the query side's read cache names
// the relations it keeps by it.
func (m Follows) VersionsKey(viewer int64) string { return m.keys.FollowingVersions(viewer) }
