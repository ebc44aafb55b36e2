package commands

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/events"
)

// Mute hides MutedID's posts from MuterID's home feed; a follow between
// them stays. Muting an account already muted succeeds and appends
// nothing. Its result reports whether this command changed anything.
type Mute struct {
	MuterID int64
	MutedID int64
	Trace   Trace `json:"-"`
}

// Actor implements Command: the muter.
func (c Mute) Actor() int64 { return c.MuterID }

// Unmute lifts a mute. Unmuting an account not muted succeeds and appends
// nothing. Its result reports whether this command changed anything.
type Unmute struct {
	MuterID int64
	MutedID int64
	Trace   Trace `json:"-"`
}

// Actor implements Command: the muter.
func (c Unmute) Actor() int64 { return c.MuterID }

func mute(ctx context.Context, tx pgx.Tx, cmd Mute) (bool, error) {
	return changeMute(ctx, tx, cmd.MuterID, cmd.MutedID, cmd.Trace, true)
}

func unmute(ctx context.Context, tx pgx.Tx, cmd Unmute) (bool, error) {
	return changeMute(ctx, tx, cmd.MuterID, cmd.MutedID, cmd.Trace, false)
}

// changeMute is Mute (on true) and Unmute (false). Both users' rows are
// locked first, as a follow locks them: a follow, a mute of the same pair
// and a post of the muted account (which reads its row FOR SHARE) commit
// one after the other, so Following and MutedFollowers in the event are
// the pair's state at exactly this point of the log.
func changeMute(ctx context.Context, tx pgx.Tx, muter, muted int64, trace Trace, on bool) (bool, error) {
	if err := validateID("muterId", muter); err != nil {
		return false, err
	}
	if err := validateID("userId", muted); err != nil {
		return false, err
	}
	if muter == muted {
		return false, invalid("userId", "a user cannot mute themselves")
	}
	if err := lockUsers(ctx, tx, muter, muted); err != nil {
		return false, err
	}
	sql := `DELETE FROM mutes WHERE muter_id = $1 AND muted_id = $2`
	if on {
		sql = `INSERT INTO mutes (muter_id, muted_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`
	}
	tag, err := tx.Exec(ctx, sql, muter, muted)
	if err != nil {
		return false, fmt.Errorf("change mute %d -> %d: %w", muter, muted, err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	var following bool
	var followers int64
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM follows WHERE follower_id = $1 AND followee_id = $2),
		(SELECT follower_count FROM users WHERE id = $2)`, muter, muted).Scan(&following, &followers); err != nil {
		return false, fmt.Errorf("read follow %d -> %d: %w", muter, muted, err)
	}
	v, err := StreamVersion(ctx, tx, events.MuteStream(muter, muted))
	if err != nil {
		return false, err
	}
	var ev events.Event = events.Unmuted{MuterID: muter, MutedID: muted, Following: following, MutedFollowers: followers}
	if on {
		ev = events.Muted{MuterID: muter, MutedID: muted, Following: following, MutedFollowers: followers}
	}
	if err := Append(ctx, tx, v, trace.metadata(muter), ev); err != nil {
		return false, err
	}
	return true, nil
}
