package commands

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// postTarget is a post a command acts on (a repost, a like) or refers to
// (a reply's parent, a quoted post), as resolveTarget found it.
type postTarget struct {
	ID       int64
	AuthorID int64
	// Root is the thread's root: the post's reply_root, or the post
	// itself when it is no reply.
	Root    int64
	Deleted bool
	// BlocksActor: the post's author blocks the command's actor.
	BlocksActor bool
}

// Row locks resolveTarget takes on the post: lockForCount for a command
// that changes one of its counts (a reply, a repost, a like), lockToRead
// for one that only needs it to stay (a quote). Both wait for a deletion
// of the post in flight (DeletePost locks FOR UPDATE) and then see it
// deleted; neither waits for the other.
const (
	lockForCount = "NO KEY UPDATE"
	lockToRead   = "KEY SHARE"
)

// resolveTargetSQL finds the post of an id the client gave: a post's, or
// a repost's (post and repost ids are Snowflake ids of one sequence), in
// which case the repost's original. It locks the post's row as %s and
// says whether its author blocks the actor ($2).
const resolveTargetSQL = `SELECT p.id, p.author_id, coalesce(p.reply_root, p.id), p.deleted,
	       EXISTS (SELECT 1 FROM blocks WHERE blocker_id = p.author_id AND blocked_id = $2)
	FROM posts p
	WHERE p.id = coalesce((SELECT post_id FROM reposts WHERE id = $1), $1)
	FOR %s OF p`

// resolveTarget returns the post id names (or the original of the repost
// it names) with the row lock lock, and found=false when there is none.
func resolveTarget(ctx context.Context, tx pgx.Tx, id, actor int64, lock string) (t postTarget, found bool, err error) {
	err = tx.QueryRow(ctx, fmt.Sprintf(resolveTargetSQL, lock), id, actor).Scan(&t.ID, &t.AuthorID, &t.Root, &t.Deleted, &t.BlocksActor)
	if errors.Is(err, pgx.ErrNoRows) {
		return postTarget{}, false, nil
	}
	if err != nil {
		return postTarget{}, false, fmt.Errorf("read post %d: %w", id, err)
	}
	return t, true, nil
}

// referTo resolves the post a new post refers to as field (replyTo,
// quoteOf): one missing or deleted is ErrPostUnavailable, one whose author
// blocks the actor ErrBlockedByAuthor.
func referTo(ctx context.Context, tx pgx.Tx, field string, id, actor int64, lock string) (postTarget, error) {
	t, found, err := resolveTarget(ctx, tx, id, actor, lock)
	switch {
	case err != nil:
		return postTarget{}, err
	case !found || t.Deleted:
		return postTarget{}, fmt.Errorf("%s %d: %w", field, id, ErrPostUnavailable)
	case t.BlocksActor:
		return postTarget{}, fmt.Errorf("%s %d: %w", field, id, ErrBlockedByAuthor)
	}
	return t, nil
}

// actOn resolves the post a repost or like acts on (the path's id): one
// missing is ErrNotFound; unless undo, one deleted is ErrNotFound too, and
// one whose author blocks the actor ErrBlockedByAuthor. An undo (unrepost,
// unlike) acts on a deleted post too, so that its actor can take back
// what they did, and whatever the author's blocks.
func actOn(ctx context.Context, tx pgx.Tx, id, actor int64, undo bool) (postTarget, error) {
	t, found, err := resolveTarget(ctx, tx, id, actor, lockForCount)
	switch {
	case err != nil:
		return postTarget{}, err
	case !found || (t.Deleted && !undo):
		return postTarget{}, fmt.Errorf("post %d: %w", id, ErrNotFound)
	case t.BlocksActor && !undo:
		return postTarget{}, fmt.Errorf("post %d: %w", id, ErrBlockedByAuthor)
	}
	return t, nil
}
