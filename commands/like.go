package commands

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/events"
)

// Like makes UserID like PostID (a repost's id: its original). A post that
// does not exist or is deleted is ErrNotFound; one whose author blocks
// UserID is ErrBlockedByAuthor. Liking a post already liked succeeds and
// appends nothing. Its result reports whether it changed anything.
type Like struct {
	UserID int64
	PostID int64
	Trace  Trace `json:"-"`
}

// Actor implements Command: the liker.
func (c Like) Actor() int64 { return c.UserID }

// Unlike takes back UserID's like of PostID, deleted or not. Unliking
// what is not liked succeeds and appends nothing.
type Unlike struct {
	UserID int64
	PostID int64
	Trace  Trace `json:"-"`
}

// Actor implements Command: the liker.
func (c Unlike) Actor() int64 { return c.UserID }

// like is Like's work: the post's row locked FOR NO KEY UPDATE (actOn),
// which serialises the likes and unlikes of one post and its deletion,
// then the likes row (its primary key makes a repeat a no-op), the post's
// like count and PostLiked with that count. The event is inserted after
// the lock is taken (its position comes from that INSERT), so for one
// post position order is the lock order of all its count changes (likes,
// reposts, replies and their undos), which the counts read model relies
// on.
func like(ctx context.Context, tx pgx.Tx, cmd Like) (bool, error) {
	return changeLike(ctx, tx, cmd.UserID, cmd.PostID, cmd.Trace, true)
}

func unlike(ctx context.Context, tx pgx.Tx, cmd Unlike) (bool, error) {
	return changeLike(ctx, tx, cmd.UserID, cmd.PostID, cmd.Trace, false)
}

func changeLike(ctx context.Context, tx pgx.Tx, user, post int64, trace Trace, on bool) (bool, error) {
	if err := validateID("userId", user); err != nil {
		return false, err
	}
	if err := validateID("postId", post); err != nil {
		return false, err
	}
	t, err := actOn(ctx, tx, post, user, !on)
	if err != nil {
		return false, err
	}
	sql, delta := `DELETE FROM likes WHERE user_id = $1 AND post_id = $2 RETURNING true`, -1
	if on {
		sql, delta = `INSERT INTO likes (user_id, post_id) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING true`, +1
	}
	var changed bool
	err = tx.QueryRow(ctx, sql, user, t.ID).Scan(&changed)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("change like %d -> %d: %w", user, t.ID, err)
	}
	var likes int64
	var at time.Time
	if err := tx.QueryRow(ctx, `UPDATE posts SET like_count = like_count + $2 WHERE id = $1 RETURNING like_count, now()`, t.ID, delta).Scan(&likes, &at); err != nil {
		return false, fmt.Errorf("count like of %d: %w", t.ID, err)
	}
	at = at.UTC()
	var ev events.Event = events.PostUnliked{LikerID: user, PostID: t.ID, AuthorID: t.AuthorID, UnlikedAt: at, Likes: likes}
	if on {
		ev = events.PostLiked{LikerID: user, PostID: t.ID, AuthorID: t.AuthorID, LikedAt: at, Likes: likes}
	}
	return true, appendToPair(ctx, tx, trace.metadata(user), ev)
}
