package queries

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/readmodel"
)

// NewPost is a post the write side has just committed, as the api's
// AfterPostCreated hook reports it.
type NewPost struct {
	ID        int64
	AuthorID  int64
	Content   string
	CreatedAt time.Time
	// A reply's parent and its author, a quote's quoted post and its
	// author, the media: as the command committed them (zero: none).
	ReplyTo, ReplyToAuthor int64
	QuoteOf, QuoteAuthor   int64
	Media                  []events.Media
}

// writeThroughTimeout bounds the Redis writes of PostCreated and
// PostEdited: they run on the request path of the post's command.
const writeThroughTimeout = 500 * time.Millisecond

// PostCreated gives the author of a just-committed post read-your-writes
// through any API instance: it marks the post as the author's newest in
// Redis (readmodel.Timelines.MarkNewest, one small key through the
// timelines' owner). The post itself reaches Redis once, by the
// projectors: a home read of the author fetches the marker with the
// author's own timeline in its one pipeline and, only while the timeline
// is behind the marker, reads the author's newest posts from PostgreSQL
// (homeSegment). It also caches the body in process, for this instance's
// hydration.
//
// Best effort: when the marker's write fails, or is skipped because the
// write circuit is open after consecutive failures (ErrCircuitOpen: no
// wait at all), the author's own post shows once the timelines projector
// has written it (while Redis is unavailable to the reader too, its reads
// are degraded, from PostgreSQL, which has the post). The error is
// returned for logging only. The post is committed either way.
func (f *Feed) PostCreated(ctx context.Context, p NewPost) error {
	if p.ID <= 0 || p.AuthorID <= 0 {
		return ErrInvalidID
	}
	now := f.now()
	fa := postFacts{id: p.ID, author: p.AuthorID, content: p.Content, ms: p.CreatedAt.UnixMilli(), media: p.Media,
		replyTo: p.ReplyTo, replyToAuthor: p.ReplyToAuthor, quoteOf: p.QuoteOf, quoteAuthor: p.QuoteAuthor}
	cp := &cachedPost{it: itemOf(fa), facts: fa, author: p.AuthorID, version: 1, checkedAt: now.UnixNano()}
	f.posts.store(cp)
	done, err := f.writeCircuit.Allow()
	if err != nil {
		f.metrics.WriteThroughs.WithLabelValues("skipped").Inc()
		return fmt.Errorf("mark post %d as its author's newest: %w (%w)", p.ID, ErrCircuitOpen, err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeThroughTimeout)
	defer cancel()
	err = f.tl.MarkNewest(ctx, f.rdb, p.AuthorID, p.ID)
	done(err)
	// Read-your-writes: the author's next read through this instance
	// must not wait for Redis's invalidation message of the marker (a
	// failed write may have applied too).
	f.cache.invalidate(f.tl.NewestKey(p.AuthorID))
	if err != nil {
		f.metrics.WriteThroughs.WithLabelValues("error").Inc()
		return fmt.Errorf("mark post %d as its author's newest: %w", p.ID, redisErr(err))
	}
	f.metrics.WriteThroughs.WithLabelValues("ok").Inc()
	return nil
}

// EditedPost is an edit the write side has just committed, as the api's
// AfterPostEdited hook reports it.
type EditedPost struct {
	ID       int64
	AuthorID int64
	Content  string
	// Version is the post's version after the edit (2 for a first edit).
	Version  int64
	EditedAt time.Time
}

// PostEdited shows a just-committed edit at once: in this process's post
// cache (and over any older body read later, as an edit learnt from the
// change feed is), and in the Redis post cache through the same
// version-guarded write as the posts projector's (so a newer edit or the
// tombstone written meanwhile is never overwritten). Other processes learn
// it from the change feed. Best effort: the error is for logging; the edit
// is committed either way, and the projector writes it.
func (f *Feed) PostEdited(ctx context.Context, p EditedPost) error {
	if p.ID <= 0 || p.AuthorID <= 0 {
		return ErrInvalidID
	}
	if p.Version < 2 {
		return nil // no edit (an unchanged content at version 1)
	}
	f.posts.markEdited(p.ID, p.Version, p.Content, p.EditedAt, f.now())
	done, err := f.writeCircuit.Allow()
	if err != nil {
		f.metrics.WriteThroughs.WithLabelValues("skipped").Inc()
		return fmt.Errorf("write edit of post %d through to Redis: %w (%w)", p.ID, ErrCircuitOpen, err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeThroughTimeout)
	defer cancel()
	body := readmodel.Post{ID: p.ID, AuthorID: p.AuthorID, Content: p.Content,
		CreatedAt: snowflake.Time(p.ID).Format(events.CreatedAtLayout),
		Version:   p.Version, EditedAt: p.EditedAt.UTC().Format(events.CreatedAtLayout)}
	var qerr error
	err = readmodel.Exec(ctx, f.rdb, func(pipe redis.Pipeliner) { qerr = f.bodies.QueueEdit(ctx, pipe, body) })
	if qerr != nil {
		done(nil)
		return qerr
	}
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	done(err)
	if err != nil {
		f.metrics.WriteThroughs.WithLabelValues("error").Inc()
		return fmt.Errorf("write edit of post %d through to Redis: %w", p.ID, redisErr(err))
	}
	f.metrics.WriteThroughs.WithLabelValues("ok").Inc()
	return nil
}
