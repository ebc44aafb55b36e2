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

// changeFollow is Follow (follow true) and Unfollow (false): lock both
// users, refuse a follow between two accounts one of which blocks the
// other (ErrForbidden), insert or delete the follows row, and only when that changed
// something, move both counts and append Followed or Unfollowed at the
// pair stream's next version.
func changeFollow(ctx context.Context, tx pgx.Tx, follower, followee int64, trace Trace, follow bool) (bool, error) {
	if err := validatePair(follower, followee); err != nil {
		return false, err
	}
	if err := lockUsers(ctx, tx, follower, followee); err != nil {
		return false, err
	}
	if follow {
		blocked, err := blockedBetween(ctx, tx, follower, followee)
		if err != nil {
			return false, err
		}
		if blocked {
			return false, fmt.Errorf("follow %d -> %d: %w", follower, followee, ErrBlocked)
		}
	}
	return applyFollow(ctx, tx, follower, followee, trace, follow)
}

// The change of a follows row, both counts and the pair's event, in one
// statement (changeFollowSQL's CTEs): taken after lockUsers, so its
// snapshot sees every change of the pair committed before (they all hold
// both users' locks), and the stream's next version computed in it is the
// head's. A data-modifying CTE runs whether or not it is read, so the
// counts and the event depend on `changed` returning a row: a follow of a
// pair already following (or an unfollow of one that is not) changes
// nothing. The payload is events.Encode's with followeeFollowers set from
// the count the same statement wrote.
const (
	followChangedSQL   = `INSERT INTO follows (follower_id, followee_id) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING 1`
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
		SELECT count(*) FROM ev`
)

var (
	followSQL   = fmt.Sprintf(changeFollowSQL, followChangedSQL)
	unfollowSQL = fmt.Sprintf(changeFollowSQL, unfollowChangedSQL)
)

// applyFollow runs changeFollowSQL for the pair (the users already
// locked) and reports whether it changed anything.
func applyFollow(ctx context.Context, tx pgx.Tx, follower, followee int64, trace Trace, follow bool) (bool, error) {
	sql, delta := unfollowSQL, int64(-1)
	var ev events.Event = events.Unfollowed{FollowerID: follower, FolloweeID: followee}
	if follow {
		sql, delta = followSQL, +1
		ev = events.Followed{FollowerID: follower, FolloweeID: followee}
	}
	eventID, payload, err := newEventRow(ev)
	if err != nil {
		return false, err
	}
	meta, err := encodeMetadata(trace.metadata(follower))
	if err != nil {
		return false, err
	}
	stream := ev.StreamID()
	var n int
	if err := tx.QueryRow(ctx, sql, follower, followee, delta, eventID, stream, ev.EventType(), payload, meta).Scan(&n); err != nil {
		if isVersionConflict(err) {
			return false, fmt.Errorf("append to %s: %w", stream, ErrVersionConflict)
		}
		return false, fmt.Errorf("change follow %d -> %d: %w", follower, followee, err)
	}
	return n == 1, nil
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
