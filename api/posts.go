package api

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/gorilla/mux"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/events"
	"github.com/feedco/feed/queries"
)

// postJSON is the post resource; ids are strings (JSON numbers lose
// precision past 2^53).
type postJSON struct {
	ID        string `json:"id"`
	AuthorID  string `json:"authorId"`
	Content   string `json:"content"`
	CreatedAt string `json:"createdAt"`
	// EditedAt is the last edit's time; absent for a post never edited.
	EditedAt string `json:"editedAt,omitempty"`
	// ReplyTo is a reply's parent, QuoteOf a quote's quoted post, Media
	// the attachments; each absent when the post has none.
	ReplyTo *postRefJSON `json:"replyTo,omitempty"`
	QuoteOf string       `json:"quoteOf,omitempty"`
	Media   []mediaJSON  `json:"media,omitempty"`
}

type postRefJSON struct {
	ID       string `json:"id"`
	AuthorID string `json:"authorId"`
}

type mediaJSON struct {
	URL      string `json:"url"`
	MIMEType string `json:"mimeType"`
	Alt      string `json:"alt"`
	Width    int    `json:"width"`
	Height   int    `json:"height"`
}

func toPostJSON(p commands.Post) postJSON {
	j := postJSON{
		ID:        strconv.FormatInt(p.ID, 10),
		AuthorID:  strconv.FormatInt(p.AuthorID, 10),
		Content:   p.Content,
		CreatedAt: p.CreatedAt.UTC().Format(events.CreatedAtLayout),
	}
	if p.EditedAt != nil {
		j.EditedAt = p.EditedAt.UTC().Format(events.CreatedAtLayout)
	}
	if p.ReplyTo != nil {
		j.ReplyTo = &postRefJSON{ID: strconv.FormatInt(p.ReplyTo.ID, 10), AuthorID: strconv.FormatInt(p.ReplyTo.AuthorID, 10)}
	}
	if p.QuoteOf != 0 {
		j.QuoteOf = strconv.FormatInt(p.QuoteOf, 10)
	}
	for _, m := range p.Media {
		j.Media = append(j.Media, mediaJSON(m))
	}
	return j
}

// toCreatePost is the command of a POST /api/posts body: the ids parsed
// (malformed: 400), the media as given (the command validates them).
func toCreatePost(caller int64, req createPostRequest) (commands.CreatePost, error) {
	cmd := commands.CreatePost{AuthorID: caller, Content: req.Content}
	var err error
	if req.ReplyTo != nil {
		if cmd.ReplyTo, err = parseID("replyTo", *req.ReplyTo); err != nil {
			return cmd, err
		}
	}
	if req.QuoteOf != nil {
		if cmd.QuoteOf, err = parseID("quoteOf", *req.QuoteOf); err != nil {
			return cmd, err
		}
	}
	for _, m := range req.Media {
		cmd.Media = append(cmd.Media, events.Media(m))
	}
	return cmd, nil
}

// postETag is the entity tag of a post's version: the version in quotes
// (a strong tag; 1 as created, one more per edit).
func postETag(p commands.Post) string {
	return `"` + strconv.FormatInt(max(p.Version, 1), 10) + `"`
}

// postHeaders are the headers of a post's 201 or 200: its Location and
// its ETag.
func postHeaders(p commands.Post, h http.Header) {
	h.Set("Location", "/api/posts/"+strconv.FormatInt(p.ID, 10))
	h.Set("ETag", postETag(p))
}

// ifMatchVersion reads If-Match: absent or `*` is 0 (no condition; `*`
// holds for any post that exists), one strong entity tag `"N"` is version
// N. Anything else (a weak tag, a list, several headers) is 400.
func ifMatchVersion(r *http.Request) (int64, error) {
	vals := r.Header.Values("If-Match")
	switch {
	case len(vals) == 0:
		return 0, nil
	case len(vals) > 1:
		return 0, &badInput{"send one If-Match header, not several"}
	}
	v := strings.TrimSpace(vals[0])
	if v == "*" {
		return 0, nil
	}
	bad := &badInput{`If-Match must be one entity tag of a post version, as its ETag says (e.g. "2"), or *`}
	if len(v) < 3 || v[0] != '"' || v[len(v)-1] != '"' {
		return 0, bad
	}
	n, err := parseID("If-Match", v[1:len(v)-1])
	if err != nil {
		return 0, bad
	}
	return n, nil
}

// POST /api/posts {"content", "replyTo"?, "quoteOf"?, "media"?} -> 201
// post; a reply to or quote of a missing or deleted post is 422, of a
// post whose author blocks the caller 403.
func (s *Server) createPost(w http.ResponseWriter, r *http.Request, caller int64) error {
	var req createPostRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	cmd, err := toCreatePost(caller, req)
	if err != nil {
		return err
	}
	cmd.Trace = s.trace(r)
	p, replayed, err := runCommand(w, r, s.deps.Commands.CreatePost, cmd, http.StatusCreated, func(p commands.Post) any { return toPostJSON(p) },
		postHeaders)
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

// PATCH /api/posts/{id} {"content"} -> 200 post with editedAt and ETag;
// only the author; a deleted post is 404; If-Match "N" -> 409 when the
// post is at another version.
func (s *Server) editPost(w http.ResponseWriter, r *http.Request, caller int64) error {
	id, err := parseID("post id", mux.Vars(r)["id"])
	if err != nil {
		return err
	}
	ifVersion, err := ifMatchVersion(r)
	if err != nil {
		return err
	}
	var req editPostRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	cmd := commands.EditPost{ActorID: caller, PostID: id, Content: req.Content, IfVersion: ifVersion, Trace: s.trace(r)}
	p, replayed, err := runCommand(w, r, s.deps.Commands.EditPost, cmd, http.StatusOK, func(p commands.Post) any { return toPostJSON(p) },
		func(p commands.Post, h http.Header) { h.Set("ETag", postETag(p)) })
	if err != nil {
		return err
	}
	if !replayed && s.deps.AfterPostEdited != nil {
		s.deps.AfterPostEdited(r.Context(), p)
	}
	return nil
}

// NewPostOf is what the query side is told of a just-committed post
// (queries.Feed.PostCreated): the post as the command committed it.
func NewPostOf(p commands.Post) queries.NewPost {
	np := queries.NewPost{ID: p.ID, AuthorID: p.AuthorID, Content: p.Content, CreatedAt: p.CreatedAt,
		QuoteOf: p.QuoteOf, QuoteAuthor: p.QuoteAuthor, Media: p.Media}
	if p.ReplyTo != nil {
		np.ReplyTo, np.ReplyToAuthor = p.ReplyTo.ID, p.ReplyTo.AuthorID
	}
	return np
}
