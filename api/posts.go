package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/events"
)

// Post is a post the API created, as given to the AfterPostCreated hook.
type Post struct {
	ID        int64
	AuthorID  int64
	Content   string
	CreatedAt time.Time
}

type postJSON struct {
	ID        string `json:"id"`
	AuthorID  string `json:"authorId"`
	Content   string `json:"content"`
	CreatedAt string `json:"createdAt"`
}

func toPostJSON(p Post) postJSON {
	return postJSON{
		ID:        strconv.FormatInt(p.ID, 10),
		AuthorID:  strconv.FormatInt(p.AuthorID, 10),
		Content:   p.Content,
		CreatedAt: p.CreatedAt.UTC().Format(events.CreatedAtLayout),
	}
}

// POST /api/posts {"content"} -> 201 post.
func (s *Server) createPost(w http.ResponseWriter, r *http.Request, caller int64) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var req createPostRequest
	if err := decodeJSON(body, &req); err != nil {
		return err
	}
	var created Post
	replayed, err := s.runWrite(w, r, caller, body, func(ctx context.Context, tx pgx.Tx) (int, any, error) {
		p, err := s.deps.Commands.CreatePost.Exec(ctx, tx, commands.CreatePost{AuthorID: caller, Content: req.Content, Trace: s.trace(r)})
		created = Post(p)
		return http.StatusCreated, toPostJSON(created), err
	})
	if err != nil {
		return err
	}
	if !replayed && s.deps.AfterPostCreated != nil {
		s.deps.AfterPostCreated(r.Context(), created)
	}
	return nil
}

// DELETE /api/posts/{id} -> 204; only the author; again -> 204.
func (s *Server) deletePost(w http.ResponseWriter, r *http.Request, caller int64) error {
	return s.writeNoContent(w, r, caller, "id", "post id", func(ctx context.Context, tx pgx.Tx, id int64) error {
		_, err := s.deps.Commands.DeletePost.Exec(ctx, tx, commands.DeletePost{ActorID: caller, PostID: id, Trace: s.trace(r)})
		return err
	})
}
