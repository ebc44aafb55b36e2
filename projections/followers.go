package projections

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/readmodel"
)

// Followers projects follower counts (`followers:{a}` field count), the
// accounts each user follows and does not mute (`following:{u}`), the
// celebrity set, and the mute and block fields of `following_v:{u}` the
// query side reads a page's relations from (readmodel.Follows.QueueRelations).
//
// A count never counts one event twice: it is set, not moved, to the
// count the followee's newest applied event carries, and the followee's
// hash keeps that event's log position, checked and moved in the same
// script (readmodel.Follows). The following set has its own version hash
// under the follower's hash tag (Redis Cluster: a script touches one slot
// only).
type Followers struct {
	cfg     Config
	pol     readmodel.Policy
	follows readmodel.Follows
	celebs  readmodel.Celebrities
	rdb     redis.UniversalClient
}

// NewFollowers returns the followers projector.
func NewFollowers(cfg Config, rdb redis.UniversalClient) (*Followers, error) {
	cfg, err := projectorConfig(NameFollowers, cfg, rdb)
	if err != nil {
		return nil, err
	}
	return &Followers{cfg: cfg, pol: cfg.Policy(), follows: readmodel.NewFollows(cfg.Keys), celebs: readmodel.NewCelebrities(cfg.Keys), rdb: rdb}, nil
}

// Name implements Projector.
func (*Followers) Name() string { return NameFollowers }

// Group implements Projector.
func (p *Followers) Group() string { return GroupFor(NameFollowers, p.cfg.Keys.Version(NameFollowers)) }

// Apply implements Projector: the count, the following set and the
// celebrity set in one pipeline (one round trip), as ApplyBatch does for a
// batch.
func (p *Followers) Apply(ctx context.Context, env events.Envelope, ev events.Event) error {
	return p.ApplyBatch(ctx, []Decoded{{Env: env, Ev: ev}})
}

// Ignores implements Selective: the follower counts, following sets and
// the celebrity set are made of follow and mute events only (a muted
// account leaves the muter's following set, readmodel.Follows), and the
// block fields of following_v:{u} of block events.
func (*Followers) Ignores(typ string) bool {
	switch typ {
	case events.TypeFollowed, events.TypeUnfollowed, events.TypeMuted, events.TypeUnmuted,
		events.TypeBlocked, events.TypeUnblocked:
		return false
	}
	return isCurrentType(typ)
}
