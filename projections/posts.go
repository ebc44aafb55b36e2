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

// Posts projects the post cache (`post:{p}`, JSON readmodel.Post) the query side
// hydrates feed pages from.
//
// Create is SET NX, an edit replaces the body only when its version is
// above the cached one and the body is no tombstone (readmodel.PostCache.Edit),
// and delete overwrites with a tombstone (deleted=true, no content: a
// deleted post's text is not kept in the cache). So a Create redelivered
// after an edit or the Delete never brings older content back or
// resurrects the post, an edit redelivered after a newer one changes
// nothing, and the final value does not depend on how often or in which
// order they arrive: it is the newest version's content, or the tombstone.
type Posts struct {
	cfg   Config
	cache readmodel.PostCache
	rdb   redis.UniversalClient
	live  readmodel.Live
}

// NewPosts returns the posts projector.
func NewPosts(cfg Config, rdb redis.UniversalClient) (*Posts, error) {
	if rdb == nil {
		return nil, errors.New("new posts projector: nil Redis")
	}
	cfg = cfg.withDefaults()
	return &Posts{cfg: cfg, cache: readmodel.NewPostCache(cfg.Keys), rdb: rdb, live: readmodel.NewLive(cfg.Keys)}, nil
}

// Name implements Projector.
func (*Posts) Name() string { return NamePosts }

// Group implements Projector.
func (p *Posts) Group() string { return GroupFor(NamePosts, p.cfg.Keys.Version(NamePosts)) }

// Apply implements Projector.
func (p *Posts) Apply(ctx context.Context, _ events.Envelope, ev events.Event) error {
	switch e := ev.(type) {
	case events.PostCreated:
		err := p.cache.Create(ctx, p.rdb, readmodel.Post{ID: e.PostID, AuthorID: e.AuthorID, Content: e.Content,
			CreatedAt: e.CreatedAt.UTC().Format(events.CreatedAtLayout)})
		if err != nil {
			return fmt.Errorf("cache post %d: %w", e.PostID, err)
		}
	case events.PostEdited:
		if _, err := p.cache.Edit(ctx, p.rdb, EditedBody(e)); err != nil {
			return fmt.Errorf("cache edit of post %d: %w", e.PostID, err)
		}
		// After the body: a stream woken by the change reads the new one.
		return p.live.AppendChange(ctx, p.rdb, readmodel.Change{Post: e.PostID, Author: e.AuthorID,
			Version: e.Version, Content: e.Content}, time.Now())
	case events.PostDeleted:
		// The Snowflake id carries the creation millisecond.
		err := p.cache.Set(ctx, p.rdb, readmodel.Post{ID: e.PostID, AuthorID: e.AuthorID,
			CreatedAt: snowflake.Time(e.PostID).Format(events.CreatedAtLayout), Deleted: true})
		if err != nil {
			return fmt.Errorf("cache tombstone %d: %w", e.PostID, err)
		}
		return p.live.AppendChange(ctx, p.rdb, readmodel.Change{Post: e.PostID, Author: e.AuthorID, Deleted: true}, time.Now())
	}
	return nil
}

// Ignores implements Selective: the post cache is made of post events only.
func (*Posts) Ignores(typ string) bool { return !isPostEvent(typ) && isCurrentType(typ) }

// EditedBody is the post cache's body of a post after edit e: the
// creation time is the post id's Snowflake millisecond, as for a
// tombstone.
func EditedBody(e events.PostEdited) readmodel.Post {
	return readmodel.Post{ID: e.PostID, AuthorID: e.AuthorID, Content: e.Content,
		CreatedAt: snowflake.Time(e.PostID).Format(events.CreatedAtLayout),
		Version:   e.Version, EditedAt: e.EditedAt.UTC().Format(events.CreatedAtLayout)}
}
