package readmodel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Inspection: where the read models hold a post, for diagnostics (`feed
// verify` names, for each difference it finds, what each read model of the
// reader says). Nothing here is on a hot path; every read is bounded by one
// key's size (an inbox is bounded by the policy's InboxMax plus its trim
// slack).

// Holding is what one read model says about a post or an account.
type Holding struct {
	// Exists: the key exists.
	Exists bool
	// Built: the key says it is complete (~built).
	Built bool
	// Floor is the ~floor (epoch ms; entries at or below it are not
	// served from Redis), nil when none.
	Floor *int64
	// Holds: the key holds the post (or the account, for a set).
	Holds bool
}

func (h Holding) String() string {
	if !h.Exists {
		return "key missing"
	}
	s := "holds it"
	if !h.Holds {
		s = "does not hold it"
	}
	if h.Built {
		s += ", built"
	} else {
		s += ", not built"
	}
	if h.Floor != nil {
		s += ", floor " + strconv.FormatInt(*h.Floor, 10)
	}
	return s
}

// InspectTimeline says whether author's timeline holds post.
func InspectTimeline(ctx context.Context, rdb redis.Cmdable, keys Keys, author, post int64) (Holding, error) {
	return inspectSortedSet(ctx, rdb, keys.Timeline(author), post)
}

// InspectFollowing says whether following:{user} holds followee, and
// whether user's following state is built.
func InspectFollowing(ctx context.Context, rdb redis.Cmdable, keys Keys, user, followee int64) (Holding, error) {
	pipe := rdb.Pipeline()
	ex := pipe.Exists(ctx, keys.Following(user), keys.FollowingVersions(user))
	built := pipe.HExists(ctx, keys.FollowingVersions(user), SentinelBuilt)
	is := pipe.SIsMember(ctx, keys.Following(user), strconv.FormatInt(followee, 10))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Holding{}, fmt.Errorf("inspect following of %d: %w", user, err)
	}
	return Holding{Exists: ex.Val() > 0, Built: built.Val(), Holds: is.Val()}, nil
}

// InspectCelebrity says whether the celebrity set holds author.
func InspectCelebrity(ctx context.Context, rdb redis.Cmdable, keys Keys, author int64) (Holding, error) {
	pipe := rdb.Pipeline()
	ex := pipe.Exists(ctx, keys.Celebrities())
	built := pipe.SIsMember(ctx, keys.Celebrities(), SentinelBuilt)
	is := pipe.SIsMember(ctx, keys.Celebrities(), strconv.FormatInt(author, 10))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Holding{}, fmt.Errorf("inspect celebrities: %w", err)
	}
	return Holding{Exists: ex.Val() > 0, Built: built.Val(), Holds: is.Val()}, nil
}

func inspectSortedSet(ctx context.Context, rdb redis.Cmdable, key string, post int64) (Holding, error) {
	pipe := rdb.Pipeline()
	ex := pipe.Exists(ctx, key)
	built := pipe.ZScore(ctx, key, SentinelBuilt)
	floor := pipe.ZScore(ctx, key, SentinelFloor)
	score := pipe.ZScore(ctx, key, strconv.FormatInt(post, 10))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Holding{}, fmt.Errorf("inspect %s: %w", key, err)
	}
	h := Holding{Exists: ex.Val() > 0, Built: built.Err() == nil && math.IsInf(built.Val(), 1), Holds: score.Err() == nil}
	if floor.Err() == nil {
		f := int64(floor.Val())
		h.Floor = &f
	}
	return h, nil
}
