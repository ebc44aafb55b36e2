package snowflake

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Leases: two live processes never share a node id. A process leases its
// node id in PostgreSQL's node_leases at start-up (migration 053): a given
// one (FEED_NODE_ID), refused while another live process holds it (a
// start may wait for a killed holder's lease to run out, WaitForExpiry),
// or the lowest free one. It renews the lease every TTL/3 and gives it up when
// it stops; a process that could not renew it before it expired stops
// issuing ids (Run returns an error, and the role stops). Another process
// takes a node id only once its lease expired or was released.
//
// The lease also carries the node's high-water mark: the highest
// millisecond its holder may have issued ids in. A new holder's generator
// issues no id at or below it (Generator.Resume), so a clock that stepped
// back across a restart cannot issue an id twice. At every renewal the
// mark is set ahead of the holder's clock by two renewal intervals (what
// it may reach before the next renewal, and less than the TTL, so a
// successor that waited for the lease to expire finds its clock past the
// mark); at release, to the last millisecond the holder actually used.

// LeaseDB is what a lease needs of PostgreSQL; *pgxpool.Pool is one.
type LeaseDB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// LeaseConfig says which node id to lease and for how long.
type LeaseConfig struct {
	// Node is the node id wanted (0..1023), or negative for the lowest
	// free one.
	Node int64
	// Holder names the process in node_leases (host, pid), for the
	// message of a refused start. Required.
	Holder string
	// TTL is how long a lease lasts without renewal. Default 30s.
	TTL time.Duration
	// WaitForExpiry makes a lease of a given Node that another holder
	// has wait, up to about a TTL, for that lease to expire, as a process
	// killed without releasing it leaves it: a restart with the same
	// node id then starts once the dead holder's lease ran out. A holder
	// that renews its lease meanwhile is live, and the node is refused
	// (ErrNodeTaken) as without it.
	WaitForExpiry bool
	Logger        *slog.Logger
}

// ErrNodeTaken is a node id another live process holds.
var ErrNodeTaken = errors.New("the node id is leased by another live process")

// Lease is a node id held by this process, with its generator.
type Lease struct {
	db  LeaseDB
	cfg LeaseConfig
	gen *Generator
	// markAt is when this process's clock reaches the high-water mark
	// persisted last: the lease must be renewed before, or ids past it
	// could be issued again by a successor.
	markAt time.Time
}

// AcquireLease leases cfg.Node (or the lowest free node id) and returns
// the lease with a generator for it, resumed past the node's high-water
// mark.
func AcquireLease(ctx context.Context, db LeaseDB, cfg LeaseConfig) (*Lease, error) {
	cfg.TTL = cmp.Or(cfg.TTL, 30*time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Holder == "" {
		return nil, errors.New("snowflake lease: no holder name")
	}
	if cfg.Node > maxNode {
		return nil, fmt.Errorf("snowflake node %d out of range 0..%d", cfg.Node, maxNode)
	}
	l := &Lease{db: db, cfg: cfg}
	var (
		node, hw int64
		err      error
	)
	switch {
	case cfg.Node >= 0 && cfg.WaitForExpiry:
		node = cfg.Node
		hw, err = l.takeWhenExpired(ctx, node)
	case cfg.Node >= 0:
		node = cfg.Node
		hw, err = l.take(ctx, node)
	default:
		node, hw, err = l.takeFree(ctx)
	}
	if err != nil {
		return nil, err
	}
	if l.gen, err = New(node); err != nil {
		return nil, err
	}
	l.gen.Resume(hw)
	return l, nil
}

// take leases node: a new row, an expired lease or one of this holder's.
// It returns the node's high-water mark, or ErrNodeTaken with the holder.
func (l *Lease) take(ctx context.Context, node int64) (int64, error) {
	start := time.Now()
	var hw int64
	err := l.db.QueryRow(ctx, `
		INSERT INTO node_leases AS l (node_id, holder, expires_at) VALUES ($1, $2, now() + $3::interval)
		ON CONFLICT (node_id) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
		WHERE l.expires_at < now() OR l.holder = EXCLUDED.holder
		RETURNING high_water_ms`, node, l.cfg.Holder, l.cfg.TTL.String()).Scan(&hw)
	if errors.Is(err, pgx.ErrNoRows) {
		holder, until, qerr := l.holderOf(ctx, node)
		if qerr != nil {
			return 0, fmt.Errorf("node id %d: %w", node, ErrNodeTaken)
		}
		return 0, fmt.Errorf("node id %d: %w (%s, until %s unless renewed)", node, ErrNodeTaken, holder, until.UTC().Format(time.RFC3339))
	}
	if err != nil {
		return 0, fmt.Errorf("lease node id %d: %w", node, err)
	}
	// Taken at the node's mark: the next renewal moves it ahead.
	l.markAt = start.Add(l.cfg.TTL / 3)
	return hw, nil
}

// holderOf returns who holds node's lease and until when.
func (l *Lease) holderOf(ctx context.Context, node int64) (holder string, until time.Time, err error) {
	err = l.db.QueryRow(ctx, `SELECT holder, expires_at FROM node_leases WHERE node_id = $1`, node).Scan(&holder, &until)
	return holder, until, err
}

// takeWhenExpired leases node as take does, but while another holder has
// it, polls until that lease expires (then takes it) or is renewed (then
// the holder is live: ErrNodeTaken). It waits about a TTL at most.
func (l *Lease) takeWhenExpired(ctx context.Context, node int64) (int64, error) {
	var first time.Time
	for {
		hw, err := l.take(ctx, node)
		if !errors.Is(err, ErrNodeTaken) {
			return hw, err
		}
		holder, until, qerr := l.holderOf(ctx, node)
		switch {
		case qerr != nil:
			// Released between the two statements: take it now.
		case first.IsZero():
			first = until
			l.cfg.Logger.Warn("snowflake: waiting for the lease of a node id to expire (a holder that renews it is live, and the start is refused)",
				"node", node, "holder", holder, "until", until.UTC().Format(time.RFC3339))
		case until.After(first):
			return 0, err
		}
		wait := min(max(time.Until(until), 50*time.Millisecond), time.Second)
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("lease node id %d: %w", node, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// takeFree leases the lowest node id no live process holds.
func (l *Lease) takeFree(ctx context.Context) (node, hw int64, err error) {
	for range 32 { // another process may take the same one first: try the next
		err = l.db.QueryRow(ctx, `
			SELECT n FROM generate_series(0, 1023) AS n
			WHERE NOT EXISTS (SELECT 1 FROM node_leases WHERE node_id = n AND expires_at >= now() AND holder <> $1)
			ORDER BY n LIMIT 1`, l.cfg.Holder).Scan(&node)
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, 0, errors.New("lease a node id: all 1024 are leased by live processes")
		}
		if err != nil {
			return 0, 0, fmt.Errorf("find a free node id: %w", err)
		}
		if hw, err = l.take(ctx, node); !errors.Is(err, ErrNodeTaken) {
			return node, hw, err
		}
	}
	return 0, 0, err
}

// Node is the leased node id.
func (l *Lease) Node() int64 { return l.gen.node }

// Generator issues the node's ids.
func (l *Lease) Generator() *Generator { return l.gen }

// Run renews the lease every TTL/3 until ctx ends, then releases it. It
// returns an error when the lease could not be renewed before the clock
// nears its high-water mark (two failed renewals), or was taken over: ids
// issued after that could collide. Whoever issues ids stops before Run
// returns (the role's services stop in reverse order).
func (l *Lease) Run(ctx context.Context) error {
	every := l.cfg.TTL / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return l.Release()
		case <-t.C:
		}
		if err := l.renew(ctx, 2*every); err != nil {
			if ctx.Err() != nil {
				return l.Release()
			}
			if time.Now().After(l.markAt.Add(-every / 2)) {
				return fmt.Errorf("node id %d: the lease could not be renewed in time: %w", l.Node(), err)
			}
			l.cfg.Logger.Warn("snowflake: lease renewal failed; retrying", "node", l.Node(), "err", err)
		}
	}
}

// renew extends the lease and moves the high-water mark ahead of the
// clock by ahead.
func (l *Lease) renew(ctx context.Context, ahead time.Duration) error {
	start := time.Now()
	mark := max(l.gen.last(), msSince(start.Add(ahead)))
	tag, err := l.db.Exec(ctx, `
		UPDATE node_leases SET expires_at = now() + $3::interval, high_water_ms = greatest(high_water_ms, $4)
		WHERE node_id = $1 AND holder = $2`, l.Node(), l.cfg.Holder, l.cfg.TTL.String(), mark)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("the lease is gone: %w", ErrNodeTaken)
	}
	l.markAt = start.Add(ahead)
	return nil
}

// Release gives the lease up, its high-water mark the last millisecond
// used, so that the next holder may take it at once. Run releases it when
// it ends; a process that never ran it (it failed to start) releases it
// itself. Once released, the generator must issue no more ids; releasing
// again changes nothing (a new holder's row is not this holder's).
func (l *Lease) Release() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := l.db.Exec(ctx, `
		UPDATE node_leases SET expires_at = now() - interval '1 second', high_water_ms = $3
		WHERE node_id = $1 AND holder = $2`, l.Node(), l.cfg.Holder, l.gen.last())
	if err != nil {
		return fmt.Errorf("release node id %d: %w", l.Node(), err)
	}
	return nil
}
