package commands

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/events"
)

// DeletePost deletes a post; only its author may. Its result reports
// whether this command deleted the post (false: it was already deleted,
// nothing was appended).
type DeletePost struct {
	ActorID int64
	PostID  int64
	Trace   Trace `json:"-"`
}

// Actor implements Command: the user deleting.
func (c DeletePost) Actor() int64 { return c.ActorID }

// deletePost is DeletePost's work: PostDeleted at the version after the
// post's last (2 for a post never edited, posts.version + 1).
// The post row is locked first, so concurrent deletes serialise and the
// later ones see it deleted and append nothing. A reply's parent counts
// one reply less. Its reposts and likes stay (readers hide what points at
// a deleted post), and so do the replies and quotes of it.
//
// A deleted reply's PostDeleted carries the parent's reply count after
// it. The UPDATE of the parent's count locks the parent's row (as FOR NO
// KEY UPDATE does) until the commit, and the event is appended after it,
// so for the parent, as for every change of a post's counts (a reply
// created, a like, a repost and their undos lock the row before their
// INSERT too), position order is the order of its counts.
func deletePost(ctx context.Context, tx pgx.Tx, cmd DeletePost) (bool, error) {
	if err := validateID("actorId", cmd.ActorID); err != nil {
		return false, err
	}
	if err := validateID("postId", cmd.PostID); err != nil {
		return false, err
	}
	var author, version int64
	var replyTo *int64
	var deleted bool
	err := tx.QueryRow(ctx, `SELECT author_id, deleted, version, reply_to FROM posts WHERE id = $1 FOR UPDATE`, cmd.PostID).Scan(&author, &deleted, &version, &replyTo)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("post %d: %w", cmd.PostID, ErrNotFound)
	}
	if err != nil {
		return false, fmt.Errorf("read post %d: %w", cmd.PostID, err)
	}
	if author != cmd.ActorID {
		return false, fmt.Errorf("delete post %d of user %d: %w", cmd.PostID, author, ErrForbidden)
	}
	if deleted {
		return false, nil
	}
	var at time.Time
	if err := tx.QueryRow(ctx, `UPDATE posts SET deleted = true, deleted_at = now() WHERE id = $1 RETURNING deleted_at`, cmd.PostID).Scan(&at); err != nil {
		return false, fmt.Errorf("mark post %d deleted: %w", cmd.PostID, err)
	}
	ev := events.PostDeleted{PostID: cmd.PostID, AuthorID: author, DeletedAt: at.UTC()}
	if replyTo != nil {
		ev.ReplyTo = *replyTo
		var n int64
		if err := tx.QueryRow(ctx, `UPDATE posts SET reply_count = reply_count - 1 WHERE id = $1 RETURNING reply_count`, *replyTo).Scan(&n); err != nil {
			return false, fmt.Errorf("count reply to %d: %w", *replyTo, err)
		}
		ev.ParentReplies = &n
	}
	meta := cmd.Trace.metadata(cmd.ActorID)
	if err := Append(ctx, tx, version, meta, ev); err != nil {
		return false, err
	}
	return true, nil
}
