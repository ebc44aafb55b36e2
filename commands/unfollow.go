package commands

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/events"
)

// Unfollow makes FollowerID stop following FolloweeID. Unfollowing someone
// not followed succeeds and appends nothing.
type Unfollow struct {
	FollowerID int64
	FolloweeID int64
	Trace      Trace
}

// UnfollowHandler handles Unfollow.
type UnfollowHandler struct {
	tx *Runner
}

// Handle unfollows in its own transaction. It reports whether this call
// changed anything (false: was not following).
func (h *UnfollowHandler) Handle(ctx context.Context, cmd Unfollow) (changed bool, err error) {
	err = h.tx.Run(ctx, func(ctx context.Context, tx pgx.Tx) error {
		changed, err = h.Exec(ctx, tx, cmd)
		return err
	})
	return changed, err
}

// Exec unfollows inside tx, with the same locking as Follow. Unfollowed
// continues the pair's stream (Followed v1, Unfollowed v2, Followed v3, ...).
func (h *UnfollowHandler) Exec(ctx context.Context, tx pgx.Tx, cmd Unfollow) (bool, error) {
	if err := validatePair(cmd.FollowerID, cmd.FolloweeID); err != nil {
		return false, err
	}
	if err := lockUsers(ctx, tx, cmd.FollowerID, cmd.FolloweeID); err != nil {
		return false, err
	}
	tag, err := tx.Exec(ctx, `DELETE FROM follows WHERE follower_id = $1 AND followee_id = $2`, cmd.FollowerID, cmd.FolloweeID)
	if err != nil {
		return false, fmt.Errorf("delete follow: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	followers, err := bumpCounts(ctx, tx, cmd.FollowerID, cmd.FolloweeID, -1)
	if err != nil {
		return false, err
	}
	stream := events.FollowStream(cmd.FollowerID, cmd.FolloweeID)
	v, err := StreamVersion(ctx, tx, stream)
	if err != nil {
		return false, err
	}
	meta := events.Metadata{CorrelationID: cmd.Trace.CorrelationID, CausationID: cmd.Trace.CausationID, Actor: strconv.FormatInt(cmd.FollowerID, 10)}
	ev := events.Unfollowed{FollowerID: cmd.FollowerID, FolloweeID: cmd.FolloweeID, FolloweeFollowers: followers}
	if err := Append(ctx, tx, v, meta, ev); err != nil {
		return false, err
	}
	return true, nil
}
