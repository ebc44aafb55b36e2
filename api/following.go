package api

import (
	"net/http"

	"github.com/feedco/feed/commands"
)

// PUT /api/following/{userId} -> 204: the caller follows userId.
func (s *Server) follow(w http.ResponseWriter, r *http.Request, caller int64) error {
	return runOnTarget(w, r, "userId", "userId", s.deps.Commands.Follow, func(followee int64) commands.Follow {
		return commands.Follow{FollowerID: caller, FolloweeID: followee, Trace: s.trace(r)}
	})
}

// DELETE /api/following/{userId} -> 204: the caller unfollows userId.
func (s *Server) unfollow(w http.ResponseWriter, r *http.Request, caller int64) error {
	return runOnTarget(w, r, "userId", "userId", s.deps.Commands.Unfollow, func(followee int64) commands.Unfollow {
		return commands.Unfollow{FollowerID: caller, FolloweeID: followee, Trace: s.trace(r)}
	})
}
