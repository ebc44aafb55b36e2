package api

import (
	"context"
	"net/http"
	"strconv"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/commands"
)

// userJSON is the user resource; ids are strings (JSON numbers lose
// precision past 2^53).
type userJSON struct {
	ID             string `json:"id"`
	Name           string `json:"name"`
	FollowerCount  int64  `json:"followerCount"`
	FollowingCount int64  `json:"followingCount"`
}

func toUserJSON(u commands.User) userJSON {
	return userJSON{ID: strconv.FormatInt(u.ID, 10), Name: u.Name, FollowerCount: u.FollowerCount, FollowingCount: u.FollowingCount}
}

// POST /api/users {"name"} -> 201 user. Needs no identity.
func (s *Server) registerUser(w http.ResponseWriter, r *http.Request, _ int64) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var req registerUserRequest
	if err := decodeJSON(body, &req); err != nil {
		return err
	}
	_, err = s.runWrite(w, r, 0, body, func(ctx context.Context, tx pgx.Tx) (int, any, error) {
		u, err := s.deps.Commands.RegisterUser.Exec(ctx, tx, commands.RegisterUser{Name: req.Name, Trace: s.trace(r)})
		return http.StatusCreated, toUserJSON(u), err
	})
	return err
}

// GET /api/users/{id} -> 200 user, from the write side's users table.
func (s *Server) getUser(w http.ResponseWriter, r *http.Request, _ int64) error {
	id, err := parseID("id", mux.Vars(r)["id"])
	if err != nil {
		return err
	}
	u, err := s.deps.Commands.GetUser(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, toUserJSON(u))
}
