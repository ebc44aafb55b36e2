package api

import (
	"net/http"
	"strconv"

	"github.com/gorilla/mux"

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
	var req registerUserRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	cmd := commands.RegisterUser{Name: req.Name, Trace: s.trace(r)}
	_, _, err := runCommand(w, r, s.deps.Commands.RegisterUser, cmd, http.StatusCreated, func(u commands.User) any { return toUserJSON(u) },
		func(u commands.User, h http.Header) { h.Set("Location", "/api/users/"+strconv.FormatInt(u.ID, 10)) })
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
