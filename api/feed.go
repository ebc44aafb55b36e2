package api

import (
	"context"
	"net/http"
	"sync"

	"github.com/gorilla/mux"

	"github.com/feedco/feed/queries"
)

// FeedReader is the query side as the API needs it; *queries.Feed is one.
// Cursors are opaque: the API passes the client's string through ("" is
// the first page) and returns the page as the reader built it (its JSON
// shape is the contract's `{"items": [...], "nextCursor": ... or null,
// "prevCursor": ... or null}`). A request with `after` reads the refresh
// page above that cursor instead (never "": a given but empty `after` is
// the reader's to reject). limit is already validated (1..MaxLimit).
//
// An error that satisfies interface{ BadCursor() bool } with BadCursor()
// true is answered 400 (malformed or foreign cursor), as are
// queries.ErrInvalidLimit and queries.ErrInvalidID; anything else is 5xx.
// A page with Degraded set (read from PostgreSQL alone while Redis is
// unavailable, or a degraded page of HomeDegraded) is answered with
// `Feed-Degraded: true`.
type FeedReader interface {
	// Home is userID's home feed, newest first.
	Home(ctx context.Context, userID int64, cursor string, limit int) (queries.Page, error)
	// HomeDegraded is Home at a lower cost, when Config.FullHomeReads home
	// reads are already in flight: the inbox and own posts only, with a
	// nextCursor that resumes the full merge (queries.Feed.HomeDegraded).
	HomeDegraded(ctx context.Context, userID int64, cursor string, limit int) (queries.Page, error)
	// AuthorPosts is authorID's own posts and reposts, newest first, as
	// viewer sees them (counts, the viewer's state, quotes).
	AuthorPosts(ctx context.Context, viewer, authorID int64, cursor string, limit int) (queries.Page, error)
	// HomeAfter is the refresh page of userID's home feed just above after.
	HomeAfter(ctx context.Context, userID int64, after string, limit int) (queries.Page, error)
	// AuthorPostsAfter is the refresh page of authorID's posts just above after.
	AuthorPostsAfter(ctx context.Context, viewer, authorID int64, after string, limit int) (queries.Page, error)
	// PostView is post id as viewer sees it; queries.ErrPostNotFound is 404.
	PostView(ctx context.Context, viewer, id int64) (queries.PostView, error)
	// Replies is a page of post id's direct replies as viewer sees them,
	// oldest first; queries.ErrPostNotFound is 404.
	Replies(ctx context.Context, viewer, id int64, cursor string, limit int) (queries.PostViewPage, error)
}

// maxCursorLen bounds the opaque cursor before it reaches the reader (a
// degraded page's resume cursor is the longest).
const maxCursorLen = queries.MaxCursorLen

// GET /api/feed?cursor=&limit= or ?after=&limit= -> 200 page.
func (s *Server) homeFeed(w http.ResponseWriter, r *http.Request, caller int64) error {
	return s.page(w, r, func(ctx context.Context, cursor string, after bool, limit int) (queries.Page, error) {
		if after {
			return s.deps.Feed.HomeAfter(ctx, caller, cursor, limit)
		}
		if s.fullHome == nil {
			return s.deps.Feed.Home(ctx, caller, cursor, limit)
		}
		if !s.fullHome.TryAcquire(1) {
			return s.deps.Feed.HomeDegraded(ctx, caller, cursor, limit)
		}
		defer s.fullHome.Release(1)
		return s.deps.Feed.Home(ctx, caller, cursor, limit)
	})
}

// GET /api/users/{id}/posts?cursor=&limit= or ?after=&limit= -> 200 page.
func (s *Server) authorPosts(w http.ResponseWriter, r *http.Request, caller int64) error {
	author, err := parseID("id", mux.Vars(r)["id"])
	if err != nil {
		return err
	}
	return s.page(w, r, func(ctx context.Context, cursor string, after bool, limit int) (queries.Page, error) {
		if blocked, err := s.blockedBy(ctx, author, caller); err != nil || blocked {
			return queries.Page{Items: []queries.Post{}}, err // the blocker's posts are hidden from the blocked
		}
		if after {
			return s.deps.Feed.AuthorPostsAfter(ctx, caller, author, cursor, limit)
		}
		return s.deps.Feed.AuthorPosts(ctx, caller, author, cursor, limit)
	})
}

// blockChecker is a FeedReader that knows blocks; *queries.Feed is one.
type blockChecker interface {
	Blocks(ctx context.Context, blocker, blocked int64) (bool, error)
}

// blockedBy reports whether author blocks caller (false when the reader
// does not know blocks).
func (s *Server) blockedBy(ctx context.Context, author, caller int64) (bool, error) {
	bc, ok := s.deps.Feed.(blockChecker)
	if !ok || author == caller {
		return false, nil
	}
	return bc.Blocks(ctx, author, caller)
}

// page answers a page read: read gets the `cursor` (after false) or, on a
// refresh, the `after` cursor (after true); both at once are 400.
func (s *Server) page(w http.ResponseWriter, r *http.Request, read func(ctx context.Context, cursor string, after bool, limit int) (queries.Page, error)) error {
	var limitArg, cursor string
	after := false
	if r.URL.RawQuery != "" { // the first page with the default limit parses nothing
		q := parsePageArgs(r.URL.RawQuery)
		limitArg, cursor = q.limit, q.cursor
		if after = q.hasAfter; after {
			if q.hasCursor {
				return &badInput{"cursor and after are exclusive: page down with cursor or refresh up with after"}
			}
			cursor = q.after
		}
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
	p, err := read(r.Context(), cursor, after, limit)
	if err != nil {
		return err
	}
	if p.Items == nil {
		p.Items = []queries.Post{} // [] not null
	}
	if p.Degraded {
		// Read from PostgreSQL alone (Redis is unavailable), or from the
		// inbox and own posts alone (the process is at its degrade point).
		w.Header().Set("Feed-Degraded", "true")
		if p.Partial {
			s.metrics.degradedLoad.Inc()
		} else {
			s.metrics.degradedRedis.Inc()
		}
	}
	buf := pageBuffers.Get().(*[]byte)
	b := p.AppendJSON((*buf)[:0])
	p.Release() // encoded: its items are not used again
	writeRaw(w, http.StatusOK, b)
	if cap(b) <= 64<<10 { // do not keep a rare huge page's buffer
		*buf = b
		pageBuffers.Put(buf)
	}
	return nil
}

// pageBuffers recycles the encoding buffers of pages (a 20-post page is
// about 4 KB): the read path encodes one per request.
var pageBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}
