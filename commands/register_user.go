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
	Trace Trace
}

// RegisterUserHandler handles RegisterUser.
type RegisterUserHandler struct {
	tx  *Runner
	cfg Config
}

// Handle registers the user in its own transaction.
func (h *RegisterUserHandler) Handle(ctx context.Context, cmd RegisterUser) (u User, err error) {
	err = h.tx.Run(ctx, func(ctx context.Context, tx pgx.Tx) error {
		u, err = h.Exec(ctx, tx, cmd)
		return err
	})
	return u, err
}

// Exec registers the user inside tx: the users row and UserRegistered at
// version 1 of user-{id}.
func (h *RegisterUserHandler) Exec(ctx context.Context, tx pgx.Tx, cmd RegisterUser) (User, error) {
	if err := validateText("name", cmd.Name, h.cfg.MaxNameChars); err != nil {
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
