package projections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/readmodel"
)

// createdAtLayout is RFC 3339 in UTC with milliseconds, as the API prints.
const createdAtLayout = "2006-01-02T15:04:05.000Z07:00"

// Posts projects the post cache (`post:{p}`, JSON readmodel.Post) the query side
// hydrates feed pages from.
//
// Create is SET NX and delete overwrites with a tombstone (deleted=true, no
// content: a deleted post's text is not kept in the cache). So a Create
// redelivered after the Delete never resurrects the post, and the final
// value does not depend on how often or in which order they arrive.
type Posts struct {
	cfg Config
	rdb redis.UniversalClient
}

// NewPosts returns the posts projector.
func NewPosts(cfg Config, rdb redis.UniversalClient) (*Posts, error) {
	if rdb == nil {
		return nil, errors.New("new posts projector: nil Redis")
	}
	return &Posts{cfg: cfg.withDefaults(), rdb: rdb}, nil
}

// Name implements Projector.
func (*Posts) Name() string { return NamePosts }

// Group implements Projector.
func (p *Posts) Group() string { return GroupFor(NamePosts, p.cfg.Keys.Version(NamePosts)) }

// Apply implements Projector.
func (p *Posts) Apply(ctx context.Context, _ events.Envelope, ev events.Event) error {
	switch e := ev.(type) {
	case events.PostCreated:
		b, err := json.Marshal(readmodel.Post{ID: e.PostID, AuthorID: e.AuthorID, Content: e.Content,
			CreatedAt: e.CreatedAt.UTC().Format(createdAtLayout)})
		if err != nil {
			return fmt.Errorf("encode post %d: %w", e.PostID, err)
		}
		if err := p.rdb.SetNX(ctx, p.cfg.Keys.Post(e.PostID), b, 0).Err(); err != nil {
			return fmt.Errorf("cache post %d: %w", e.PostID, err)
		}
	case events.PostDeleted:
		// The Snowflake id carries the creation millisecond.
		b, err := json.Marshal(readmodel.Post{ID: e.PostID, AuthorID: e.AuthorID,
			CreatedAt: snowflake.Time(e.PostID).Format(createdAtLayout), Deleted: true})
		if err != nil {
			return fmt.Errorf("encode tombstone %d: %w", e.PostID, err)
		}
		if err := p.rdb.Set(ctx, p.cfg.Keys.Post(e.PostID), b, 0).Err(); err != nil {
			return fmt.Errorf("cache tombstone %d: %w", e.PostID, err)
		}
	}
	return nil
}
