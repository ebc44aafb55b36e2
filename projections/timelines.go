package projections

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/readmodel"
)

// Timelines projects every author's newest posts (`timeline:{a}`), bounded
// to TimelineMax with the same sentinels as inboxes. It is the pull side of
// the hybrid feed: the query side reads the timelines of the celebrities a
// reader follows. A timeline carries ~built because this projector sees
// every post of the stream from the oldest offset. Each post and repost
// added publishes its author's live stream channel (wake:a:{a},
// docs/streams.md).
type Timelines struct {
	cfg       Config
	timelines readmodel.Timelines
	rdb       redis.UniversalClient
	live      readmodel.Live
}

// NewTimelines returns the timelines projector.
func NewTimelines(cfg Config, rdb redis.UniversalClient) (*Timelines, error) {
	cfg, err := projectorConfig(NameTimelines, cfg, rdb)
	if err != nil {
		return nil, err
	}
	return &Timelines{cfg: cfg, timelines: readmodel.NewTimelines(cfg.Keys, cfg.TimelineMax), rdb: rdb, live: readmodel.NewLive(cfg.Keys)}, nil
}

// Name implements Projector.
func (*Timelines) Name() string { return NameTimelines }

// Group implements Projector.
func (p *Timelines) Group() string { return GroupFor(NameTimelines, p.cfg.Keys.Version(NameTimelines)) }

// Apply implements Projector. A post is added exactly (no trim slack: one
// write per post is cheap), so the result does not depend on the order.
func (p *Timelines) Apply(ctx context.Context, _ events.Envelope, ev events.Event) error {
	switch e := ev.(type) {
	case events.PostCreated:
		if err := p.timelines.Add(ctx, p.rdb, e.AuthorID, e.PostID, millis(e.CreatedAt)); err != nil {
			return fmt.Errorf("add post %d to timeline: %w", e.PostID, err)
		}
		// The live streams of the author and of the followers who pull
		// the author's posts (celebrities') read now (docs/streams.md).
		return p.live.Publish(ctx, p.rdb, p.live.WakeAuthor(e.AuthorID))
	case events.PostDeleted:
		if err := p.timelines.Remove(ctx, p.rdb, e.AuthorID, e.PostID); err != nil {
			return fmt.Errorf("remove post %d from timeline: %w", e.PostID, err)
		}
	case events.PostReposted:
		// A repost is an entry of the reposter's timeline with its own id
		// and time, as a post is (the newest-post marker is not used).
		if err := p.timelines.AddRepost(ctx, p.rdb, e.ReposterID, e.RepostID, millis(e.CreatedAt)); err != nil {
			return fmt.Errorf("add repost %d to timeline: %w", e.RepostID, err)
		}
		return p.live.Publish(ctx, p.rdb, p.live.WakeAuthor(e.ReposterID))
	case events.PostUnreposted:
		if err := p.timelines.Remove(ctx, p.rdb, e.ReposterID, e.RepostID); err != nil {
			return fmt.Errorf("remove repost %d from timeline: %w", e.RepostID, err)
		}
	}
	return nil
}

// Ignores implements Selective: timelines are made of post creations and
// deletions and of reposts and their undo only (an edit changes no
// timeline: a timeline holds ids).
func (*Timelines) Ignores(typ string) bool {
	if typ == events.TypePostReposted || typ == events.TypePostUnreposted {
		return false
	}
	return (!isPostEvent(typ) || typ == events.TypePostEdited) && isCurrentType(typ)
}
