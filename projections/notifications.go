package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/readmodel"
)

// NameNotifications is the notifications projector's name; GroupFor gives
// its consumer group (feed.projection.notifications.v1 at version 1).
const NameNotifications = readmodel.ProjectionNotifications

// Notifier is told of every notification the projector added, and of
// every undo it applied (the live streams publish them); nil in Config is
// the live streams' own (live.go: wake:n:{u} for the users with an open
// stream). Notified and Unnotified are called after the write, on the
// projector's goroutine: they must not block, and their failure is their
// own (the notification is written either way).
type Notifier interface {
	Notified(ctx context.Context, user int64, n readmodel.Notification)
	// Unnotified is called after every undo, also one that changed
	// nothing (a redelivery: the crash it follows may have come between
	// the removal and its wake-up).
	Unnotified(ctx context.Context, user int64, n readmodel.Notification)
}

// Notifications projects each user's notifications (`notif:{u}`,
// readmodel.Notifications): likes, reposts, quotes and replies of their
// posts and follows of them, never for acting on one's own post; each
// undo (unlike, unrepost, unfollow, the deletion of a reply or a quote)
// removes exactly what its do added.
//
// Which events share a key: a like and its unlike are keyed by the liked
// post's author, a follow and its unfollow by the followee, a repost and
// its unrepost by the reposter, a reply or quote and its deletion by
// their author. So each do and its undo are in one partition, in order;
// what differs between partitions are different pairs, whose members
// differ (ZADD and ZREM of different members commute). An event applied
// late after newer ones of its pair (a moved partition, docs/projections.md
// "Several instances of one group") is refused by the pair's stream
// version, kept in the guard hash by undos and by dos above version 1.
//
// Only the horizon is kept (the policy's PostHorizon, readmodel
// Notifications.WithHorizon): a do older than it, and an undo recorded
// before it, write nothing, so a redelivered old event leaves Redis as
// it is; each write trims what has left it, and a set expires with its
// newest notification.
type Notifications struct {
	cfg      Config
	model    readmodel.Notifications
	rdb      redis.UniversalClient
	pg       Querier
	notifier Notifier
}

// NewNotifications returns the notifications projector. pg is read for a
// deleted post's parent and quoted author (PostDeleted carries neither).
func NewNotifications(cfg Config, pg Querier, rdb redis.UniversalClient) (*Notifications, error) {
	cfg, err := projectorConfig(NameNotifications, cfg, rdb)
	if err != nil {
		return nil, err
	}
	if pg == nil {
		return nil, errors.New("new notifications projector: nil PostgreSQL")
	}
	notifier := cfg.Notifier
	if notifier == nil {
		notifier = newLiveWakes(cfg.Keys, rdb, cfg.OnlineRefresh)
	}
	return &Notifications{cfg: cfg, model: cfg.Policy().Notifications(cfg.Keys, cfg.Now),
		rdb: rdb, pg: pg, notifier: notifier}, nil
}

// Name implements Projector.
func (*Notifications) Name() string { return NameNotifications }

// Group implements Projector.
func (p *Notifications) Group() string {
	return GroupFor(NameNotifications, p.cfg.Keys.Version(NameNotifications))
}

// Ignores implements Selective.
func (*Notifications) Ignores(typ string) bool {
	switch typ {
	case events.TypePostCreated, events.TypePostDeleted, events.TypeFollowed, events.TypeUnfollowed,
		events.TypePostLiked, events.TypePostUnliked, events.TypePostReposted, events.TypePostUnreposted:
		return false
	}
	return isCurrentType(typ)
}

// Apply implements Projector.
func (p *Notifications) Apply(ctx context.Context, env events.Envelope, ev events.Event) error {
	v := max(env.StreamVersion, 1)
	switch e := ev.(type) {
	case events.PostLiked:
		if e.LikerID != e.AuthorID {
			return p.add(ctx, e.AuthorID, readmodel.Notification{Type: readmodel.NotifyLike, Actor: e.LikerID, Post: e.PostID, MS: e.LikedAt.UnixMilli()}, v)
		}
	case events.PostUnliked:
		return p.remove(ctx, e.AuthorID, readmodel.Notification{Type: readmodel.NotifyLike, Actor: e.LikerID, Post: e.PostID, MS: undoMs(e.UnlikedAt)}, v)
	case events.PostReposted:
		if e.ReposterID != e.AuthorID {
			return p.add(ctx, e.AuthorID, readmodel.Notification{Type: readmodel.NotifyRepost, Actor: e.ReposterID, Post: e.PostID, MS: e.CreatedAt.UnixMilli()}, v)
		}
	case events.PostUnreposted:
		return p.remove(ctx, e.AuthorID, readmodel.Notification{Type: readmodel.NotifyRepost, Actor: e.ReposterID, Post: e.PostID, MS: undoMs(e.UnrepostedAt)}, v)
	case events.Followed:
		return p.add(ctx, e.FolloweeID, readmodel.Notification{Type: readmodel.NotifyFollow, Actor: e.FollowerID, MS: env.RecordedAt.UnixMilli()}, v)
	case events.Unfollowed:
		return p.remove(ctx, e.FolloweeID, readmodel.Notification{Type: readmodel.NotifyFollow, Actor: e.FollowerID, MS: undoMs(env.RecordedAt)}, v)
	case events.PostCreated:
		ms := e.CreatedAt.UnixMilli()
		if e.ReplyTo != 0 && e.ReplyToAuthor != 0 && e.ReplyToAuthor != e.AuthorID {
			if err := p.add(ctx, e.ReplyToAuthor, readmodel.Notification{Type: readmodel.NotifyReply, Actor: e.AuthorID, Post: e.PostID, MS: ms}, v); err != nil {
				return err
			}
		}
		if e.QuoteOf != 0 && e.QuoteAuthor != 0 && e.QuoteAuthor != e.AuthorID {
			return p.add(ctx, e.QuoteAuthor, readmodel.Notification{Type: readmodel.NotifyQuote, Actor: e.AuthorID, Post: e.PostID, MS: ms}, v)
		}
	case events.PostDeleted:
		return p.deleted(ctx, e, v)
	}
	return nil
}

// deleted removes the notifications a deleted reply or quote gave. The
// event names neither the parent's author nor the quoted one: the posts
// row does (a deleted post's row stays, and an event in Kafka is visible
// in PostgreSQL).
func (p *Notifications) deleted(ctx context.Context, e events.PostDeleted, v int64) error {
	var replyTo, quoteOf *int64
	err := p.pg.QueryRow(ctx, `SELECT reply_to_author, quote_author FROM posts WHERE id = $1`, e.PostID).Scan(&replyTo, &quoteOf)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read deleted post %d: %w", e.PostID, err)
	}
	if replyTo != nil && *replyTo != e.AuthorID {
		if err := p.remove(ctx, *replyTo, readmodel.Notification{Type: readmodel.NotifyReply, Actor: e.AuthorID, Post: e.PostID, MS: undoMs(e.DeletedAt)}, v); err != nil {
			return err
		}
	}
	if quoteOf != nil && *quoteOf != e.AuthorID {
		return p.remove(ctx, *quoteOf, readmodel.Notification{Type: readmodel.NotifyQuote, Actor: e.AuthorID, Post: e.PostID, MS: undoMs(e.DeletedAt)}, v)
	}
	return nil
}

func (p *Notifications) add(ctx context.Context, user int64, n readmodel.Notification, v int64) error {
	added, err := p.model.Add(ctx, p.rdb, user, n, v)
	if err != nil {
		return err
	}
	if added && p.notifier != nil {
		p.notifier.Notified(ctx, user, n)
	}
	return nil
}

func (p *Notifications) remove(ctx context.Context, user int64, n readmodel.Notification, v int64) error {
	if _, err := p.model.Remove(ctx, p.rdb, user, n, v); err != nil {
		return err
	}
	if p.notifier != nil {
		p.notifier.Unnotified(ctx, user, n)
	}
	return nil
}

// undoMs is an undo's millisecond for Remove (0 when the event has
// none): an undo recorded past the notifications' horizon writes nothing.
func undoMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// NotificationsSQL is every live notification from the source of truth,
// ordered by the user notified: likes and reposts of a post by another
// account (the post deleted or not: its notification shows it
// unavailable), live replies and quotes by another account, follows.
// Columns: user, type, actor, post (0 for a follow), millisecond.
const NotificationsSQL = `
SELECT target, typ, actor, post, floor(extract(epoch FROM at) * 1000)::bigint FROM (
    SELECT p.author_id AS target, 1 AS typ, l.user_id AS actor, l.post_id AS post, l.created_at AS at
      FROM likes l JOIN posts p ON p.id = l.post_id WHERE l.user_id <> p.author_id
    UNION ALL
    SELECT p.author_id, 2, r.user_id, r.post_id, r.created_at
      FROM reposts r JOIN posts p ON p.id = r.post_id WHERE r.user_id <> p.author_id
    UNION ALL
    SELECT q.quote_author, 3, q.author_id, q.id, q.created_at
      FROM posts q WHERE q.quote_author IS NOT NULL AND NOT q.deleted AND q.quote_author <> q.author_id
    UNION ALL
    SELECT r.reply_to_author, 4, r.author_id, r.id, r.created_at
      FROM posts r WHERE r.reply_to_author IS NOT NULL AND NOT r.deleted AND r.reply_to_author <> r.author_id
    UNION ALL
    SELECT f.followee_id, 5, f.follower_id, 0, f.created_at FROM follows f
) n ORDER BY target`

// BuildNotifications writes every user's notifications from PostgreSQL
// (`feed rebuild notifications`), as the projector leaves them: the
// newest Max per user inside the horizon, the floor below them (the
// newest left out); a user with none inside the horizon gets no set. It
// returns the users built.
func (p *Notifications) BuildNotifications(ctx context.Context, pg Querier, progress Progress) (int64, error) {
	rows, err := pg.Query(ctx, NotificationsSQL)
	if err != nil {
		return 0, fmt.Errorf("read notifications: %w", err)
	}
	defer rows.Close()
	var (
		users   int64
		cur     int64
		pending []readmodel.Notification
		pipe    = p.rdb.Pipeline()
		queued  int
	)
	flush := func(force bool) error {
		if queued == 0 || (!force && queued < BuildBatch) {
			return nil
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("write notifications: %w", err)
		}
		progress.add(queued)
		queued = 0
		return nil
	}
	emit := func() error {
		if len(pending) == 0 {
			return nil
		}
		p.model.WriteRebuilt(ctx, pipe, cur, pending)
		pending = pending[:0]
		users++
		queued++
		return flush(false)
	}
	for rows.Next() {
		var (
			user int64
			typ  int32
			n    readmodel.Notification
		)
		if err := rows.Scan(&user, &typ, &n.Actor, &n.Post, &n.MS); err != nil {
			return users, fmt.Errorf("read notifications: %w", err)
		}
		n.Type = byte(typ)
		if user != cur {
			if err := emit(); err != nil {
				return users, err
			}
			cur = user
		}
		pending = append(pending, n)
	}
	if err := rows.Err(); err != nil {
		return users, fmt.Errorf("read notifications: %w", err)
	}
	if err := emit(); err != nil {
		return users, err
	}
	return users, flush(true)
}
