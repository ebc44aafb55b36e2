package readmodel

import (
	"context"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
)

// The celebrity band (Policy.CelebrityBand) makes an author's state a
// function of the history of their follower count, not of the count
// alone: inside the band the state is the one the author's newest follow
// event outside it decided. Every follow event carries the followee's
// count after it, and counts move by one per event, so that newest event
// is found in the log: the same answer for the live projectors, a
// redelivery, a rebuild and the query side, all of which read it from
// PostgreSQL's events (migration 014's index) in position order, which for
// one followee's follow events and posts is their commit order (a follow
// locks the followee's row, a post its author's, before appending).

// celebrityBeforeSQL is whether the newest follow event of $1 before
// position $2 whose count lies outside the band [$3, $4) says celebrity
// ($4 or more); no row: none before, the author started at 0 followers.
// A backward scan of events_followee_position_idx from $2 that reads the
// events inside the band until the first outside it.
const celebrityBeforeSQL = `SELECT (payload->>'followeeFollowers')::bigint >= $4 FROM events
WHERE type IN ('user.followed.v1', 'user.unfollowed.v1') AND (payload->>'followeeId')::bigint = $1 AND position < $2
  AND NOT ((payload->>'followeeFollowers')::bigint >= $3 AND (payload->>'followeeFollowers')::bigint < $4)
ORDER BY (payload->>'followeeId')::bigint DESC, position DESC LIMIT 1`

// CelebrityBefore reports whether author was a celebrity just before the
// event at position of the log (the events table's position; 0 or less:
// after every event): the state their newest follow event before it whose
// count is outside the band decided. Without a band that is the newest
// follow event's count.
func CelebrityBefore(ctx context.Context, db VersionQuerier, p Policy, author, position int64) (bool, error) {
	if position <= 0 {
		position = math.MaxInt64
	}
	rows, err := db.Query(ctx, celebrityBeforeSQL, author, position, p.CelebrityThreshold-p.CelebrityBand, p.CelebrityThreshold)
	if err != nil {
		return false, fmt.Errorf("read the celebrity state of %d: %w", author, err)
	}
	celeb, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[bool])
	if err == pgx.ErrNoRows {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the celebrity state of %d: %w", author, err)
	}
	return celeb, nil
}

// CelebrityAt reports whether author is a celebrity at the event at
// position that carries their follower count followers (a post's
// AuthorFollowers; a follow event's FolloweeFollowers, the count after
// it): the count decides outside the band (Policy.Decided, no query);
// inside it the event decides nothing, and the state is the one before it.
func CelebrityAt(ctx context.Context, db VersionQuerier, p Policy, author, followers, position int64) (bool, error) {
	if c, ok := p.Decided(followers); ok {
		return c, nil
	}
	return CelebrityBefore(ctx, db, p, author, position)
}

// celebritiesNowSQL is the celebrities of PostgreSQL's present: the
// authors at or over the threshold ($1), and those inside the band
// [$2, $1) whose newest follow event outside it was at or over the
// threshold. One statement, one snapshot; the second part reads the few
// authors inside the band (none without one).
const celebritiesNowSQL = `SELECT id FROM users WHERE follower_count >= $1
UNION ALL
SELECT u.id FROM users u WHERE u.follower_count >= $2 AND u.follower_count < $1
  AND (SELECT (e.payload->>'followeeFollowers')::bigint >= $1 FROM events e
       WHERE e.type IN ('user.followed.v1', 'user.unfollowed.v1') AND (e.payload->>'followeeId')::bigint = u.id
         AND NOT ((e.payload->>'followeeFollowers')::bigint >= $2 AND (e.payload->>'followeeFollowers')::bigint < $1)
       ORDER BY (e.payload->>'followeeId')::bigint DESC, e.position DESC LIMIT 1)`

// LoadCelebrities reads the celebrities by p from PostgreSQL now: what the
// followers projector's moves of the set converge to (the query side's
// rebuild of a set found without ~built). A sequential scan of users.
func LoadCelebrities(ctx context.Context, db VersionQuerier, p Policy) ([]int64, error) {
	rows, err := db.Query(ctx, celebritiesNowSQL, p.CelebrityThreshold, p.CelebrityThreshold-p.CelebrityBand)
	if err != nil {
		return nil, fmt.Errorf("read celebrities: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("read celebrities: %w", err)
	}
	return ids, nil
}
