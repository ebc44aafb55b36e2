package readmodel

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifx:{u} is a Redis Stream of the notifications removed from u's set
// by an undo (an unlike, an undone repost, an unfollow, a deleted reply
// or quote), so that a notifications stream that sent one can say it is
// gone (docs/streams.md). notifScript appends to it in the same step as
// the ZREM, so a crash never leaves a removal untold and a redelivered
// undo (refused by its guard) never appends twice. Entries: m, the
// member; s, the removed entry's score (its millisecond). Trimmed by age
// (RemovalsKept, XADD MINID ~), and the key expires RemovalsKept after
// its last removal. A removal of an entry no longer in the set (trimmed
// by the bound, or never added) appends nothing.

// RemovalsKept is how long a user's removals stream keeps an entry: a
// notifications stream that resumes later than that after its last event
// misses the removals older than it.
const RemovalsKept = 15 * time.Minute

func (m Notifications) removalsKey(user int64) string {
	return m.keys.tagged(ProjectionNotifications, "notifx:", user, "")
}

// Removal is one removed notification of a user: Pos its place in the
// user's removals stream, N the notification (its MS the removed entry's
// score).
type Removal struct {
	Pos ChangePos
	N   Notification
}

// LastRemoval is the position of user's newest removal (zero when none).
func (m Notifications) LastRemoval(ctx context.Context, rdb redis.Cmdable, user int64) (ChangePos, error) {
	xs, err := rdb.XRevRangeN(ctx, m.removalsKey(user), "+", "-", 1).Result()
	if err != nil {
		return ChangePos{}, fmt.Errorf("read the last removal of %d: %w", user, err)
	}
	if len(xs) == 0 {
		return ChangePos{}, nil
	}
	return parseChangePos(xs[0].ID)
}

// RemovalsAfter returns up to n of user's removals strictly after pos,
// oldest first.
func (m Notifications) RemovalsAfter(ctx context.Context, rdb redis.Cmdable, user int64, pos ChangePos, n int64) ([]Removal, error) {
	xs, err := rdb.XRangeN(ctx, m.removalsKey(user), "("+pos.String(), "+", n).Result()
	if err != nil {
		return nil, fmt.Errorf("read the removals of %d: %w", user, err)
	}
	out := make([]Removal, 0, len(xs))
	for _, x := range xs {
		p, err := parseChangePos(x.ID)
		if err != nil {
			return nil, err
		}
		member, _ := x.Values["m"].(string)
		nt, ok := parseMember(member)
		if !ok {
			return nil, fmt.Errorf("removal %s of %d: bad member", x.ID, user)
		}
		ms, err := strconv.ParseInt(fmt.Sprint(x.Values["s"]), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("removal %s of %d: bad score: %w", x.ID, user, err)
		}
		nt.MS = ms
		out = append(out, Removal{Pos: p, N: nt})
	}
	return out, nil
}
