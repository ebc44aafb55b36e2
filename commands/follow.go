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
	sql, delta := `DELETE FROM follows WHERE follower_id = $1 AND followee_id = $2`, int64(-1)
	if follow {
		sql, delta = `INSERT INTO follows (follower_id, followee_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, +1
	}
	tag, err := tx.Exec(ctx, sql, follower, followee)
	if err != nil {
		return false, fmt.Errorf("change follow %d -> %d: %w", follower, followee, err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	followers, err := bumpCounts(ctx, tx, follower, followee, delta)
	if err != nil {
		return false, err
	}
	v, err := StreamVersion(ctx, tx, events.FollowStream(follower, followee))
	if err != nil {
		return false, err
	}
	meta := trace.metadata(follower)
	var ev events.Event = events.Unfollowed{FollowerID: follower, FolloweeID: followee, FolloweeFollowers: followers}
	if follow {
		ev = events.Followed{FollowerID: follower, FolloweeID: followee, FolloweeFollowers: followers}
	}
	if err := Append(ctx, tx, v, meta, ev); err != nil {
		return false, err
	}
	return true, nil
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

// bumpCounts adds delta to the followee's follower count and the follower's
// following count, and returns the followee's count after the change.
func bumpCounts(ctx context.Context, tx pgx.Tx, follower, followee, delta int64) (int64, error) {
	var followers int64
	if err := tx.QueryRow(ctx, `UPDATE users SET follower_count = follower_count + $2 WHERE id = $1 RETURNING follower_count`,
		followee, delta).Scan(&followers); err != nil {
		return 0, fmt.Errorf("update follower count of %d: %w", followee, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE users SET following_count = following_count + $2 WHERE id = $1`, follower, delta); err != nil {
		return 0, fmt.Errorf("update following count of %d: %w", follower, err)
	}
	return followers, nil
}
