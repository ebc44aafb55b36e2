package commands

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/events"
)

// Block makes BlockerID block BlockedID: every follow between the two, both
// ways, is removed (each with its Unfollowed and counts), and neither can
// follow the other while the block stands (ErrForbidden), so neither sees
// the other's posts in the home feed. Blocking an account already blocked
// succeeds and appends nothing. Its result reports whether this command
// changed anything.
type Block struct {
	BlockerID int64
	BlockedID int64
	Trace     Trace `json:"-"`
}

// Actor implements Command: the blocker.
func (c Block) Actor() int64 { return c.BlockerID }

// Unblock lifts a block; no follow comes back. Unblocking an account not
// blocked succeeds and appends nothing.
type Unblock struct {
	BlockerID int64
	BlockedID int64
	Trace     Trace `json:"-"`
}

// Actor implements Command: the blocker.
func (c Unblock) Actor() int64 { return c.BlockerID }

func block(ctx context.Context, tx pgx.Tx, cmd Block) (bool, error) {
	return changeBlock(ctx, tx, cmd.BlockerID, cmd.BlockedID, cmd.Trace, true)
}

func unblock(ctx context.Context, tx pgx.Tx, cmd Unblock) (bool, error) {
	return changeBlock(ctx, tx, cmd.BlockerID, cmd.BlockedID, cmd.Trace, false)
}

// changeBlock is Block (on true) and Unblock (false). Both users' rows are
// locked first, as a follow locks them, so a follow of either by the other
// commits wholly before the block (and is removed by it) or after it (and
// is refused).
func changeBlock(ctx context.Context, tx pgx.Tx, blocker, blocked int64, trace Trace, on bool) (bool, error) {
	if err := validateID("blockerId", blocker); err != nil {
		return false, err
	}
	if err := validateID("userId", blocked); err != nil {
		return false, err
	}
	if blocker == blocked {
		return false, invalid("userId", "a user cannot block themselves")
	}
	if err := lockUsers(ctx, tx, blocker, blocked); err != nil {
		return false, err
	}
	sql := `DELETE FROM blocks WHERE blocker_id = $1 AND blocked_id = $2`
	if on {
		sql = `INSERT INTO blocks (blocker_id, blocked_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`
	}
	tag, err := tx.Exec(ctx, sql, blocker, blocked)
	if err != nil {
		return false, fmt.Errorf("change block %d -> %d: %w", blocker, blocked, err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	if on {
		// The follows both ways, each an Unfollowed with its counts.
		for _, pair := range [2][2]int64{{blocker, blocked}, {blocked, blocker}} {
			if _, err := changeFollow(ctx, tx, pair[0], pair[1], trace, false); err != nil {
				return false, err
			}
		}
	}
	v, err := StreamVersion(ctx, tx, events.BlockStream(blocker, blocked))
	if err != nil {
		return false, err
	}
	var ev events.Event = events.Unblocked{BlockerID: blocker, BlockedID: blocked}
	if on {
		ev = events.Blocked{BlockerID: blocker, BlockedID: blocked}
	}
	if err := Append(ctx, tx, v, trace.metadata(blocker), ev); err != nil {
		return false, err
	}
	return true, nil
}
