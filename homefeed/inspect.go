package homefeed

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/readmodel"
)

// Inspect reads user's whole inbox and says whether it holds post, for
// diagnostics (`feed verify` names what each read model of a reader says
// about a post it finds missing or foreign).
func Inspect(ctx context.Context, rdb redis.Cmdable, m Inboxes, user, post int64) (readmodel.Holding, error) {
	sk, bk := m.Keys(user)
	pipe := rdb.Pipeline()
	sc := pipe.Get(ctx, sk)
	bc := pipe.Get(ctx, bk)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return readmodel.Holding{}, fmt.Errorf("inspect inbox of %d: %w", user, err)
	}
	s, b := sc.Val(), bc.Val()
	var h readmodel.Holding
	h.Exists = sc.Err() == nil || bc.Err() == nil
	var ids []int64
	if len(s) >= header {
		hd := s[len(s)-header:]
		h.Built = hd[0] == 1
		if hd[1] == 1 {
			var x [8]byte
			copy(x[2:], hd[2:8])
			f := int64(binary.BigEndian.Uint64(x[:]))
			h.Floor = &f
		}
		ids = appendIDs(ids, s[:len(s)-header])
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
