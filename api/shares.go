package api

import (
	"net/http"

	"github.com/feedco/feed/commands"
)

// PUT /api/posts/{id}/repost -> 204: the caller reposts the post (a
// repost's id: its original); again: still 204. A missing or deleted post
// is 404, one whose author blocks the caller 403.
func (s *Server) repost(w http.ResponseWriter, r *http.Request, caller int64) error {
	return runOnTarget(w, r, "id", "post id", s.deps.Commands.Repost, func(id int64) commands.Repost {
		return commands.Repost{UserID: caller, PostID: id, Trace: s.trace(r)}
	})
}

// DELETE /api/posts/{id}/repost -> 204: the caller undoes its repost;
// again, or never reposted: still 204.
func (s *Server) unrepost(w http.ResponseWriter, r *http.Request, caller int64) error {
	return runOnTarget(w, r, "id", "post id", s.deps.Commands.Unrepost, func(id int64) commands.Unrepost {
		return commands.Unrepost{UserID: caller, PostID: id, Trace: s.trace(r)}
	})
}

// PUT /api/posts/{id}/like -> 204: the caller likes the post; again:
// still 204. Refused as a repost is.
func (s *Server) like(w http.ResponseWriter, r *http.Request, caller int64) error {
	return runOnTarget(w, r, "id", "post id", s.deps.Commands.Like, func(id int64) commands.Like {
		return commands.Like{UserID: caller, PostID: id, Trace: s.trace(r)}
	})
}

// DELETE /api/posts/{id}/like -> 204: the caller takes back its like;
// again, or never liked: still 204.
func (s *Server) unlike(w http.ResponseWriter, r *http.Request, caller int64) error {
	return runOnTarget(w, r, "id", "post id", s.deps.Commands.Unlike, func(id int64) commands.Unlike {
		return commands.Unlike{UserID: caller, PostID: id, Trace: s.trace(r)}
	})
}
