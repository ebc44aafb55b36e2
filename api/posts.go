package api

import (
	"net/http"
	"strconv"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/events"
)

// postJSON is the post resource; ids are strings (JSON numbers lose
// precision past 2^53).
type postJSON struct {
	ID        string `json:"id"`
	AuthorID  string `json:"authorId"`
	Content   string `json:"content"`
	CreatedAt string `json:"createdAt"`
}

func toPostJSON(p commands.Post) postJSON {
	return postJSON{
		ID:        strconv.FormatInt(p.ID, 10),
		AuthorID:  strconv.FormatInt(p.AuthorID, 10),
		Content:   p.Content,
		CreatedAt: p.CreatedAt.UTC().Format(events.CreatedAtLayout),
	}
}

// POST /api/posts {"content"} -> 201 post.
func (s *Server) createPost(w http.ResponseWriter, r *http.Request, caller int64) error {
	var req createPostRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	cmd := commands.CreatePost{AuthorID: caller, Content: req.Content, Trace: s.trace(r)}
	p, replayed, err := runCommand(w, r, s.deps.Commands.CreatePost, cmd, http.StatusCreated, func(p commands.Post) any { return toPostJSON(p) },
		func(p commands.Post) string { return "/api/posts/" + strconv.FormatInt(p.ID, 10) })
	if err != nil {
		return err
	}
	if !replayed && s.deps.AfterPostCreated != nil {
		s.deps.AfterPostCreated(r.Context(), p)
	}
	return nil
}

// DELETE /api/posts/{id} -> 204; only the author; again -> 204.
func (s *Server) deletePost(w http.ResponseWriter, r *http.Request, caller int64) error {
	return runOnTarget(w, r, "id", "post id", s.deps.Commands.DeletePost, func(id int64) commands.DeletePost {
		return commands.DeletePost{ActorID: caller, PostID: id, Trace: s.trace(r)}
	})
}
