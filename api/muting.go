package api

import (
	"net/http"

	"github.com/feedco/feed/commands"
)

// PUT /api/muting/{userId} -> 204: the caller mutes userId (their posts
// leave the caller's home feed; following is unchanged).
func (s *Server) mute(w http.ResponseWriter, r *http.Request, caller int64) error {
	return runOnTarget(w, r, "userId", "userId", s.deps.Commands.Mute, func(muted int64) commands.Mute {
		return commands.Mute{MuterID: caller, MutedID: muted, Trace: s.trace(r)}
	})
}

// DELETE /api/muting/{userId} -> 204: the caller unmutes userId.
func (s *Server) unmute(w http.ResponseWriter, r *http.Request, caller int64) error {
	return runOnTarget(w, r, "userId", "userId", s.deps.Commands.Unmute, func(muted int64) commands.Unmute {
		return commands.Unmute{MuterID: caller, MutedID: muted, Trace: s.trace(r)}
	})
}
