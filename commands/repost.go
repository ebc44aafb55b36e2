package commands

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/snowflake"
)

// Repost makes UserID repost PostID: a feed entry of its own, with a
// Snowflake id and time of its own, that points at the original. PostID
// may be a repost's id: the original is reposted. A post that does not
// exist or is deleted is ErrNotFound; one whose author blocks UserID is
// ErrBlockedByAuthor. Reposting a post already reposted succeeds and
// appends nothing. Its result reports whether it changed anything.
type Repost struct {
	UserID int64
	PostID int64
	Trace  Trace `json:"-"`
}

// Actor implements Command: the reposter.
func (c Repost) Actor() int64 { return c.UserID }

// Unrepost undoes UserID's repost of PostID (or of the original of the
// repost PostID names). It acts on a deleted original too. Undoing what
// is not reposted succeeds and appends nothing.
type Unrepost struct {
	UserID int64
	PostID int64
	Trace  Trace `json:"-"`
}

// Actor implements Command: the reposter.
func (c Unrepost) Actor() int64 { return c.UserID }

// repost is Repost's work. The reposter's row is locked FOR SHARE first,
// as a post's author's is, so that the follower count in PostReposted
// agrees with the commit order of the log (the reposter's followers get
// the repost as they would a post); then the original's row FOR NO KEY
// UPDATE (actOn), which serialises the reposts and undos of one post and
// its deletion. The reposts row's uniqueness makes a repeat a no-op. The
// event is inserted after that lock is taken, so for one post position
// order is the lock order of all its count changes (as for likes).
func repost(ids *snowflake.Generator) TxHandler[Repost, bool] {
	return func(ctx context.Context, tx pgx.Tx, cmd Repost) (bool, error) {
		if err := validateID("userId", cmd.UserID); err != nil {
			return false, err
		}
		if err := validateID("postId", cmd.PostID); err != nil {
			return false, err
		}
		var followers int64
		err := tx.QueryRow(ctx, `SELECT follower_count FROM users WHERE id = $1 FOR SHARE`, cmd.UserID).Scan(&followers)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, fmt.Errorf("user %d: %w", cmd.UserID, ErrNotFound)
		}
		if err != nil {
			return false, fmt.Errorf("lock user %d: %w", cmd.UserID, err)
		}
		t, err := actOn(ctx, tx, cmd.PostID, cmd.UserID, false)
		if err != nil {
			return false, err
		}
		id, at := ids.Next()
		tag, err := tx.Exec(ctx, `INSERT INTO reposts (id, user_id, post_id, created_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (user_id, post_id) DO NOTHING`, id, cmd.UserID, t.ID, at)
		if err != nil {
			return false, fmt.Errorf("insert repost of %d: %w", t.ID, err)
		}
		if tag.RowsAffected() == 0 {
			return false, nil
		}
		var reposts int64
		if err := tx.QueryRow(ctx, `UPDATE posts SET repost_count = repost_count + 1 WHERE id = $1 RETURNING repost_count`, t.ID).Scan(&reposts); err != nil {
			return false, fmt.Errorf("count repost of %d: %w", t.ID, err)
		}
		ev := events.PostReposted{RepostID: id, ReposterID: cmd.UserID, PostID: t.ID, AuthorID: t.AuthorID, CreatedAt: at,
			ReposterFollowers: followers, Reposts: reposts}
		return true, appendToPair(ctx, tx, cmd.Trace.metadata(cmd.UserID), ev)
	}
}

// unrepost is Unrepost's work: the original's row is locked as for a
// repost, then the reposts row deleted.
func unrepost(ctx context.Context, tx pgx.Tx, cmd Unrepost) (bool, error) {
	if err := validateID("userId", cmd.UserID); err != nil {
		return false, err
	}
	if err := validateID("postId", cmd.PostID); err != nil {
		return false, err
	}
	t, err := actOn(ctx, tx, cmd.PostID, cmd.UserID, true)
	if err != nil {
		return false, err
	}
	var id int64
	err = tx.QueryRow(ctx, `DELETE FROM reposts WHERE user_id = $1 AND post_id = $2 RETURNING id`, cmd.UserID, t.ID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete repost of %d: %w", t.ID, err)
	}
	var reposts int64
	var at time.Time
	if err := tx.QueryRow(ctx, `UPDATE posts SET repost_count = repost_count - 1 WHERE id = $1 RETURNING repost_count, now()`, t.ID).Scan(&reposts, &at); err != nil {
		return false, fmt.Errorf("count repost of %d: %w", t.ID, err)
	}
	ev := events.PostUnreposted{RepostID: id, ReposterID: cmd.UserID, PostID: t.ID, AuthorID: t.AuthorID, UnrepostedAt: at.UTC(), Reposts: reposts}
	return true, appendToPair(ctx, tx, cmd.Trace.metadata(cmd.UserID), ev)
}

// appendToPair appends ev at its pair stream's next version (a repost's
// or a like's: its versions alternate the change and its undo). The
// caller holds the lock that serialises the pair's changes (the post's
// row).
func appendToPair(ctx context.Context, tx pgx.Tx, meta events.Metadata, ev events.Event) error {
	v, err := StreamVersion(ctx, tx, ev.StreamID())
	if err != nil {
		return err
	}
	return Append(ctx, tx, v, meta, ev)
}
