package queries

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/internal/rkeys"
)

// visibility says which hydrated posts a page may show.
type visibility struct {
	viewer      int64          // home feeds: the reader, whose own posts are always shown
	author      int64          // author pages: only this author's posts
	followed    map[int64]bool // authors known to be followed (followed celebrities)
	checkFollow bool           // hide authors not in following:{viewer}
	pre         map[int64]item // posts already read from PostgreSQL
}

// hydrate turns the segment's keys, newest first, into up to want visible
// items. Each batch is one pipelined GET per post (the post cache), one
// PostgreSQL query for the posts the cache lacks, and one SMISMEMBER for
// authors whose follow is not known yet. A batch over-fetches a little so
// that a few hidden posts (deleted, unfollowed) do not cost another batch.
func (f *Feed) hydrate(ctx context.Context, keys []key, vis visibility, want int) ([]item, error) {
	var out []item
	for len(keys) > 0 && len(out) < want {
		short := want - len(out)
		n := min(len(keys), short+short/4+2)
		batch := keys[:n]
		keys = keys[n:]
		got, err := f.hydrateBatch(ctx, batch, vis)
		if err != nil {
			return nil, err
		}
		for _, it := range got {
			if len(out) == want {
				break
			}
			out = append(out, it)
		}
	}
	return out, nil
}

type hydrated struct {
	item    item
	author  int64
	deleted bool
	ok      bool
}

func (f *Feed) hydrateBatch(ctx context.Context, batch []key, vis visibility) ([]item, error) {
	res := make([]hydrated, len(batch))
	cmds := make([]*redis.StringCmd, len(batch))
	pipe := f.rdb.Pipeline()
	queued := 0
	for i, k := range batch {
		if it, ok := vis.pre[k.id]; ok {
			res[i] = hydrated{item: it, author: vis.viewer, ok: true}
			continue
		}
		cmds[i] = pipe.Get(ctx, f.keys.Post(k.id))
		queued++
	}
	if queued > 0 {
		if err := execPipe(ctx, pipe); err != nil {
			return nil, fmt.Errorf("hydrate posts: %w", err)
		}
	}
	var missing []int64
	for i, c := range cmds {
		if c == nil {
			continue
		}
		raw, err := c.Bytes()
		if err != nil {
			missing = append(missing, batch[i].id)
			continue
		}
		var p rkeys.Post
		if err := json.Unmarshal(raw, &p); err != nil || p.ID != batch[i].id {
			missing = append(missing, batch[i].id) // unreadable cache entry: ask the truth
			continue
		}
		res[i] = hydrated{item: newItem(p.ID, p.AuthorID, p.Content, batch[i].ms), author: p.AuthorID, deleted: p.Deleted, ok: true}
	}
	f.metrics.Hydrations.WithLabelValues("redis").Add(float64(queued - len(missing)))
	if len(missing) > 0 {
		f.metrics.Hydrations.WithLabelValues("pg").Add(float64(len(missing)))
		rows, err := f.pgPostsByID(ctx, missing)
		if err != nil {
			return nil, err
		}
		for i := range res {
			if res[i].ok {
				continue
			}
			if r, ok := rows[batch[i].id]; ok {
				it := r.item
				it.key = batch[i] // the order the page was built in
				res[i] = hydrated{item: it, author: r.author, deleted: r.deleted, ok: true}
			}
			// A post the truth does not know is never shown.
		}
	}
	follows, err := f.followsOf(ctx, res, vis)
	if err != nil {
		return nil, err
	}
	out := make([]item, 0, len(res))
	for _, h := range res {
		if !h.ok || h.deleted {
			continue
		}
		if vis.author != 0 && h.author != vis.author {
			continue
		}
		if vis.checkFollow && h.author != vis.viewer && !vis.followed[h.author] && !follows[h.author] {
			continue
		}
		out = append(out, h.item)
	}
	return out, nil
}

// followsOf asks following:{viewer} about the authors whose follow is not
// known yet: an author unfollowed since a post was pushed is hidden at once,
// before the inbox projector removes the post.
func (f *Feed) followsOf(ctx context.Context, res []hydrated, vis visibility) (map[int64]bool, error) {
	if !vis.checkFollow {
		return nil, nil
	}
	var ask []any
	var authors []int64
	seen := map[int64]bool{}
	for _, h := range res {
		a := h.author
		if !h.ok || h.deleted || a == vis.viewer || vis.followed[a] || seen[a] {
			continue
		}
		seen[a] = true
		ask = append(ask, strconv.FormatInt(a, 10))
		authors = append(authors, a)
	}
	if len(ask) == 0 {
		return nil, nil
	}
	is, err := f.rdb.SMIsMember(ctx, f.keys.Following(vis.viewer), ask...).Result()
	if err != nil {
		return nil, fmt.Errorf("check follows: %w", err)
	}
	out := make(map[int64]bool, len(authors))
	for i, a := range authors {
		out[a] = i < len(is) && is[i]
	}
	return out, nil
}
