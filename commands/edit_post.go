package commands

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/events"
)

// EditPost replaces the content of a post; only its author may, and only
// while it is not deleted. IfVersion, when not 0, is the version the
// caller last saw (HTTP If-Match): the edit is refused with
// ErrStaleVersion when the post is at another one.
type EditPost struct {
	ActorID   int64
	PostID    int64
	Content   string
	IfVersion int64
	Trace     Trace `json:"-"`
}

// Actor implements Command: the user editing.
func (c EditPost) Actor() int64 { return c.ActorID }

// editPost is EditPost's work: the posts row's content, version and
// edited_at, and PostEdited at the post stream's next version (the row's
// version + 1). The row is locked first, so concurrent edits (and an edit
// and a delete) serialise, each seeing the one before. The content rules
// are a new post's. Content equal to the current one appends nothing and
// returns the post as it is (a repeated edit is a no-op).
func editPost(cfg Config) TxHandler[EditPost, Post] {
	return func(ctx context.Context, tx pgx.Tx, cmd EditPost) (Post, error) {
		if err := validateID("actorId", cmd.ActorID); err != nil {
			return Post{}, err
		}
		if err := validateID("postId", cmd.PostID); err != nil {
			return Post{}, err
		}
		if cmd.IfVersion < 0 {
			return Post{}, invalid("ifVersion", "must be a positive version")
		}
		if err := validateText("content", cmd.Content, cfg.MaxContentChars); err != nil {
			return Post{}, err
		}
		var (
			p                                         Post
			deleted                                   bool
			edited                                    *time.Time
			replyTo, replyToAuthor, replyRoot, quoted *int64
			quoteAuthor                               *int64
		)
		err := tx.QueryRow(ctx, `SELECT author_id, content, created_at, deleted, version, edited_at,
			       reply_to, reply_to_author, reply_root, quote_of, quote_author, media
			FROM posts WHERE id = $1 FOR UPDATE`,
			cmd.PostID).Scan(&p.AuthorID, &p.Content, &p.CreatedAt, &deleted, &p.Version, &edited,
			&replyTo, &replyToAuthor, &replyRoot, &quoted, &quoteAuthor, &p.Media)
		if errors.Is(err, pgx.ErrNoRows) {
			return Post{}, fmt.Errorf("post %d: %w", cmd.PostID, ErrNotFound)
		}
		if err != nil {
			return Post{}, fmt.Errorf("read post %d: %w", cmd.PostID, err)
		}
		p.ID = cmd.PostID
		p.CreatedAt = p.CreatedAt.UTC()
		if replyTo != nil && replyToAuthor != nil && replyRoot != nil {
			p.ReplyTo, p.ReplyRoot = &PostRef{ID: *replyTo, AuthorID: *replyToAuthor}, *replyRoot
		}
		if quoted != nil && quoteAuthor != nil {
			p.QuoteOf, p.QuoteAuthor = *quoted, *quoteAuthor
		}
		if edited != nil {
			t := edited.UTC()
			p.EditedAt = &t
		}
		switch {
		case deleted:
			return Post{}, fmt.Errorf("post %d is deleted: %w", cmd.PostID, ErrNotFound)
		case p.AuthorID != cmd.ActorID:
			return Post{}, fmt.Errorf("edit post %d of user %d: %w", cmd.PostID, p.AuthorID, ErrForbidden)
		case cmd.IfVersion != 0 && cmd.IfVersion != p.Version:
			return Post{}, fmt.Errorf("post %d is at version %d, not %d: %w", cmd.PostID, p.Version, cmd.IfVersion, ErrStaleVersion)
		case cmd.Content == p.Content:
			return p, nil
		}
		prev := p.Version
		var at time.Time
		err = tx.QueryRow(ctx, `UPDATE posts SET content = $2, version = version + 1, edited_at = now() WHERE id = $1 RETURNING version, edited_at`,
			cmd.PostID, cmd.Content).Scan(&p.Version, &at)
		if err != nil {
			return Post{}, fmt.Errorf("edit post %d: %w", cmd.PostID, err)
		}
		at = at.UTC()
		p.Content, p.EditedAt = cmd.Content, &at
		meta := cmd.Trace.metadata(cmd.ActorID)
		ev := events.PostEdited{PostID: p.ID, AuthorID: p.AuthorID, Content: p.Content, Version: p.Version, EditedAt: at}
		if err := Append(ctx, tx, prev, meta, ev); err != nil {
			return Post{}, err
		}
		return p, nil
	}
}
