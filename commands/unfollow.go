package commands

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Unfollow makes FollowerID stop following FolloweeID. Unfollowing someone
// not followed succeeds and appends nothing. Its result reports whether
// this command changed anything (false: was not following).
type Unfollow struct {
	FollowerID int64
	FolloweeID int64
	Trace      Trace `json:"-"`
}

// Actor implements Command: the follower.
func (c Unfollow) Actor() int64 { return c.FollowerID }

// unfollow is Unfollow's work, with the same locking as follow. Unfollowed
// continues the pair's stream (Followed v1, Unfollowed v2, Followed v3, ...).
func unfollow(ctx context.Context, tx pgx.Tx, cmd Unfollow) (bool, error) {
	return changeFollow(ctx, tx, cmd.FollowerID, cmd.FolloweeID, cmd.Trace, false)
}
