package commands

import (
	"context"

	"github.com/jackc/pgx/v5"
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
	return changeFollow(ctx, tx, cmd.FollowerID, cmd.FolloweeID, cmd.Trace, false)
}
