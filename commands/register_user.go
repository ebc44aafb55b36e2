package commands

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/events"
)

// RegisterUser creates an account. It needs no identity: the new user is the
// actor of its own registration.
type RegisterUser struct {
	Name  string
	Trace Trace `json:"-"`
}

// Actor implements Command: 0, a registration has no identity yet (its
// idempotency keys share one scope).
func (RegisterUser) Actor() int64 { return 0 }

// registerUser is RegisterUser's work: the users row and UserRegistered at
// version 1 of user-{id}.
func registerUser(cfg Config) TxHandler[RegisterUser, User] {
	return func(ctx context.Context, tx pgx.Tx, cmd RegisterUser) (User, error) {
		if err := validateText("name", cmd.Name, cfg.MaxNameChars); err != nil {
			return User{}, err
		}
		u := User{Name: cmd.Name}
		if err := tx.QueryRow(ctx, `INSERT INTO users (name) VALUES ($1) RETURNING id`, cmd.Name).Scan(&u.ID); err != nil {
			return User{}, fmt.Errorf("insert user: %w", err)
		}
		meta := cmd.Trace.metadata(u.ID)
		if err := Append(ctx, tx, 0, meta, events.UserRegistered{UserID: u.ID, Name: u.Name}); err != nil {
			return User{}, err
		}
		return u, nil
	}
}
