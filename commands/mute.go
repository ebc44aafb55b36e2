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

// changeMute is Mute (on true) and Unmute (false) inside a transaction the
// caller owns. Both users' rows are locked first, as a follow locks them:
// a follow, a mute of the same pair and a post of the muted account (which
// reads its row FOR SHARE) commit one after the other, so Following and
// MutedFollowers in the event are the pair's state at exactly this point of
// the log.
func changeMute(ctx context.Context, tx pgx.Tx, muter, muted int64, trace Trace, on bool) (bool, error) {
	c, err := newMuteChange(muter, muted, trace, on)
	if err != nil {
		return false, err
	}
	return c.inTx(ctx, tx)
}

// muteStatement and unmuteStatement are Mute and Unmute in one round trip:
// the lock and changeMuteSQL as one batch (pairChange.batch).
func muteStatement(ctx context.Context, db DB, cmd Mute) (bool, error) {
	c, err := newMuteChange(cmd.MuterID, cmd.MutedID, cmd.Trace, true)
	if err != nil {
		return false, err
	}
	return c.batch(ctx, db)
}

func unmuteStatement(ctx context.Context, db DB, cmd Unmute) (bool, error) {
	c, err := newMuteChange(cmd.MuterID, cmd.MutedID, cmd.Trace, false)
	if err != nil {
		return false, err
	}
	return c.batch(ctx, db)
}

// The change of a mutes row and the pair's event in one statement, run
// after the users' lock (changeFollowSQL's reasoning): the event only when
// `changed` returns a row, at the mute stream's next version, its payload
// events.Encode's with following and mutedFollowers read by the same
// statement.
const (
	muteChangedSQL   = `INSERT INTO mutes (muter_id, muted_id) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING 1`
	unmuteChangedSQL = `DELETE FROM mutes WHERE muter_id = $1 AND muted_id = $2 RETURNING 1`
	changeMuteSQL    = `
		WITH changed AS (%s),
		     ev AS (INSERT INTO events (event_id, stream_id, stream_version, type, payload, metadata)
		            SELECT $3, $4, (SELECT coalesce(max(stream_version), 0) + 1 FROM events WHERE stream_id = $4), $5,
		                   $6::jsonb || jsonb_build_object(
		                       'following', EXISTS (SELECT 1 FROM follows WHERE follower_id = $1 AND followee_id = $2),
		                       'mutedFollowers', (SELECT follower_count FROM users WHERE id = $2)),
		                   $7
		            FROM changed
		            RETURNING 1)
		SELECT count(*) FROM ev`
)

var (
	muteSQL   = fmt.Sprintf(changeMuteSQL, muteChangedSQL)
	unmuteSQL = fmt.Sprintf(changeMuteSQL, unmuteChangedSQL)
)

// newMuteChange validates the pair and is changeMuteSQL for it: it answers
// whether it changed anything.
func newMuteChange(muter, muted int64, trace Trace, on bool) (pairChange, error) {
	if err := validateID("muterId", muter); err != nil {
		return pairChange{}, err
	}
	if err := validateID("userId", muted); err != nil {
		return pairChange{}, err
	}
	if muter == muted {
		return pairChange{}, invalid("userId", "a user cannot mute themselves")
	}
	sql := unmuteSQL
	var ev events.Event = events.Unmuted{MuterID: muter, MutedID: muted}
	if on {
		sql = muteSQL
		ev = events.Muted{MuterID: muter, MutedID: muted}
	}
	eventID, payload, err := newEventRow(ev)
	if err != nil {
		return pairChange{}, err
	}
	meta, err := encodeMetadata(trace.metadata(muter))
	if err != nil {
		return pairChange{}, err
	}
	stream := ev.StreamID()
	result := func(row pgx.Row) (bool, error) {
		var n int
		if err := row.Scan(&n); err != nil {
			if isVersionConflict(err) {
				return false, fmt.Errorf("append to %s: %w", stream, ErrVersionConflict)
			}
			return false, fmt.Errorf("change mute %d -> %d: %w", muter, muted, err)
		}
		return n == 1, nil
	}
	return pairChange{
		sql:    sql,
		args:   []any{muter, muted, eventID, stream, ev.EventType(), payload, meta},
		ids:    []int64{muter, muted},
		result: result,
	}, nil
}
