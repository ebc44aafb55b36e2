package projections

import (
	"context"
	"errors"
	"fmt"
	"github.com/jackc/pgx/v5"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/readmodel"
)

// Bulk builds for `feed rebuild` (docs/rebuild.md). Each writes a read model
// into the projector's own (fresh, versioned) keys in pipelined batches, and
// leaves it in a state the projector's Apply could have produced: a rebuild
// then starts the projector's consumer group at offsets taken before the
// build, so what the build did not see is applied on top, and what it saw
// twice is absorbed by the projector's idempotency.
//
// Posts, timelines and inboxes are built from the inline projections of the
// write side (posts, follows, user_activity): they are committed in the
// same transaction as the events, so a snapshot of them is the log folded
// up to that snapshot, and they are far cheaper to read than the log
// (inboxes are merged in memory from one pass over posts and follows,
// build_inbox.go, instead of a fan-out per post). Followers replays
// the follow events themselves (ApplyBatch): its idempotency state (the
// last applied stream version of each pair) exists only in the log.

// BuildBatch is the number of rows per query and pipeline (posts), and
// BuildOwners the number of owners (authors) per query and pipeline
// (timelines); BuildWorkers pages (inboxes: chunks) are built at once.
// Beginner starts the snapshot transaction of a bulk build;
// *pgxpool.Pool implements it.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// BuildProgress follows a build made of stages: Stage starts one (total 0
// when unknown), Add counts units done in it. Add is called from several
// goroutines.
type BuildProgress interface {
	Stage(name, unit string, total int64)
	Add(n int)
}

type noProgress struct{}

func (noProgress) Stage(string, string, int64) {}
func (noProgress) Add(int)                     {}

const (
	BuildBatch   = 2000
	BuildOwners  = 250
	BuildWorkers = 4
)

// Progress is told how many units (rows, users, events) were written.
type Progress func(n int)

func (f Progress) add(n int) {
	if f != nil && n > 0 {
		f(n)
	}
}

// BuildPosts writes every post of the posts table into the post cache, as
// the projector would after seeing its events: the body with its latest
// content and version, or for a deleted post the tombstone; and beside
// it the rest of the posts projection (buildShares): counts, the likers'
// and reposters' sets, each original's reposts, the reposts' bodies and
// the users' names. Pages are read in id order and written by
// BuildWorkers pipelines at once (distinct keys: order does not matter).
//
// Only the horizon is written (readmodel.Horizon): posts, reposts and
// likes of posts created within the policy's PostHorizon, each key with
// its expiry, and reposts:{O} whole for an original with a repost within
// it; names are all written. So a deployment's keys written before the
// horizon existed, without expiry, are replaced by ones with it.
func (p *Posts) BuildPosts(ctx context.Context, pg Querier, progress Progress) (int64, error) {
	const q = `SELECT id, author_id, content, created_at, deleted, version, edited_at,
	coalesce(reply_to, 0), coalesce(reply_to_author, 0), coalesce(reply_root, 0), coalesce(quote_of, 0), coalesce(quote_author, 0),
	media, like_count, repost_count, reply_count
FROM posts WHERE id > $1 ORDER BY id LIMIT $2`
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(BuildWorkers)
	first := p.engage.Horizon().FirstID(p.now())
	last, total := max(first-1, 0), int64(0)
	type built struct {
		body   readmodel.Post
		counts readmodel.Counts
	}
	for gctx.Err() == nil {
		rows, err := pg.Query(gctx, q, last, BuildBatch)
		if err != nil {
			_ = g.Wait()
			return total, fmt.Errorf("read posts: %w", err)
		}
		page := make([]built, 0, BuildBatch)
		for rows.Next() {
			var (
				post    readmodel.Post
				c       readmodel.Counts
				at      time.Time
				deleted bool
				edited  *time.Time
				media   []readmodel.Media
			)
			if err := rows.Scan(&post.ID, &post.AuthorID, &post.Content, &at, &deleted, &post.Version, &edited,
				&post.ReplyTo, &post.ReplyToAuthor, &post.ReplyRoot, &post.QuoteOf, &post.QuoteAuthor, &media,
				&c.Likes, &c.Reposts, &c.Replies); err != nil {
				rows.Close()
				_ = g.Wait()
				return total, fmt.Errorf("read posts: %w", err)
			}
			if deleted {
				post = readmodel.Post{ID: post.ID, AuthorID: post.AuthorID, Deleted: true,
					CreatedAt: snowflake.Time(post.ID).Format(events.CreatedAtLayout)}
			} else {
				post.CreatedAt = at.UTC().Format(events.CreatedAtLayout)
				post.Media = media
				if edited != nil {
					post.EditedAt = edited.UTC().Format(events.CreatedAtLayout)
				}
			}
			page = append(page, built{post, c})
			last = post.ID
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			_ = g.Wait()
			return total, fmt.Errorf("read posts: %w", err)
		}
		n := len(page)
		if n > 0 {
			g.Go(func() error {
				err := readmodel.Exec(gctx, p.rdb, func(pipe redis.Pipeliner) {
					for _, b := range page {
						_ = p.cache.QueueSet(gctx, pipe, b.body) // a Post always encodes
						if b.counts != (readmodel.Counts{}) {
							p.engage.QueueBuildCounts(gctx, pipe, b.body.ID, b.counts, BuildCountsGuard)
						}
					}
				})
				if err != nil {
					return fmt.Errorf("write posts: %w", err)
				}
				progress.add(n)
				return nil
			})
		}
		total += int64(n)
		if n < BuildBatch {
			break
		}
	}
	if err := g.Wait(); err != nil {
		return total, err
	}
	if err := ctx.Err(); err != nil {
		return total, err
	}
	n, err := p.buildShares(ctx, pg, first)
	progress.add(int(n))
	return total, err
}

// now is the projector's clock.
func (p *Posts) now() time.Time {
	if p.cfg.Now != nil {
		return p.cfg.Now()
	}
	return time.Now()
}

// BuildCountsGuard is the position the bulk build guards the counts it
// writes with: below the position of every event that changes a count
// (the log's first event is a registration). Not the snapshot's newest
// position: positions are taken at INSERT, not at commit, so a count
// change of a post in flight at the snapshot can have a lower position
// than events the snapshot holds, and a guard that high would make the
// catch-up skip it. With this guard the catch-up, which applies every
// event from offsets taken before the snapshot, sets every count one of
// its events touches, the newest position winning among them as it does
// for the projector; a count none of them touches had every event before
// the offsets, so in the snapshot.
const BuildCountsGuard = 1

// The rest of the posts projection, from the inline tables (and the
// undone reposts from the log): each query is streamed and written in
// pipelines of BuildBatch rows. $1 is the horizon's first id: reposts
// of an original with a repost in it (the whole set, for reposts:{O}; the
// older reposts' own keys are past and not written), likes of posts in
// it, undone reposts in it.
const (
	buildRepostsSQL = `SELECT r.id, r.user_id, r.post_id, p.author_id, r.created_at,
       max(r.id) OVER (PARTITION BY r.post_id)
FROM reposts r JOIN posts p ON p.id = r.post_id
WHERE EXISTS (SELECT 1 FROM reposts n WHERE n.post_id = r.post_id AND n.id >= $1)`
	buildLikesSQL = `SELECT user_id, post_id FROM likes WHERE post_id >= $1`
	buildNamesSQL = `SELECT id, name FROM users WHERE $1::bigint IS NOT NULL`
	// buildUndoneRepostsSQL is every undone repost (its last event an
	// unrepost, no reposts row): its body is a tombstone.
	buildUndoneRepostsSQL = `SELECT (payload->>'repostId')::bigint, (payload->>'reposterId')::bigint,
       (payload->>'postId')::bigint, (payload->>'authorId')::bigint
FROM events e WHERE type = 'post.unreposted.v1' AND (payload->>'repostId')::bigint >= $1
  AND NOT EXISTS (SELECT 1 FROM reposts r WHERE r.id = (e.payload->>'repostId')::bigint)`
)

// buildShares writes the reposts' bodies (tombstones for undone ones),
// reposts:{O}, reposted:{u}, liked:{u} and name:{u}, and returns the rows
// written. first is the horizon's first id.
func (p *Posts) buildShares(ctx context.Context, pg Querier, first int64) (int64, error) {
	var total int64
	stream := func(what, q string, row func(pgx.Rows, redis.Pipeliner) error) error {
		rows, err := pg.Query(ctx, q, first)
		if err != nil {
			return fmt.Errorf("read %s: %w", what, err)
		}
		defer rows.Close()
		pipe := p.rdb.Pipeline()
		flush := func() error {
			if pipe.Len() == 0 {
				return nil
			}
			_, err := pipe.Exec(ctx)
			pipe = p.rdb.Pipeline()
			return err
		}
		n := 0
		for rows.Next() {
			if err := row(rows, pipe); err != nil {
				return fmt.Errorf("read %s: %w", what, err)
			}
			if n++; n%BuildBatch == 0 {
				if err := flush(); err != nil {
					return fmt.Errorf("write %s: %w", what, err)
				}
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read %s: %w", what, err)
		}
		total += int64(n)
		if err := flush(); err != nil {
			return fmt.Errorf("write %s: %w", what, err)
		}
		return nil
	}
	err := stream("reposts", buildRepostsSQL, func(rows pgx.Rows, pipe redis.Pipeliner) error {
		var e events.PostReposted
		var newest int64
		if err := rows.Scan(&e.RepostID, &e.ReposterID, &e.PostID, &e.AuthorID, &e.CreatedAt, &newest); err != nil {
			return err
		}
		p.engage.QueueBuildRepost(ctx, pipe, e.PostID, readmodel.Repost{ID: e.RepostID, Reposter: e.ReposterID}, newest)
		p.engage.QueueReposted(ctx, pipe, e.ReposterID, e.PostID, true)
		return p.cache.QueueSet(ctx, pipe, RepostBody(e))
	})
	if err == nil {
		err = stream("undone reposts", buildUndoneRepostsSQL, func(rows pgx.Rows, pipe redis.Pipeliner) error {
			var id, reposter, post, author int64
			if err := rows.Scan(&id, &reposter, &post, &author); err != nil {
				return err
			}
			return p.cache.QueueSet(ctx, pipe, RepostTombstone(id, reposter, post, author))
		})
	}
	if err == nil {
		err = stream("likes", buildLikesSQL, func(rows pgx.Rows, pipe redis.Pipeliner) error {
			var user, post int64
			if err := rows.Scan(&user, &post); err != nil {
				return err
			}
			p.engage.QueueLiked(ctx, pipe, user, post, true)
			return nil
		})
	}
	if err == nil {
		err = stream("names", buildNamesSQL, func(rows pgx.Rows, pipe redis.Pipeliner) error {
			var user int64
			var name string
			if err := rows.Scan(&user, &name); err != nil {
				return err
			}
			p.names.QueueSet(ctx, pipe, user, name)
			return nil
		})
	}
	return total, err
}

// timelineRowsSQL is, for each owner in $1, up to $2 newest entries of
// the owner: non-deleted posts and live reposts (a repost is an entry of
// the reposter's timeline). Two LATERAL index range scans per author.
const (
	timelineRowsSQL = `
SELECT o.id, p.id, p.created_at
FROM unnest($1::bigint[]) AS o(id)
CROSS JOIN LATERAL (
    (SELECT id, created_at FROM posts
     WHERE author_id = o.id AND NOT deleted
     ORDER BY created_at DESC, id DESC
     LIMIT $2)
    UNION ALL
    (SELECT id, created_at FROM reposts
     WHERE user_id = o.id
     ORDER BY created_at DESC, id DESC
     LIMIT $2)
    ORDER BY created_at DESC, id DESC
    LIMIT $2) p`
)

// eachOwnerPage calls fn, BuildWorkers at a time, with keyset pages of the
// ids and TTLs (ms, 0 for none) listSQL returns ($1 = last id, $2 = page
// size, $3 = arg).
func (c Config) eachOwnerPage(ctx context.Context, pg Querier, listSQL string, arg any, fn func(ids, ttls []int64) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(BuildWorkers)
	var last int64
	for gctx.Err() == nil {
		rows, err := pg.Query(gctx, listSQL, last, BuildOwners, arg)
		if err != nil {
			_ = g.Wait()
			return fmt.Errorf("list owners: %w", err)
		}
		ids := make([]int64, 0, BuildOwners)
		ttls := make([]int64, 0, BuildOwners)
		for rows.Next() {
			var id, ttl int64
			if err := rows.Scan(&id, &ttl); err != nil {
				rows.Close()
				_ = g.Wait()
				return fmt.Errorf("list owners: %w", err)
			}
			ids, ttls = append(ids, id), append(ttls, ttl)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			_ = g.Wait()
			return fmt.Errorf("list owners: %w", err)
		}
		if len(ids) > 0 {
			g.Go(func() error { return fn(ids, ttls) })
			last = ids[len(ids)-1]
		}
		if len(ids) < BuildOwners {
			break
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// Owner lists for the builds.
const (
	// AllUsersSQL pages every user (timelines: every author), no TTL.
	AllUsersSQL = `SELECT id, 0::bigint FROM users WHERE id > $1 AND $3::int IS NOT NULL ORDER BY id LIMIT $2`
)

// writeTimelines writes, per author, the newest posts timelineRowsSQL
// gives (TimelineMax+1 read), as readmodel.Timelines.QueueBuilt bounds
// them, in pipelines cut at about 20,000 members, so one round trip stays
// well inside the client's read timeout on a busy server.
func (p *Timelines) writeTimelines(ctx context.Context, pg Querier, owners []int64) error {
	rows, err := pg.Query(ctx, timelineRowsSQL, owners, p.cfg.TimelineMax+1)
	if err != nil {
		return fmt.Errorf("read posts of %d owners: %w", len(owners), err)
	}
	byOwner := make(map[int64][]readmodel.Entry, len(owners))
	for rows.Next() {
		var owner, id int64
		var at time.Time
		if err := rows.Scan(&owner, &id, &at); err != nil {
			rows.Close()
			return fmt.Errorf("read posts: %w", err)
		}
		// Rows come newest first (the LATERAL's order).
		byOwner[owner] = append(byOwner[owner], readmodel.Entry{ID: id, Ms: millis(at)})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read posts: %w", err)
	}
	pipe := p.rdb.Pipeline()
	pending := 0
	flush := func() error {
		if pending == 0 {
			return nil
		}
		pending = 0
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("write sets: %w", err)
		}
		return nil
	}
	for _, o := range owners {
		if pending += p.timelines.QueueBuilt(ctx, pipe, o, byOwner[o]); pending >= 20_000 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// BuildTimelines writes every author's newest TimelineMax posts, the floor
// when the author has more, and ~built. progress counts authors.
func (p *Timelines) BuildTimelines(ctx context.Context, pg Querier, progress Progress) (int64, error) {
	var total atomic.Int64
	err := p.cfg.eachOwnerPage(ctx, pg, AllUsersSQL, 0, func(ids, _ []int64) error {
		if err := p.writeTimelines(ctx, pg, ids); err != nil {
			return fmt.Errorf("build timelines: %w", err)
		}
		total.Add(int64(len(ids)))
		progress.add(len(ids))
		return nil
	})
	return total.Load(), err
}

// Decoded is one event ready for ApplyBatch.
type Decoded struct {
	Env events.Envelope
	Ev  events.Event
}

// ApplyBatch applies follow, mute and block events, in order, in one pipeline, with the
// same scripts and effects as Apply. Order is kept: one connection, one
// pipeline. On NOSCRIPT the scripts are loaded and the whole batch runs
// again, which the scripts' guards (a followee's newest applied position,
// a pair's version) make harmless.
func (p *Followers) ApplyBatch(ctx context.Context, batch []Decoded) error {
	n := 0
	for _, d := range batch {
		switch d.Ev.(type) {
		case events.Followed, events.Unfollowed:
			// The followee's count is guarded by the position.
			if d.Env.Position < 1 {
				return fmt.Errorf("follow event %s without log position: %w", d.Env.EventID, ErrPermanent)
			}
		case events.Muted, events.Unmuted, events.Blocked, events.Unblocked:
		default:
			continue
		}
		if d.Env.StreamVersion < 1 {
			return fmt.Errorf("follow or mute event %s without stream version: %w", d.Env.EventID, ErrPermanent)
		}
		n++
	}
	if n == 0 {
		return nil
	}
	err := readmodel.Exec(ctx, p.rdb, func(pipe redis.Pipeliner) {
		for _, d := range batch {
			var follower, followee, after int64
			switch e := d.Ev.(type) {
			case events.Followed:
				follower, followee, after = e.FollowerID, e.FolloweeID, e.FolloweeFollowers
			case events.Unfollowed:
				follower, followee, after = e.FollowerID, e.FolloweeID, e.FolloweeFollowers
			case events.Muted:
				p.follows.QueueApplyMute(ctx, pipe, e.MuterID, e.MutedID, d.Env.StreamVersion)
				continue
			case events.Unmuted:
				p.follows.QueueApplyMute(ctx, pipe, e.MuterID, e.MutedID, d.Env.StreamVersion)
				continue
			case events.Blocked:
				// The block pair's version (odd) in both accounts' hashes.
				p.follows.QueueApplyBlock(ctx, pipe, e.BlockerID, e.BlockedID, d.Env.StreamVersion)
				continue
			case events.Unblocked:
				p.follows.QueueApplyBlock(ctx, pipe, e.BlockerID, e.BlockedID, d.Env.StreamVersion)
				continue
			default:
				continue
			}
			p.follows.QueueApply(ctx, pipe, readmodel.FollowEvent{Follower: follower, Followee: followee,
				Version: d.Env.StreamVersion, Position: d.Env.Position, Followers: after})
			// An event whose count lies inside the celebrity band decides
			// nothing (the state before it holds): the set is what the
			// followee's newest event outside the band decided, in log
			// order, as the inbox projector's readmodel.CelebrityAt reads it.
			if celeb, ok := p.pol.Decided(after); ok {
				p.celebs.QueueSetOrdered(ctx, pipe, followee, celeb, readmodel.OrderOf(d.Env.CommitLSN, d.Env.Position))
			}
		}
	})
	if err != nil && !errors.Is(err, ErrPermanent) {
		return fmt.Errorf("apply %d follow events: %w", len(batch), err)
	}
	return err
}
