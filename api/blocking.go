package api

import (
	"net/http"

	"github.com/feedco/feed/commands"
)

// PUT /api/blocking/{userId} -> 204: the caller blocks userId (the follows
// between them end, both ways, and neither can follow the other).
func (s *Server) block(w http.ResponseWriter, r *http.Request, caller int64) error {
	return runOnTarget(w, r, "userId", "userId", s.deps.Commands.Block, func(blocked int64) commands.Block {
		return commands.Block{BlockerID: caller, BlockedID: blocked, Trace: s.trace(r)}
	})
}

// DELETE /api/blocking/{userId} -> 204: the caller unblocks userId.
func (s *Server) unblock(w http.ResponseWriter, r *http.Request, caller int64) error {
	return runOnTarget(w, r, "userId", "userId", s.deps.Commands.Unblock, func(blocked int64) commands.Unblock {
		return commands.Unblock{BlockerID: caller, BlockedID: blocked, Trace: s.trace(r)}
	})
}
