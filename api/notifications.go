package api

import (
	"context"
	"net/http"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/queries"
)

// NotificationReader is the query side's notifications and markers;
// *queries.Feed is one. A Feed that is not one answers these routes 503.
type NotificationReader interface {
	// Notifications is a page of user's notifications, newest first, with
	// the unread count; a malformed cursor is a BadCursor error.
	Notifications(ctx context.Context, user int64, cursor string, limit int) (queries.NotificationsPage, error)
	// Markers is user's read markers.
	Markers(ctx context.Context, user int64) (queries.Markers, error)
}

func (s *Server) notificationReader() (NotificationReader, error) {
	nr, ok := s.deps.Feed.(NotificationReader)
	if !ok {
		return nil, errFeedUnavailable
	}
	return nr, nil
}

// GET /api/notifications?cursor=&limit= -> 200 {"items","nextCursor","unread"}.
func (s *Server) notifications(w http.ResponseWriter, r *http.Request, caller int64) error {
	q := parsePageArgs(r.URL.RawQuery)
	if q.hasAfter {
		return &badInput{"notifications page down with cursor; after is not supported here"}
	}
	limit, err := parseLimit(q.limit)
	if err != nil {
		return err
	}
	if len(q.cursor) > maxCursorLen {
		return &badInput{"cursor is malformed (too long)"}
	}
	nr, err := s.notificationReader()
	if err != nil {
		return err
	}
	page, err := nr.Notifications(r.Context(), caller, q.cursor, limit)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, page)
}

// GET /api/markers -> 200 {"home": cursor or null, "notifications": id or null}.
func (s *Server) getMarkers(w http.ResponseWriter, r *http.Request, caller int64) error {
	nr, err := s.notificationReader()
	if err != nil {
		return err
	}
	m, err := nr.Markers(r.Context(), caller)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, m)
}

// PUT /api/markers {"home": cursor?, "notifications": id?} -> 204. Each
// marker given moves forward only: one older than the stored one is a
// no-op (still 204). A malformed marker is 400.
func (s *Server) putMarkers(w http.ResponseWriter, r *http.Request, caller int64) error {
	var body struct {
		Home          *string `json:"home"`
		Notifications *string `json:"notifications"`
	}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	var mk commands.Markers
	if body.Home != nil {
		if len(*body.Home) > maxCursorLen {
			return &badInput{"home marker is malformed (too long)"}
		}
		ms, id, err := queries.ParseHomeMarker(*body.Home)
		if err != nil {
			return err
		}
		mk.Home = &commands.HomeMarker{Cursor: *body.Home, MS: ms, ID: id}
	}
	if body.Notifications != nil {
		ms, key, err := queries.ParseNotificationMarker(*body.Notifications)
		if err != nil {
			return err
		}
		mk.Notifications = &commands.NotificationsMarker{ID: *body.Notifications, MS: ms, Key: key}
	}
	if err := s.deps.Commands.SetMarkers(r.Context(), caller, mk); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
