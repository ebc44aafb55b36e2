package api

import (
	"context"
	"net/http"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/commands"
)

// PUT /api/following/{userId} -> 204: the caller follows userId.
func (s *Server) follow(w http.ResponseWriter, r *http.Request, caller int64) error {
	return s.writeNoContent(w, r, caller, "userId", "userId", func(ctx context.Context, tx pgx.Tx, followee int64) error {
		_, err := s.deps.Commands.Follow.Exec(ctx, tx, commands.Follow{FollowerID: caller, FolloweeID: followee, Trace: s.trace(r)})
		return err
	})
}

// DELETE /api/following/{userId} -> 204: the caller unfollows userId.
func (s *Server) unfollow(w http.ResponseWriter, r *http.Request, caller int64) error {
	return s.writeNoContent(w, r, caller, "userId", "userId", func(ctx context.Context, tx pgx.Tx, followee int64) error {
		_, err := s.deps.Commands.Unfollow.Exec(ctx, tx, commands.Unfollow{FollowerID: caller, FolloweeID: followee, Trace: s.trace(r)})
		return err
	})
}

// writeNoContent runs a 204 write on the id in the path variable varName
// (reported as field when malformed): the shape of follow, unfollow and
// delete.
func (s *Server) writeNoContent(w http.ResponseWriter, r *http.Request, caller int64, varName, field string, exec func(context.Context, pgx.Tx, int64) error) error {
	id, err := parseID(field, mux.Vars(r)[varName])
	if err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	_, err = s.runWrite(w, r, caller, body, func(ctx context.Context, tx pgx.Tx) (int, any, error) {
		return http.StatusNoContent, nil, exec(ctx, tx, id)
	})
	return err
}
