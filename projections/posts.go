package projections

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

// Posts projects the post cache (`post:{p}`, JSON readmodel.Post) the
// query side hydrates feed pages from, and beside it what hydration needs
// of what people do with posts (readmodel.Engagement: counts:{p},
// liked:{u}, reposted:{u}, reposts:{O}) and the users' names (name:{u}).
// Each edit, deletion and undone repost is also appended, once, to the
// live streams' changes log (readmodel.Live.AppendChange, docs/streams.md).
//
// Create is SET NX, an edit replaces the body only when its version is
// above the cached one and the body is no tombstone (readmodel.PostCache.Edit),
// and delete overwrites with a tombstone (deleted=true, no content: a
// deleted post's text is not kept in the cache). So a Create redelivered
// after an edit or the Delete never brings older content back or
// resurrects the post, an edit redelivered after a newer one changes
// nothing, and the final value does not depend on how often or in which
// order they arrive: it is the newest version's content, or the tombstone.
// A repost is cached the same way at its own id (created by
// post.reposted, a tombstone on post.unreposted).
//
// Counts are set, not moved, to the count the event carries, only when
// the event's position is above the count's guard, so a redelivered like
// counts once and likes, reposts and replies of one post arriving through
// different partitions leave the newest count. Every event's writes go in
// one pipeline of single-key commands and scripts; a crash between two of
// them leaves the event unacknowledged, and its redelivery repeats them
// all, each idempotent.
//
// Every per-post key expires at the post's creation ms plus the policy's
// PostHorizon (readmodel.Horizon: bodies with SET ... PXAT, counts:{p}
// with PEXPIREAT, the viewers' day buckets at their day's end + H,
// reposts:{O} extended to its newest repost's), and a write whose expiry
// is past writes nothing: an event about a post older than the horizon,
// redelivered or late, leaves Redis as it is, and the query side reads
// that post from PostgreSQL.
type Posts struct {
	cfg    Config
	cache  readmodel.PostCache
	engage readmodel.Engagement
	names  readmodel.Names
	rdb    redis.UniversalClient
	live   readmodel.Live
}

// NewPosts returns the posts projector.
func NewPosts(cfg Config, rdb redis.UniversalClient) (*Posts, error) {
	if rdb == nil {
		return nil, errors.New("new posts projector: nil Redis")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new posts projector: %w", err)
	}
	hz := cfg.Policy().Horizon(cfg.Now)
	return &Posts{cfg: cfg, cache: readmodel.NewPostCache(cfg.Keys).WithHorizon(hz), engage: readmodel.NewEngagement(cfg.Keys).WithHorizon(hz),
		names: readmodel.NewNames(cfg.Keys), rdb: rdb, live: readmodel.NewLive(cfg.Keys)}, nil
}

// Name implements Projector.
func (*Posts) Name() string { return NamePosts }

// MaxRepostChanges bounds the reposts of a deleted original told to the
// live streams (the earliest ones): a feed stops showing every repost of
// a deleted original, so a stream that sent one is told it is gone, as
// of an undone repost.
const MaxRepostChanges = 1000

// deletionChanges appends a deleted post's change to the live streams'
// changes log, after one for each live repost of it (at most
// MaxRepostChanges), read from reposts:{O} once the tombstone is
// written. A repost projected after that (its event in another
// partition) is never shown by a stream: its hydration finds the
// tombstone. Each change is appended once (its mark), so a redelivery,
// or an undo of one of the reposts told already, tells nothing twice.
func (p *Posts) deletionChanges(ctx context.Context, e events.PostDeleted) error {
	pipe := p.rdb.Pipeline()
	page := p.engage.QueueRepostsPage(ctx, pipe, e.PostID, 0, readmodel.Repost{}, MaxRepostChanges)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read the reposts of deleted post %d: %w", e.PostID, err)
	}
	reposts, _, err := page.Result()
	if err != nil {
		return fmt.Errorf("read the reposts of deleted post %d: %w", e.PostID, err)
	}
	cs := make([]readmodel.Change, 0, len(reposts)+1)
	for _, r := range reposts {
		cs = append(cs, readmodel.Change{Post: r.ID, Author: r.Reposter, Deleted: true})
	}
	cs = append(cs, readmodel.Change{Post: e.PostID, Author: e.AuthorID, Deleted: true})
	return p.live.AppendChanges(ctx, p.rdb, cs, time.Now())
}

// Group implements Projector.
func (p *Posts) Group() string { return GroupFor(NamePosts, p.cfg.Keys.Version(NamePosts)) }

// Apply implements Projector.
func (p *Posts) Apply(ctx context.Context, env events.Envelope, ev events.Event) error {
	switch e := ev.(type) {
	case events.PostCreated:
		return p.exec(ctx, env, e.ParentReplies != nil && e.ReplyTo != 0, func(pipe redis.Pipeliner) error {
			if e.ParentReplies != nil && e.ReplyTo != 0 {
				p.engage.QueueSetCount(ctx, pipe, e.ReplyTo, readmodel.CountReplies, *e.ParentReplies, env.Position)
			}
			return p.cache.QueueCreate(ctx, pipe, CreatedBody(e))
		}, "cache post %d", e.PostID)
	case events.PostEdited:
		if _, err := p.cache.Edit(ctx, p.rdb, EditedBody(e)); err != nil {
			return fmt.Errorf("cache edit of post %d: %w", e.PostID, err)
		}
		// After the body: a stream woken by the change reads the new one.
		return p.live.AppendChange(ctx, p.rdb, readmodel.Change{Post: e.PostID, Author: e.AuthorID,
			Version: e.Version, Content: e.Content, EditedAt: e.EditedAt}, time.Now())
	case events.PostDeleted:
		err := p.exec(ctx, env, e.ParentReplies != nil && e.ReplyTo != 0, func(pipe redis.Pipeliner) error {
			if e.ParentReplies != nil && e.ReplyTo != 0 {
				p.engage.QueueSetCount(ctx, pipe, e.ReplyTo, readmodel.CountReplies, *e.ParentReplies, env.Position)
			}
			// The Snowflake id carries the creation millisecond.
			return p.cache.QueueSet(ctx, pipe, readmodel.Post{ID: e.PostID, AuthorID: e.AuthorID,
				CreatedAt: snowflake.Time(e.PostID).Format(events.CreatedAtLayout), Deleted: true})
		}, "cache tombstone %d", e.PostID)
		if err != nil {
			return err
		}
		return p.deletionChanges(ctx, e)
	case events.PostReposted:
		return p.exec(ctx, env, true, func(pipe redis.Pipeliner) error {
			p.engage.QueueSetCount(ctx, pipe, e.PostID, readmodel.CountReposts, e.Reposts, env.Position)
			p.engage.QueueReposted(ctx, pipe, e.ReposterID, e.PostID, true)
			p.engage.QueueAddRepost(ctx, pipe, e.PostID, readmodel.Repost{ID: e.RepostID, Reposter: e.ReposterID})
			return p.cache.QueueCreate(ctx, pipe, RepostBody(e))
		}, "cache repost %d", e.RepostID)
	case events.PostUnreposted:
		err := p.exec(ctx, env, true, func(pipe redis.Pipeliner) error {
			p.engage.QueueSetCount(ctx, pipe, e.PostID, readmodel.CountReposts, e.Reposts, env.Position)
			p.engage.QueueReposted(ctx, pipe, e.ReposterID, e.PostID, false)
			p.engage.QueueRemoveRepost(ctx, pipe, e.PostID, readmodel.Repost{ID: e.RepostID, Reposter: e.ReposterID})
			return p.cache.QueueSet(ctx, pipe, RepostTombstone(e.RepostID, e.ReposterID, e.PostID, e.AuthorID))
		}, "cache undone repost %d", e.RepostID)
		if err != nil {
			return err
		}
		// A repost is an entry of its own: a stream that sent it is told
		// it is gone, as of a deleted post.
		return p.live.AppendChange(ctx, p.rdb, readmodel.Change{Post: e.RepostID, Author: e.ReposterID, Deleted: true}, time.Now())
	case events.PostLiked:
		return p.exec(ctx, env, true, func(pipe redis.Pipeliner) error {
			p.engage.QueueSetCount(ctx, pipe, e.PostID, readmodel.CountLikes, e.Likes, env.Position)
			p.engage.QueueLiked(ctx, pipe, e.LikerID, e.PostID, true)
			return nil
		}, "like of post %d", e.PostID)
	case events.PostUnliked:
		return p.exec(ctx, env, true, func(pipe redis.Pipeliner) error {
			p.engage.QueueSetCount(ctx, pipe, e.PostID, readmodel.CountLikes, e.Likes, env.Position)
			p.engage.QueueLiked(ctx, pipe, e.LikerID, e.PostID, false)
			return nil
		}, "unlike of post %d", e.PostID)
	case events.UserRegistered:
		return p.exec(ctx, env, false, func(pipe redis.Pipeliner) error {
			p.names.QueueSet(ctx, pipe, e.UserID, e.Name)
			return nil
		}, "name of user %d", e.UserID)
	}
	return nil
}

// exec runs fill's writes of one event in one pipeline (readmodel.Exec:
// the scripts are loaded on NOSCRIPT and the whole pipeline run again,
// which its idempotent writes allow). guarded says a count is among them:
// an event without a log position cannot be ordered and is refused as
// permanent.
func (p *Posts) exec(ctx context.Context, env events.Envelope, guarded bool, fill func(redis.Pipeliner) error, what string, id int64) error {
	if guarded && env.Position < 1 {
		return fmt.Errorf("event %s without log position: %w", env.EventID, ErrPermanent)
	}
	var ferr error
	err := readmodel.Exec(ctx, p.rdb, func(pipe redis.Pipeliner) {
		ferr = fill(pipe)
	})
	if ferr != nil {
		err = ferr
	}
	if err != nil {
		return fmt.Errorf(what+": %w", id, err)
	}
	return nil
}

// Ignores implements Selective: the post cache and its neighbours are made
// of post, repost and like events, and the names of user.registered.
func (*Posts) Ignores(typ string) bool {
	switch typ {
	case events.TypePostReposted, events.TypePostUnreposted, events.TypePostLiked, events.TypePostUnliked, events.TypeUserRegistered:
		return false
	}
	return !isPostEvent(typ) && isCurrentType(typ)
}

// CreatedBody is the post cache's body of a post as created.
func CreatedBody(e events.PostCreated) readmodel.Post {
	b := readmodel.Post{ID: e.PostID, AuthorID: e.AuthorID, Content: e.Content,
		CreatedAt: e.CreatedAt.UTC().Format(events.CreatedAtLayout),
		ReplyTo:   e.ReplyTo, ReplyToAuthor: e.ReplyToAuthor, ReplyRoot: e.ReplyRoot,
		QuoteOf: e.QuoteOf, QuoteAuthor: e.QuoteAuthor}
	for _, m := range e.Media {
		b.Media = append(b.Media, readmodel.Media(m))
	}
	return b
}

// RepostBody is the post cache's body of a repost's own entry: the
// reposter as its author, the repost's time, no content, and the
// original it points at.
func RepostBody(e events.PostReposted) readmodel.Post {
	return readmodel.Post{ID: e.RepostID, AuthorID: e.ReposterID, CreatedAt: e.CreatedAt.UTC().Format(events.CreatedAtLayout),
		RepostOf: e.PostID, RepostOfAuthor: e.AuthorID}
}

// RepostTombstone is the post cache's body of an undone repost: a
// tombstone at the repost's id (its Snowflake millisecond as its time)
// that still names the original.
func RepostTombstone(repost, reposter, original, originalAuthor int64) readmodel.Post {
	return readmodel.Post{ID: repost, AuthorID: reposter, CreatedAt: snowflake.Time(repost).Format(events.CreatedAtLayout),
		Deleted: true, RepostOf: original, RepostOfAuthor: originalAuthor}
}

// EditedBody is the post cache's body of a post after edit e: the
// creation time is the post id's Snowflake millisecond, as for a
// tombstone.
func EditedBody(e events.PostEdited) readmodel.Post {
	return readmodel.Post{ID: e.PostID, AuthorID: e.AuthorID, Content: e.Content,
		CreatedAt: snowflake.Time(e.PostID).Format(events.CreatedAtLayout),
		Version:   e.Version, EditedAt: e.EditedAt.UTC().Format(events.CreatedAtLayout)}
}
