package projections

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/events"
)

// Followers projects follower counts (`followers:{a}` field count), the
// accounts each user follows (`following:{u}`) and the celebrity set.
//
// A count never counts one event twice: the followee's hash also keeps,
// per follower, the last applied stream version of the pair, and one script
// checks and moves it together with the count. The following set has its
// own version hash under the follower's hash tag (Redis Cluster: a script
// touches one slot only).
type Followers struct {
	cfg Config
	rdb redis.UniversalClient
}

// NewFollowers returns the followers projector.
func NewFollowers(cfg Config, rdb redis.UniversalClient) (*Followers, error) {
	if rdb == nil {
		return nil, errors.New("new followers projector: nil Redis")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new followers projector: %w", err)
	}
	return &Followers{cfg: cfg, rdb: rdb}, nil
}

// Name implements Projector.
func (*Followers) Name() string { return NameFollowers }

// Group implements Projector.
func (p *Followers) Group() string { return GroupFor(NameFollowers, p.cfg.Keys.Version(NameFollowers)) }

// Apply implements Projector.
func (p *Followers) Apply(ctx context.Context, env events.Envelope, ev events.Event) error {
	var follower, followee, after int64
	follow := "0"
	switch e := ev.(type) {
	case events.Followed:
		follower, followee, after, follow = e.FollowerID, e.FolloweeID, e.FolloweeFollowers, "1"
	case events.Unfollowed:
		follower, followee, after = e.FollowerID, e.FolloweeID, e.FolloweeFollowers
	default:
		return nil
	}
	if env.StreamVersion < 1 {
		return fmt.Errorf("follow event %s without stream version: %w", env.EventID, ErrPermanent)
	}
	k := p.cfg.Keys
	if err := runScript(ctx, p.rdb, followerCountScript, []string{k.Followers(followee)},
		itoa(follower), env.StreamVersion, follow).Err(); err != nil {
		return fmt.Errorf("count follower of %d: %w", followee, err)
	}
	if err := runScript(ctx, p.rdb, followingScript, []string{k.Following(follower), k.FollowingVersions(follower)},
		itoa(followee), env.StreamVersion, follow).Err(); err != nil {
		return fmt.Errorf("update following of %d: %w", follower, err)
	}
	// The celebrity set follows the count carried by the event, the same
	// fact the inbox projector decides on. Applied unguarded: it is a set
	// operation, and a redelivered older event is always followed by the
	// newer ones of the same followee (one partition, in order).
	var err error
	if after >= p.cfg.CelebrityThreshold {
		err = p.rdb.SAdd(ctx, k.Celebrities(), itoa(followee)).Err()
	} else {
		err = p.rdb.SRem(ctx, k.Celebrities(), itoa(followee)).Err()
	}
	if err != nil {
		return fmt.Errorf("update celebrity set for %d: %w", followee, err)
	}
	return nil
}
