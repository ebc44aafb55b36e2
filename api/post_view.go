package api

import (
	"net/http"

	"github.com/gorilla/mux"

	"github.com/feedco/feed/queries"
)

// GET /api/posts/{id} -> 200 the post as the caller sees it (a repost's id
// answers its original), from PostgreSQL. 404 when it does not exist, is
// deleted, or its author blocks the caller.
func (s *Server) getPost(w http.ResponseWriter, r *http.Request, caller int64) error {
	id, err := parseID("id", mux.Vars(r)["id"])
	if err != nil {
		return err
	}
	if s.deps.Feed == nil {
		return errFeedUnavailable
	}
	v, err := s.deps.Feed.PostView(r.Context(), caller, id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}

// GET /api/posts/{id}/replies?cursor=&limit= -> 200 a page of the post's
// direct replies, oldest first, from PostgreSQL; 404 as GET /api/posts/{id}.
func (s *Server) postReplies(w http.ResponseWriter, r *http.Request, caller int64) error {
	id, err := parseID("id", mux.Vars(r)["id"])
	if err != nil {
		return err
	}
	var limitArg, cursor string
	if r.URL.RawQuery != "" {
		q := parsePageArgs(r.URL.RawQuery)
		if q.hasAfter {
			return &badInput{"after is not a parameter of replies: page with cursor"}
		}
		limitArg, cursor = q.limit, q.cursor
	}
	limit, err := parseLimit(limitArg)
	if err != nil {
		return err
	}
	if len(cursor) > maxCursorLen {
		return &badInput{"cursor is malformed (too long)"}
	}
	if s.deps.Feed == nil {
		return errFeedUnavailable
	}
	p, err := s.deps.Feed.Replies(r.Context(), caller, id, cursor, limit)
	if err != nil {
		return err
	}
	if p.Items == nil {
		p.Items = []queries.PostView{} // [] not null
	}
	return writeJSON(w, http.StatusOK, p)
}
