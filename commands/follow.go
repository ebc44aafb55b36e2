package commands

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/events"
)

// Follow makes FollowerID follow FolloweeID. Following someone already
// followed succeeds and appends nothing. Its result reports whether this
// command changed anything (false: already following).
type Follow struct {
	FollowerID int64
	FolloweeID int64
	Trace      Trace `json:"-"`
}

// Actor implements Command: the follower.
func (c Follow) Actor() int64 { return c.FollowerID }

// follow is Follow's work. Both users' rows are locked in id order first:
// concurrent follows of one pair then run one after the other, the later
// ones find the follows row and append nothing, and the followee's count
// carried in Followed is the count after exactly this change.
func follow(ctx context.Context, tx pgx.Tx, cmd Follow) (bool, error) {
	return changeFollow(ctx, tx, cmd.FollowerID, cmd.FolloweeID, cmd.Trace, true)
}

// changeFollow is Follow (follow true) and Unfollow (false) inside a
// transaction the caller owns: lock both users, then changeFollowSQL, which
// refuses a follow between two accounts one of which blocks the other
// (ErrBlocked), inserts or deletes the follows row, and only when that
// changed something, moves both counts and appends Followed or Unfollowed
// at the pair stream's next version.
func changeFollow(ctx context.Context, tx pgx.Tx, follower, followee int64, trace Trace, follow bool) (bool, error) {
	if err := validatePair(follower, followee); err != nil {
		return false, err
	}
	c, err := newFollowChange(follower, followee, trace, follow)
	if err != nil {
		return false, err
	}
	return c.inTx(ctx, tx)
}

// followStatement and unfollowStatement are Follow and Unfollow in one
// round trip: the lock and changeFollowSQL as one batch (pairChange.batch).
func followStatement(ctx context.Context, db DB, cmd Follow) (bool, error) {
	return changeFollowStatement(ctx, db, cmd.FollowerID, cmd.FolloweeID, cmd.Trace, true)
}

func unfollowStatement(ctx context.Context, db DB, cmd Unfollow) (bool, error) {
	return changeFollowStatement(ctx, db, cmd.FollowerID, cmd.FolloweeID, cmd.Trace, false)
}

func changeFollowStatement(ctx context.Context, db DB, follower, followee int64, trace Trace, follow bool) (bool, error) {
	if err := validatePair(follower, followee); err != nil {
		return false, err
	}
	c, err := newFollowChange(follower, followee, trace, follow)
	if err != nil {
		return false, err
	}
	return c.batch(ctx, db)
}

// The change of a follows row, both counts and the pair's event, in one
// statement (changeFollowSQL's CTEs): run after the users' lock, so its
// snapshot sees every change of the pair committed before (they all hold
// both users' locks, blocks too), and the stream's next version computed
// in it is the head's. A data-modifying CTE runs whether or not it is
// read, so the counts and the event depend on `changed` returning a row: a
// follow of a pair already following (or an unfollow of one that is not),
// or a follow between accounts one of which blocks the other, changes
// nothing. The statement answers the number of events appended and, for a
// follow, whether a block stood in the way. The payload is events.Encode's
// with followeeFollowers set from the count the same statement wrote.
const (
	blockedBetweenSQL  = `EXISTS (SELECT 1 FROM blocks WHERE (blocker_id = $1 AND blocked_id = $2) OR (blocker_id = $2 AND blocked_id = $1))`
	followChangedSQL   = `INSERT INTO follows (follower_id, followee_id) SELECT $1, $2 WHERE NOT ` + blockedBetweenSQL + ` ON CONFLICT DO NOTHING RETURNING 1`
	unfollowChangedSQL = `DELETE FROM follows WHERE follower_id = $1 AND followee_id = $2 RETURNING 1`
	changeFollowSQL    = `
		WITH changed AS (%s),
		     counts AS (UPDATE users
		                SET follower_count = follower_count + CASE WHEN id = $2 THEN $3::bigint ELSE 0 END,
		                    following_count = following_count + CASE WHEN id = $1 THEN $3::bigint ELSE 0 END
		                WHERE id IN ($1, $2) AND EXISTS (SELECT 1 FROM changed)
		                RETURNING id, follower_count),
		     ev AS (INSERT INTO events (event_id, stream_id, stream_version, type, payload, metadata)
		            SELECT $4, $5, (SELECT coalesce(max(stream_version), 0) + 1 FROM events WHERE stream_id = $5),
		                   $6, $7::jsonb || jsonb_build_object('followeeFollowers', counts.follower_count), $8
		            FROM counts WHERE counts.id = $2
		            RETURNING 1)
		SELECT (SELECT count(*) FROM ev), %s`
)

var (
	followSQL   = fmt.Sprintf(changeFollowSQL, followChangedSQL, blockedBetweenSQL)
	unfollowSQL = fmt.Sprintf(changeFollowSQL, unfollowChangedSQL, "false")
)

// newFollowChange is changeFollowSQL for the pair: it answers whether it
// changed anything, or ErrBlocked.
func newFollowChange(follower, followee int64, trace Trace, follow bool) (pairChange, error) {
	sql, delta := unfollowSQL, int64(-1)
	var ev events.Event = events.Unfollowed{FollowerID: follower, FolloweeID: followee}
	if follow {
		sql, delta = followSQL, +1
		ev = events.Followed{FollowerID: follower, FolloweeID: followee}
	}
	eventID, payload, err := newEventRow(ev)
	if err != nil {
		return pairChange{}, err
	}
	meta, err := encodeMetadata(trace.metadata(follower))
	if err != nil {
		return pairChange{}, err
	}
	stream := ev.StreamID()
	result := func(row pgx.Row) (bool, error) {
		var n int
		var blocked bool
		if err := row.Scan(&n, &blocked); err != nil {
			if isVersionConflict(err) {
				return false, fmt.Errorf("append to %s: %w", stream, ErrVersionConflict)
			}
			return false, fmt.Errorf("change follow %d -> %d: %w", follower, followee, err)
		}
		if blocked {
			return false, fmt.Errorf("follow %d -> %d: %w", follower, followee, ErrBlocked)
		}
		return n == 1, nil
	}
	return pairChange{
		sql:    sql,
		args:   []any{follower, followee, delta, eventID, stream, ev.EventType(), payload, meta},
		ids:    []int64{follower, followee},
		result: result,
	}, nil
}

func validatePair(follower, followee int64) error {
	if err := validateID("followerId", follower); err != nil {
		return err
	}
	if err := validateID("followeeId", followee); err != nil {
		return err
	}
	if follower == followee {
		return invalid("userId", "a user cannot follow themselves")
	}
	return nil
}
