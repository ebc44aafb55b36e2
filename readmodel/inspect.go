package readmodel

import (
	"context"
	"encoding/binary"
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

// InspectInbox reads user's whole inbox and says whether it holds post.
func InspectInbox(ctx context.Context, rdb redis.Cmdable, keys Keys, pol Policy, user, post int64) (Holding, error) {
	return inspectPacked(ctx, rdb, NewPackedInboxes(keys, pol), user, post)
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

func inspectPacked(ctx context.Context, rdb redis.Cmdable, m PackedInboxes, user, post int64) (Holding, error) {
	sk, bk := m.Keys(user)
	pipe := rdb.Pipeline()
	sc := pipe.Get(ctx, sk)
	bc := pipe.Get(ctx, bk)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Holding{}, fmt.Errorf("inspect packed inbox of %d: %w", user, err)
	}
	s, b := sc.Val(), bc.Val()
	var h Holding
	h.Exists = sc.Err() == nil || bc.Err() == nil
	var ids []int64
	if len(s) >= packedHeader {
		hd := s[len(s)-packedHeader:]
		h.Built = hd[0] == 1
		if hd[1] == 1 {
			var x [8]byte
			copy(x[2:], hd[2:8])
			f := int64(binary.BigEndian.Uint64(x[:]))
			h.Floor = &f
		}
		ids = appendIDs(ids, s[:len(s)-packedHeader])
	}
	ids = appendIDs(ids, b)
	for _, id := range ids {
		if id == post {
			h.Holds = true
			break
		}
	}
	return h, nil
}
