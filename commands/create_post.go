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

// CreatePost publishes a post by AuthorID.
type CreatePost struct {
	AuthorID int64
	Content  string
	Trace    Trace `json:"-"`
}

// Actor implements Command: the author.
func (c CreatePost) Actor() int64 { return c.AuthorID }

// Post is a post as the write side created it. Its JSON form is what an
// idempotency key stores for a replay: renaming a tag breaks the replay of
// keys stored before.
type Post struct {
	ID       int64  `json:"id"`
	AuthorID int64  `json:"authorId"`
	Content  string `json:"content"`
	// CreatedAt is the Snowflake id's millisecond, UTC: the time that
	// orders feeds.
	CreatedAt time.Time `json:"createdAt"`
	// EditedAt is the last edit's time, nil for a post never edited.
	EditedAt *time.Time `json:"editedAt,omitempty"`
	// Version is the post's stream version: 1 as created, one more per
	// edit (0 in results stored before edits existed: read it as 1).
	Version int64 `json:"version,omitempty"`
}

// createPost is CreatePost's work. It reads the author's follower count
// with FOR SHARE, so a concurrent follow of the author (which updates that
// row) commits either wholly before or wholly after this post, and the
// count recorded in PostCreated agrees with the commit order of the log.
func createPost(cfg Config, ids *snowflake.Generator) TxHandler[CreatePost, Post] {
	return func(ctx context.Context, tx pgx.Tx, cmd CreatePost) (Post, error) {
		if err := validateID("authorId", cmd.AuthorID); err != nil {
			return Post{}, err
		}
		if err := validateText("content", cmd.Content, cfg.MaxContentChars); err != nil {
			return Post{}, err
		}
		id, at := ids.Next()
		p := Post{ID: id, AuthorID: cmd.AuthorID, Content: cmd.Content, CreatedAt: at, Version: 1}
		// One round trip: lock the author's row, insert the post only if
		// the author exists, and read the follower count under the lock.
		var followers int64
		err := tx.QueryRow(ctx, `
			WITH author AS (SELECT follower_count FROM users WHERE id = $2 FOR SHARE),
			     post AS (INSERT INTO posts (id, author_id, content, created_at)
			              SELECT $1, $2, $3, $4 FROM author RETURNING id)
			SELECT follower_count FROM author, post`,
			p.ID, p.AuthorID, p.Content, p.CreatedAt).Scan(&followers)
		if errors.Is(err, pgx.ErrNoRows) {
			return Post{}, fmt.Errorf("author %d: %w", cmd.AuthorID, ErrNotFound)
		}
		if err != nil {
			return Post{}, fmt.Errorf("insert post: %w", err)
		}
		meta := cmd.Trace.metadata(cmd.AuthorID)
		ev := events.PostCreated{PostID: p.ID, AuthorID: p.AuthorID, Content: p.Content, CreatedAt: p.CreatedAt, AuthorFollowers: followers}
		if err := Append(ctx, tx, 0, meta, ev); err != nil {
			return Post{}, err
		}
		return p, nil
	}
}
