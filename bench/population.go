package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is what the benchmark needs from PostgreSQL; *pgxpool.Pool
// satisfies it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Population is who does what in a run, chosen from the seeded database.
type Population struct {
	// Authors post; all users, with their follower counts.
	Authors   []int64
	Followers map[int64]int64
	// Readers read their feed (warmed before the run).
	Readers []int64
	// Watchers maps an author to the readers who follow them: a probe
	// polls one of them.
	Watchers map[int64][]int64
	// Churners follow and unfollow; Following holds whom each follows.
	Churners  []int64
	Following map[int64][]int64
	// Follows is the number of follows rows (for the report).
	Follows int64
}

// LoadPopulation reads the users and picks readers and churners (disjoint,
// chosen with seed), with the follows they need.
func LoadPopulation(ctx context.Context, db Querier, readers, churners int, seed uint64) (*Population, error) {
	p := &Population{Followers: map[int64]int64{}, Watchers: map[int64][]int64{}, Following: map[int64][]int64{}}
	rows, err := db.Query(ctx, `SELECT id, follower_count FROM users ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("load users: %w", err)
	}
	for rows.Next() {
		var id, n int64
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("load users: %w", err)
		}
		p.Authors = append(p.Authors, id)
		p.Followers[id] = n
		p.Follows += n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load users: %w", err)
	}
	if len(p.Authors) < 2 {
		return nil, errors.New("load users: fewer than 2 users (run `feed seed` first)")
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	perm := rng.Perm(len(p.Authors))
	readers = min(readers, len(perm)/2)
	churners = min(churners, len(perm)-readers)
	for _, i := range perm[:readers] {
		p.Readers = append(p.Readers, p.Authors[i])
	}
	for _, i := range perm[readers : readers+churners] {
		p.Churners = append(p.Churners, p.Authors[i])
	}
	slices.Sort(p.Readers)
	slices.Sort(p.Churners)
	load := func(users []int64, fn func(follower, followee int64)) error {
		rows, err := db.Query(ctx, `SELECT follower_id, followee_id FROM follows WHERE follower_id = ANY($1) ORDER BY follower_id, followee_id`, users)
		if err != nil {
			return fmt.Errorf("load follows: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var a, b int64
			if err := rows.Scan(&a, &b); err != nil {
				return fmt.Errorf("load follows: %w", err)
			}
			fn(a, b)
		}
		return rows.Err()
	}
	if err := load(p.Readers, func(r, a int64) { p.Watchers[a] = append(p.Watchers[a], r) }); err != nil {
		return nil, err
	}
	if err := load(p.Churners, func(c, a int64) { p.Following[c] = append(p.Following[c], a) }); err != nil {
		return nil, err
	}
	return p, nil
}
