package api

import (
	"net/http"

	"github.com/feedco/feed/commands"
)

// PUT /api/following/{userId} -> 204: the caller follows userId.
func (s *Server) follow(w http.ResponseWriter, r *http.Request, caller int64) error {
	followee, err := targetID(r, "userId", "userId")
	if err != nil {
		return err
	}
	_, _, err = runCommand(w, r, s.deps.Commands.Follow, commands.Follow{FollowerID: caller, FolloweeID: followee, Trace: s.trace(r)}, http.StatusNoContent, nil)
	return err
}

// DELETE /api/following/{userId} -> 204: the caller unfollows userId.
func (s *Server) unfollow(w http.ResponseWriter, r *http.Request, caller int64) error {
	followee, err := targetID(r, "userId", "userId")
	if err != nil {
		return err
	}
	_, _, err = runCommand(w, r, s.deps.Commands.Unfollow, commands.Unfollow{FollowerID: caller, FolloweeID: followee, Trace: s.trace(r)}, http.StatusNoContent, nil)
	return err
}
