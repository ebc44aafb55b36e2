package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/snowflake"
)

// CreatePost publishes a post by AuthorID: a reply when ReplyTo names
// its parent, a quote when QuoteOf names the quoted post (both at once:
// a reply that quotes), with up to MaxMedia attachments. Either id may be
// a repost's, which stands for its original. A parent or quoted post that
// does not exist or is deleted is ErrPostUnavailable; one whose author
// blocks AuthorID is ErrBlockedByAuthor.
type CreatePost struct {
	AuthorID int64
	Content  string
	ReplyTo  int64          `json:",omitempty"`
	QuoteOf  int64          `json:",omitempty"`
	Media    []events.Media `json:",omitempty"`
	Trace    Trace          `json:"-"`
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
	// ReplyTo is the parent of a reply (nil for a post that is none) and
	// ReplyRoot its thread's root.
	ReplyTo   *PostRef `json:"replyTo,omitempty"`
	ReplyRoot int64    `json:"replyRoot,omitempty"`
	// QuoteOf is the quoted post of a quote (0: none), QuoteAuthor its
	// author.
	QuoteOf     int64 `json:"quoteOf,omitempty"`
	QuoteAuthor int64 `json:"quoteAuthor,omitempty"`
	// Media are the post's attachments.
	Media []events.Media `json:"media,omitempty"`
}

// PostRef names a post and its author.
type PostRef struct {
	ID       int64 `json:"id"`
	AuthorID int64 `json:"authorId"`
}

// event is the post's PostCreated, with the author's follower count.
func (p Post) event(followers int64) events.PostCreated {
	ev := events.PostCreated{PostID: p.ID, AuthorID: p.AuthorID, Content: p.Content, CreatedAt: p.CreatedAt, AuthorFollowers: followers,
		ReplyRoot: p.ReplyRoot, QuoteOf: p.QuoteOf, QuoteAuthor: p.QuoteAuthor, Media: p.Media}
	if p.ReplyTo != nil {
		ev.ReplyTo, ev.ReplyToAuthor = p.ReplyTo.ID, p.ReplyTo.AuthorID
	}
	return ev
}

// mediaColumn is the posts row's media: the attachments' JSON, NULL for
// none.
func mediaColumn(media []events.Media) (*string, error) {
	if len(media) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(media)
	if err != nil {
		return nil, fmt.Errorf("encode media: %w", err)
	}
	s := string(b)
	return &s, nil
}

// refersToPost reports whether cmd is a reply or a quote: those run as a
// transaction (the referred posts are locked and checked first), a plain
// post as createPostStatement.
func refersToPost(cmd CreatePost) bool { return cmd.ReplyTo != 0 || cmd.QuoteOf != 0 }

// createPost is CreatePost's work. It reads the author's follower count
// with FOR SHARE, so a concurrent follow of the author (which updates that
// row) commits either wholly before or wholly after this post, and the
// count recorded in PostCreated agrees with the commit order of the log.
// A reply or quote then locks the post it refers to (createReferring).
func createPost(cfg Config, ids *snowflake.Generator) TxHandler[CreatePost, Post] {
	return func(ctx context.Context, tx pgx.Tx, cmd CreatePost) (Post, error) {
		p, err := newPost(cfg, ids, cmd)
		if err != nil {
			return Post{}, err
		}
		media, err := mediaColumn(p.Media)
		if err != nil {
			return Post{}, err
		}
		var followers int64
		var parentReplies *int64
		if refersToPost(cmd) {
			followers, parentReplies, err = createReferring(ctx, tx, &p, cmd, media)
		} else {
			// One round trip: lock the author's row, insert the post only
			// if the author exists, and read the follower count under the
			// lock.
			err = tx.QueryRow(ctx, `
				WITH author AS (SELECT follower_count FROM users WHERE id = $2 FOR SHARE),
				     post AS (INSERT INTO posts (id, author_id, content, created_at, media)
				              SELECT $1, $2, $3, $4, $5 FROM author RETURNING id)
				SELECT follower_count FROM author, post`,
				p.ID, p.AuthorID, p.Content, p.CreatedAt, media).Scan(&followers)
			if errors.Is(err, pgx.ErrNoRows) {
				err = fmt.Errorf("author %d: %w", cmd.AuthorID, ErrNotFound)
			} else if err != nil {
				err = fmt.Errorf("insert post: %w", err)
			}
		}
		if isDuplicatePostID(err) {
			return Post{}, duplicateID(ids, p.ID)
		}
		if err != nil {
			return Post{}, err
		}
		ev := p.event(followers)
		ev.ParentReplies = parentReplies
		if err := Append(ctx, tx, 0, cmd.Trace.metadata(cmd.AuthorID), ev); err != nil {
			return Post{}, err
		}
		return p, nil
	}
}

// createReferring inserts a reply or a quote, p, and returns the author's
// follower count and, for a reply, the parent's reply count after it.
// The author's row is locked first (FOR SHARE, as for any post), then the
// parent FOR NO KEY UPDATE (its reply count goes up) and the quoted post
// FOR KEY SHARE: a deletion of either in flight commits before (and the
// post is refused) or waits for this one.
//
// The parent's lock is held from before its count changes to the commit,
// and the caller appends PostCreated after it, so the event's position
// (taken at its INSERT) is above those of every earlier change of the
// parent's counts (reply, like, repost and their undos, which all lock
// the row the same way before their INSERT): for one post, position
// order is the order of its counts, which the counts read model relies
// on (readmodel.Engagement).
func createReferring(ctx context.Context, tx pgx.Tx, p *Post, cmd CreatePost, media *string) (int64, *int64, error) {
	var followers int64
	err := tx.QueryRow(ctx, `SELECT follower_count FROM users WHERE id = $1 FOR SHARE`, p.AuthorID).Scan(&followers)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil, fmt.Errorf("author %d: %w", cmd.AuthorID, ErrNotFound)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("lock author %d: %w", cmd.AuthorID, err)
	}
	var replyTo, replyToAuthor, replyRoot, quoteOf, quoteAuthor, parentReplies *int64
	if cmd.ReplyTo != 0 {
		t, err := referTo(ctx, tx, "replyTo", cmd.ReplyTo, p.AuthorID, lockForCount)
		if err != nil {
			return 0, nil, err
		}
		var n int64
		if err := tx.QueryRow(ctx, `UPDATE posts SET reply_count = reply_count + 1 WHERE id = $1 RETURNING reply_count`, t.ID).Scan(&n); err != nil {
			return 0, nil, fmt.Errorf("count reply to %d: %w", t.ID, err)
		}
		parentReplies = &n
		p.ReplyTo, p.ReplyRoot = &PostRef{ID: t.ID, AuthorID: t.AuthorID}, t.Root
		replyTo, replyToAuthor, replyRoot = &t.ID, &t.AuthorID, &t.Root
	}
	if cmd.QuoteOf != 0 {
		t, err := referTo(ctx, tx, "quoteOf", cmd.QuoteOf, p.AuthorID, lockToRead)
		if err != nil {
			return 0, nil, err
		}
		p.QuoteOf, p.QuoteAuthor = t.ID, t.AuthorID
		quoteOf, quoteAuthor = &t.ID, &t.AuthorID
	}
	_, err = tx.Exec(ctx, `INSERT INTO posts (id, author_id, content, created_at, media, reply_to, reply_to_author, reply_root, quote_of, quote_author)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		p.ID, p.AuthorID, p.Content, p.CreatedAt, media, replyTo, replyToAuthor, replyRoot, quoteOf, quoteAuthor)
	if err != nil {
		return 0, nil, fmt.Errorf("insert post: %w", err)
	}
	return followers, parentReplies, nil
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
	if cmd.ReplyTo < 0 {
		return Post{}, invalid("replyTo", "must be a positive id")
	}
	if cmd.QuoteOf < 0 {
		return Post{}, invalid("quoteOf", "must be a positive id")
	}
	if err := validateMedia(cmd.Media); err != nil {
		return Post{}, err
	}
	id, at := ids.Next()
	return Post{ID: id, AuthorID: cmd.AuthorID, Content: cmd.Content, CreatedAt: at, Version: 1, Media: cmd.Media}, nil
}

// createPostStatement is createPost of a plain post (no reply, no quote:
// refersToPost) as one autocommitted statement: it
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
		ev := p.event(0)
		eventID, payload, err := newEventRow(ev)
		if err != nil {
			return Post{}, err
		}
		meta, err := encodeMetadata(cmd.Trace.metadata(cmd.AuthorID))
		if err != nil {
			return Post{}, err
		}
		media, err := mediaColumn(p.Media)
		if err != nil {
			return Post{}, err
		}
		stream := ev.StreamID()
		var followers int64
		err = db.QueryRow(ctx, `
			WITH author AS (SELECT follower_count FROM users WHERE id = $2 FOR SHARE),
			     post AS (INSERT INTO posts (id, author_id, content, created_at, media)
			              SELECT $1, $2, $3, $4, $10 FROM author RETURNING id),
			     ev AS (INSERT INTO events (event_id, stream_id, stream_version, type, payload, metadata)
			            SELECT $5, $6, 1, $7, $8::jsonb || jsonb_build_object('authorFollowers', author.follower_count), $9
			            FROM author, post
			            RETURNING 1)
			SELECT author.follower_count FROM author, ev`,
			p.ID, p.AuthorID, p.Content, p.CreatedAt, eventID, stream, ev.EventType(), payload, meta, media).Scan(&followers)
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
