package seed

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"golang.org/x/sync/errgroup"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/progress"
)

// ErrNotEmpty is returned when the database already has users or events and
// the write was not forced.
var ErrNotEmpty = errors.New("database is not empty")

// DB is what the writer needs from PostgreSQL; *pgxpool.Pool satisfies it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// WriteConfig tunes the write. The zero value means the defaults.
type WriteConfig struct {
	// BatchEvents is how many events one transaction appends. A protocol-1
	// CDC receives a transaction only after its commit, whole (docs/cdc.md),
	// so batches trade seeding speed against the burstiness downstream.
	// Default 20,000.
	BatchEvents int
	// Progress shows each phase (users, follows, posts) as its events are
	// committed; nil shows nothing.
	Progress *progress.Progress
}

func (c WriteConfig) withDefaults() WriteConfig {
	c.BatchEvents = cmp.Or(c.BatchEvents, 20_000)
	return c
}

// IDOffset returns the id offset a forced seed must use (the highest user
// id), and whether the database already holds users or events.
func IDOffset(ctx context.Context, db DB) (offset int64, nonEmpty bool, err error) {
	err = db.QueryRow(ctx, `SELECT coalesce((SELECT max(id) FROM users), 0),
		EXISTS (SELECT 1 FROM users) OR EXISTS (SELECT 1 FROM events)`).Scan(&offset, &nonEmpty)
	if err != nil {
		return 0, false, fmt.Errorf("inspect database: %w", err)
	}
	return offset, nonEmpty, nil
}

// batch is one transaction's worth of rows.
type batch struct {
	phase  string
	users  [][]any // id, name
	follow [][]any // follower_id, followee_id
	posts  [][]any // id, author_id, content, created_at
	events [][]any // event_id, stream_id, stream_version, type, payload, metadata
	// count deltas per user id (follows phase)
	ids, fc, gc []int64
	lastID      int64 // users phase: the identity sequence moves here
}

// Write appends the dataset to the log with its inline tables, in
// transactions of about cfg.BatchEvents events: users (UserRegistered),
// then follows (Followed, followeeFollowers the running count), then posts
// in time order (PostCreated, authorFollowers the final count). Each
// transaction updates users' counts for its own follows, so the tables and
// the log agree at every commit. Transactions commit one after another, so
// commit order is generation order (the running counts rely on it).
func Write(ctx context.Context, db DB, d *Dataset, cfg WriteConfig) (Summary, error) {
	cfg = cfg.withDefaults()
	if cfg.BatchEvents < 1 {
		return Summary{}, fmt.Errorf("batch events %d: want at least 1", cfg.BatchEvents)
	}
	total := int64(len(d.InDegree) + len(d.Edges) + len(d.Posts))
	ch := make(chan batch, 2)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(ch)
		return produce(gctx, d, cfg.BatchEvents, ch)
	})
	sum := Summary{Events: total}
	start := time.Now()
	// The events of each phase: one user.registered per user, one
	// follow per edge, one post.created per post.
	phaseEvents := map[string]int64{"users": int64(len(d.InDegree)), "follows": int64(len(d.Edges)), "posts": int64(len(d.Posts))}
	g.Go(func() error {
		prog, phase := cfg.Progress, ""
		for b := range ch {
			if b.phase != phase {
				if phase != "" {
					prog.Finish()
				}
				phase = b.phase
				prog.Start("seed: "+phase, "events", phaseEvents[phase])
			}
			if err := pgx.BeginFunc(gctx, db, func(tx pgx.Tx) error { return writeBatch(gctx, tx, b) }); err != nil {
				prog.Clear() // no final line for a phase that did not end
				return fmt.Errorf("write %s batch: %w", b.phase, err)
			}
			sum.Transactions++
			prog.Add(len(b.events))
		}
		if phase != "" && gctx.Err() == nil {
			prog.Finish()
		} else {
			prog.Clear()
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return sum, err
	}
	sum.Elapsed = time.Since(start)
	return sum, nil
}

// Summary says what Write did.
type Summary struct {
	Events       int64
	Transactions int
	Elapsed      time.Duration
}

func writeBatch(ctx context.Context, tx pgx.Tx, b batch) error {
	if len(b.users) > 0 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"users"}, []string{"id", "name"}, pgx.CopyFromRows(b.users)); err != nil {
			return fmt.Errorf("copy users: %w", err)
		}
		// Keep the identity ahead of the explicit ids, so registrations
		// through the API never collide with seeded users.
		if _, err := tx.Exec(ctx, `SELECT setval(pg_get_serial_sequence('users', 'id'), $1::bigint)`, b.lastID); err != nil {
			return fmt.Errorf("move user id sequence: %w", err)
		}
	}
	if len(b.follow) > 0 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"follows"}, []string{"follower_id", "followee_id"}, pgx.CopyFromRows(b.follow)); err != nil {
			return fmt.Errorf("copy follows: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE users u SET follower_count = u.follower_count + d.fc, following_count = u.following_count + d.gc
			FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS d(id, fc, gc) WHERE u.id = d.id`, b.ids, b.fc, b.gc); err != nil {
			return fmt.Errorf("update counts: %w", err)
		}
	}
	if len(b.posts) > 0 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"posts"}, []string{"id", "author_id", "content", "created_at"}, pgx.CopyFromRows(b.posts)); err != nil {
			return fmt.Errorf("copy posts: %w", err)
		}
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"events"},
		[]string{"event_id", "stream_id", "stream_version", "type", "payload", "metadata"}, pgx.CopyFromRows(b.events)); err != nil {
		return fmt.Errorf("copy events: %w", err)
	}
	return nil
}

// eventIDs makes deterministic UUIDs (version 4 layout) from the seed and
// the event's index in the dataset, so the same seed gives the same log.
type eventIDs struct{ seed, n uint64 }

func (g *eventIDs) next() pgtype.UUID {
	g.n++
	var u [16]byte
	binary.BigEndian.PutUint64(u[:8], splitmix(g.seed^g.n*0x9e3779b97f4a7c15))
	binary.BigEndian.PutUint64(u[8:], splitmix(g.seed+g.n))
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return pgtype.UUID{Bytes: u, Valid: true}
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// eventRow encodes one event as the commands do (events.Encode, metadata
// with the actor) into a COPY row.
func eventRow(ids *eventIDs, e events.Event, actor int64, correlation string) ([]any, error) {
	p, err := events.Encode(e)
	if err != nil {
		return nil, err
	}
	m, err := json.Marshal(events.Metadata{CorrelationID: correlation, Actor: strconv.FormatInt(actor, 10)})
	if err != nil {
		return nil, fmt.Errorf("encode metadata: %w", err)
	}
	return []any{ids.next(), e.StreamID(), int64(1), e.EventType(), string(p), string(m)}, nil
}

// produce turns the dataset into batches, in order.
func produce(ctx context.Context, d *Dataset, size int, ch chan<- batch) error {
	ids := &eventIDs{seed: d.Params.Seed}
	corr := "seed-" + strconv.FormatUint(d.Params.Seed, 10)
	send := func(b batch) error {
		select {
		case ch <- b:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// Users.
	b := batch{phase: "users"}
	for i := range d.InDegree {
		id := d.UserID(i)
		name := UserName(i)
		row, err := eventRow(ids, events.UserRegistered{UserID: id, Name: name}, id, corr)
		if err != nil {
			return err
		}
		b.users = append(b.users, []any{id, name})
		b.events = append(b.events, row)
		b.lastID = id
		if len(b.events) >= size {
			if err := send(b); err != nil {
				return err
			}
			b = batch{phase: "users"}
		}
	}
	if len(b.events) > 0 {
		if err := send(b); err != nil {
			return err
		}
	}
	// Follows, with the followee's running follower count.
	count := make([]int64, len(d.InDegree))
	b = batch{phase: "follows"}
	deltas := map[int64][2]int64{}
	flush := func() error {
		for id, dl := range deltas {
			b.ids, b.fc, b.gc = append(b.ids, id), append(b.fc, dl[0]), append(b.gc, dl[1])
		}
		clear(deltas)
		if err := send(b); err != nil {
			return err
		}
		b = batch{phase: "follows"}
		return nil
	}
	for k, e := range d.Edges {
		fi, ei := int(e>>32), int(uint32(e))
		follower, followee := d.UserID(fi), d.UserID(ei)
		count[ei]++
		row, err := eventRow(ids, events.Followed{FollowerID: follower, FolloweeID: followee, FolloweeFollowers: count[ei]}, follower, corr)
		if err != nil {
			return err
		}
		b.follow = append(b.follow, []any{follower, followee})
		b.events = append(b.events, row)
		de := deltas[followee]
		de[0]++
		deltas[followee] = de
		dr := deltas[follower]
		dr[1]++
		deltas[follower] = dr
		if len(b.events) >= size || k == len(d.Edges)-1 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	// Posts, in time order, carrying the author's (final) follower count.
	b = batch{phase: "posts"}
	for k, p := range d.Posts {
		ai := int(p.AuthorID - d.Params.IDOffset - 1)
		row, err := eventRow(ids, events.PostCreated{PostID: p.ID, AuthorID: p.AuthorID, Content: p.Content, CreatedAt: p.CreatedAt, AuthorFollowers: count[ai]}, p.AuthorID, corr)
		if err != nil {
			return err
		}
		b.posts = append(b.posts, []any{p.ID, p.AuthorID, p.Content, p.CreatedAt})
		b.events = append(b.events, row)
		if len(b.events) >= size || k == len(d.Posts)-1 {
			if err := send(b); err != nil {
				return err
			}
			b = batch{phase: "posts"}
		}
	}
	return nil
}
