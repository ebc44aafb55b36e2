package commands

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// User is an account as the inline projection holds it. Its JSON form is
// what an idempotency key stores for a replay of RegisterUser: renaming a
// tag breaks the replay of keys stored before.
type User struct {
	ID             int64  `json:"id"`
	Name           string `json:"name"`
	FollowerCount  int64  `json:"followerCount"`
	FollowingCount int64  `json:"followingCount"`
}

// GetUser reads one account from the users table the commands maintain. It
// is the strongly consistent view (the same rows the commands validate
// against), so a client sees its own writes at once.
func (c *Commands) GetUser(ctx context.Context, id int64) (User, error) {
	if err := validateID("id", id); err != nil {
		return User{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.TxTimeout)
	defer cancel()
	u := User{ID: id}
	err := c.db.QueryRow(ctx, `SELECT name, follower_count, following_count FROM users WHERE id = $1`, id).
		Scan(&u.Name, &u.FollowerCount, &u.FollowingCount)
	if errors.Is(err, pgx.ErrNoRows) {
		return User{}, fmt.Errorf("user %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return User{}, fmt.Errorf("read user %d: %w", id, err)
	}
	return u, nil
}

// lockUsersSQL takes row locks on the users $1 in id order, so two
// transactions locking the same pair never deadlock.
const lockUsersSQL = `SELECT id FROM users WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE`

// lockUsers takes row locks on the given users in id order (lockUsersSQL)
// and fails with ErrNotFound naming the first id that does not exist.
func lockUsers(ctx context.Context, tx pgx.Tx, ids ...int64) error {
	rows, err := tx.Query(ctx, lockUsersSQL, ids)
	if err != nil {
		return fmt.Errorf("lock users: %w", err)
	}
	return checkLocked(rows, ids)
}

// checkLocked reads lockUsersSQL's rows, closes them, and fails with
// ErrNotFound naming the first of ids they do not hold.
func checkLocked(rows pgx.Rows, ids []int64) error {
	found := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("lock users: %w", err)
		}
		found[id] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("lock users: %w", err)
	}
	for _, id := range ids {
		if !found[id] {
			return fmt.Errorf("user %d: %w", id, ErrNotFound)
		}
	}
	return nil
}
