package commands

import (
	"context"
	"fmt"
)

// Markers is a marker update of one user: the home feed's marker (a
// cursor, with its order key: millisecond and post id) and the
// notifications' (a notification id, with its order key: millisecond and
// member bytes); a nil one is left as it is.
type Markers struct {
	Home          *HomeMarker
	Notifications *NotificationsMarker
}

// HomeMarker is a home feed cursor and its order key.
type HomeMarker struct {
	Cursor string
	MS, ID int64
}

// NotificationsMarker is a notification id and its order key.
type NotificationsMarker struct {
	ID  string
	MS  int64
	Key []byte
}

// setMarkersSQL raises each given marker of $1 to the one given when the
// given is greater by its order key (a row comparison: the greatest of the
// two keys wins), so a marker never moves back and an older one changes
// nothing. A marker is one user's client state: no event, no read model.
const setMarkersSQL = `
INSERT INTO markers AS m (user_id, home_ms, home_id, home, notif_ms, notif_key, notifications)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (user_id) DO UPDATE SET
    (home_ms, home_id, home) = (SELECT CASE WHEN up THEN EXCLUDED.home_ms ELSE m.home_ms END,
                                       CASE WHEN up THEN EXCLUDED.home_id ELSE m.home_id END,
                                       CASE WHEN up THEN EXCLUDED.home ELSE m.home END
        FROM (SELECT EXCLUDED.home_ms IS NOT NULL AND (m.home_ms IS NULL OR
                     (EXCLUDED.home_ms, EXCLUDED.home_id) > (m.home_ms, m.home_id)) AS up) h),
    (notif_ms, notif_key, notifications) = (SELECT CASE WHEN up THEN EXCLUDED.notif_ms ELSE m.notif_ms END,
                                                   CASE WHEN up THEN EXCLUDED.notif_key ELSE m.notif_key END,
                                                   CASE WHEN up THEN EXCLUDED.notifications ELSE m.notifications END
        FROM (SELECT EXCLUDED.notif_ms IS NOT NULL AND (m.notif_ms IS NULL OR
                     (EXCLUDED.notif_ms, EXCLUDED.notif_key) > (m.notif_ms, m.notif_key)) AS up) n),
    updated_at = now()
RETURNING 1`

// SetMarkers moves user's markers forward to mk (one statement); a marker
// older than the stored one changes nothing.
func (c *Commands) SetMarkers(ctx context.Context, user int64, mk Markers) error {
	if err := validateID("user id", user); err != nil {
		return err
	}
	var (
		homeMS, homeID, notifMS *int64
		home, notif             *string
		key                     []byte
	)
	if h := mk.Home; h != nil {
		homeMS, homeID, home = &h.MS, &h.ID, &h.Cursor
	}
	if n := mk.Notifications; n != nil {
		notifMS, key, notif = &n.MS, n.Key, &n.ID
	}
	var one int
	if err := c.db.QueryRow(ctx, setMarkersSQL, user, homeMS, homeID, home, notifMS, key, notif).Scan(&one); err != nil {
		return fmt.Errorf("set markers of %d: %w", user, err)
	}
	return nil
}
