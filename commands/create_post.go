package commands

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
		p, err := newPost(cfg, ids, cmd)
		if err != nil {
			return Post{}, err
		}
		// One round trip: lock the author's row, insert the post only if
		// the author exists, and read the follower count under the lock.
		var followers int64
		err = tx.QueryRow(ctx, `
			WITH author AS (SELECT follower_count FROM users WHERE id = $2 FOR SHARE),
			     post AS (INSERT INTO posts (id, author_id, content, created_at)
			              SELECT $1, $2, $3, $4 FROM author RETURNING id)
			SELECT follower_count FROM author, post`,
			p.ID, p.AuthorID, p.Content, p.CreatedAt).Scan(&followers)
		if errors.Is(err, pgx.ErrNoRows) {
			return Post{}, fmt.Errorf("author %d: %w", cmd.AuthorID, ErrNotFound)
		}
		if isDuplicatePostID(err) {
			return Post{}, duplicateID(ids, p.ID)
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

// isDuplicatePostID reports an insert of a post id that exists: another
// process issued the same id (two generators on one node id, which node
// leases prevent, or a clock stepped back). The command runs again, with a
// new id.
func isDuplicatePostID(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "23505" && pg.ConstraintName == "posts_pkey"
}

// duplicateID is the retryable error of a post id that exists; ids skips
// ahead, so that its next id is unlikely to be taken too.
func duplicateID(ids *snowflake.Generator, id int64) error {
	ids.Skip()
	return fmt.Errorf("post id %d exists: %w", id, ErrVersionConflict)
}

// newPost validates cmd and gives the post its id and time.
func newPost(cfg Config, ids *snowflake.Generator, cmd CreatePost) (Post, error) {
	if err := validateID("authorId", cmd.AuthorID); err != nil {
		return Post{}, err
	}
	if err := validateText("content", cmd.Content, cfg.MaxContentChars); err != nil {
		return Post{}, err
	}
	id, at := ids.Next()
	return Post{ID: id, AuthorID: cmd.AuthorID, Content: cmd.Content, CreatedAt: at, Version: 1}, nil
}

// createPostStatement is createPost as one autocommitted statement: it
// locks the author's row FOR SHARE, inserts the post only if the author
// exists, and appends PostCreated at version 1 of the new post's stream
// with the follower count read under that lock, all or nothing. The
// payload is events.Encode's with authorFollowers set in SQL: payload is
// jsonb, so the stored value is the same as createPost's. Append's guard
// against a stale head is not needed at version 1: a stream that has any
// event has a version 1, so the unique (stream_id, stream_version)
// constraint fails the whole statement instead of leaving a post without
// its event.
func createPostStatement(cfg Config, ids *snowflake.Generator) StmtHandler[CreatePost, Post] {
	return func(ctx context.Context, db DB, cmd CreatePost) (Post, error) {
		p, err := newPost(cfg, ids, cmd)
		if err != nil {
			return Post{}, err
		}
		ev := events.PostCreated{PostID: p.ID, AuthorID: p.AuthorID, Content: p.Content, CreatedAt: p.CreatedAt}
		eventID, payload, err := newEventRow(ev)
		if err != nil {
			return Post{}, err
		}
		meta, err := encodeMetadata(cmd.Trace.metadata(cmd.AuthorID))
		if err != nil {
			return Post{}, err
		}
		stream := ev.StreamID()
		var followers int64
		err = db.QueryRow(ctx, `
			WITH author AS (SELECT follower_count FROM users WHERE id = $2 FOR SHARE),
			     post AS (INSERT INTO posts (id, author_id, content, created_at)
			              SELECT $1, $2, $3, $4 FROM author RETURNING id),
			     ev AS (INSERT INTO events (event_id, stream_id, stream_version, type, payload, metadata)
			            SELECT $5, $6, 1, $7, $8::jsonb || jsonb_build_object('authorFollowers', author.follower_count), $9
			            FROM author, post
			            RETURNING 1)
			SELECT author.follower_count FROM author, ev`,
			p.ID, p.AuthorID, p.Content, p.CreatedAt, eventID, stream, ev.EventType(), payload, meta).Scan(&followers)
		if errors.Is(err, pgx.ErrNoRows) {
			return Post{}, fmt.Errorf("author %d: %w", cmd.AuthorID, ErrNotFound)
		}
		if err != nil {
			if isDuplicatePostID(err) {
				return Post{}, duplicateID(ids, p.ID)
			}
			if isVersionConflict(err) {
				return Post{}, fmt.Errorf("append to %s at version 0: %w", stream, ErrVersionConflict)
			}
			return Post{}, fmt.Errorf("create post: %w", err)
		}
		return p, nil
	}
}
