package verify

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/readmodel"
)

// notificationsTruthSQL is user $1's live notifications by their
// definition, from the tables (not from the projector's build query):
// likes and reposts of $1's posts by others, live replies to and quotes
// of $1's posts by others, follows of $1; with whether $1 mutes the
// actor or a block stands between them. Columns: type, actor, post (0
// for a follow), millisecond, hidden.
const notificationsTruthSQL = `
WITH n(typ, actor, post, at) AS (
    SELECT 1, l.user_id, l.post_id, l.created_at FROM posts p JOIN likes l ON l.post_id = p.id
     WHERE p.author_id = $1 AND l.user_id <> $1
    UNION ALL
    SELECT 2, r.user_id, r.post_id, r.created_at FROM posts p JOIN reposts r ON r.post_id = p.id
     WHERE p.author_id = $1 AND r.user_id <> $1
    UNION ALL
    SELECT 3, q.author_id, q.id, q.created_at FROM posts q JOIN posts o ON o.id = q.quote_of
     WHERE o.author_id = $1 AND q.author_id <> $1 AND NOT q.deleted
    UNION ALL
    SELECT 4, r.author_id, r.id, r.created_at FROM posts r JOIN posts o ON o.id = r.reply_to
     WHERE o.author_id = $1 AND r.author_id <> $1 AND NOT r.deleted
    UNION ALL
    SELECT 5, f.follower_id, 0, f.created_at FROM follows f WHERE f.followee_id = $1)
SELECT typ, actor, post, floor(extract(epoch FROM at) * 1000)::bigint,
       EXISTS (SELECT 1 FROM mutes m WHERE m.muter_id = $1 AND m.muted_id = n.actor)
       OR EXISTS (SELECT 1 FROM blocks b WHERE b.blocker_id = $1 AND b.blocked_id = n.actor
                                         OR b.blocker_id = n.actor AND b.blocked_id = $1)
FROM n`

type trueNotification struct {
	n      readmodel.Notification
	hidden bool
}

// notifications compares u's notifications read model (above its floor
// and the horizon's edge: what it claims to hold) with the truth, and the
// unread count the query side serves with the one the truth and u's
// marker give; a set that is not built is skipped.
func (v *verifier) notifications(ctx context.Context, u int64) ([]Difference, error) {
	rows, err := v.pool.Query(ctx, notificationsTruthSQL, u)
	if err != nil {
		return nil, fmt.Errorf("notifications truth of %d: %w", u, err)
	}
	var truth []trueNotification
	for rows.Next() {
		var (
			t   trueNotification
			typ int32
		)
		if err := rows.Scan(&typ, &t.n.Actor, &t.n.Post, &t.n.MS, &t.hidden); err != nil {
			rows.Close()
			return nil, fmt.Errorf("notifications truth of %d: %w", u, err)
		}
		t.n.Type = byte(typ)
		truth = append(truth, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("notifications truth of %d: %w", u, err)
	}
	slices.SortFunc(truth, func(a, b trueNotification) int {
		if a.n.Newer(b.n) {
			return -1
		}
		return 1
	})

	got, err := v.pol.Notifications(v.keys, nil).All(ctx, v.rdb, u)
	if err != nil {
		return nil, fmt.Errorf("read the notifications of %d: %w", u, err)
	}
	if !got.Built {
		// Not built (lost, or made by the projector alone): not read as
		// the truth; the query side completes it at its next read (a
		// verification changes nothing), so there is nothing to compare.
		return nil, nil
	}
	var out []Difference
	held := map[string]bool{}
	for _, n := range got.Items {
		held[n.ID()] = true
	}
	want := map[string]bool{}
	for _, t := range truth {
		if t.n.MS <= got.Floor {
			continue // below what the bounded set claims to hold
		}
		want[t.n.ID()] = true
		if !held[t.n.ID()] {
			out = append(out, Difference{User: u, Kind: "notification-missing", Post: t.n.Post, Author: t.n.Actor,
				Text: fmt.Sprintf("notifications: the %s by %d (post %d, at %d) is live in SQL, not in notif:{%d}", readmodel.TypeName(t.n.Type), t.n.Actor, t.n.Post, t.n.MS, u)})
		}
	}
	for _, n := range got.Items {
		if !want[n.ID()] {
			out = append(out, Difference{User: u, Kind: "notification-foreign", Post: n.Post, Author: n.Actor,
				Text: fmt.Sprintf("notifications: notif:{%d} holds a %s by %d (post %d, at %d) that SQL does not", u, readmodel.TypeName(n.Type), n.Actor, n.Post, n.MS)})
		}
	}

	// The unread count: shown (not hidden) notifications newer than the
	// marker, at most queries.UnreadMax, whether the set holds them or
	// the query side reads them from PostgreSQL below its floor.
	var (
		ms  *int64
		key []byte
	)
	if err := v.pool.QueryRow(ctx, `SELECT notif_ms, notif_key FROM markers WHERE user_id = $1`, u).Scan(&ms, &key); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("marker of %d: %w", u, err)
	}
	unread := 0
	for _, t := range truth {
		if t.hidden {
			continue
		}
		if ms != nil && !(t.n.MS > *ms || t.n.MS == *ms && t.n.Member() > string(key)) {
			continue
		}
		unread++
	}
	unread = min(unread, queries.UnreadMax)
	page, err := v.feed.Notifications(ctx, u, "", 1)
	if err != nil {
		out = append(out, Difference{User: u, Kind: "error", Text: "error: reading the notifications through the query side: " + err.Error()})
	} else if page.Unread != unread {
		out = append(out, Difference{User: u, Kind: "notification-unread",
			Text: fmt.Sprintf("notifications: unread %d served, %d by the truth and the marker", page.Unread, unread)})
	}
	return out, nil
}

// TruthNotifications is u's notifications as GET /api/notifications must
// list them, from the tables (notificationsTruthSQL): live, not hidden
// from u (an actor u mutes, or in a block with u), newest first, by their
// ids.
func TruthNotifications(ctx context.Context, pool *pgxpool.Pool, u int64) ([]string, error) {
	rows, err := pool.Query(ctx, notificationsTruthSQL, u)
	if err != nil {
		return nil, fmt.Errorf("notifications truth of %d: %w", u, err)
	}
	var ns []readmodel.Notification
	for rows.Next() {
		var (
			n      readmodel.Notification
			typ    int32
			hidden bool
		)
		if err := rows.Scan(&typ, &n.Actor, &n.Post, &n.MS, &hidden); err != nil {
			rows.Close()
			return nil, fmt.Errorf("notifications truth of %d: %w", u, err)
		}
		if !hidden {
			n.Type = byte(typ)
			ns = append(ns, n)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("notifications truth of %d: %w", u, err)
	}
	slices.SortFunc(ns, func(a, b readmodel.Notification) int {
		if a.Newer(b) {
			return -1
		}
		return 1
	})
	ids := make([]string, len(ns))
	for i, n := range ns {
		ids[i] = n.ID()
	}
	return ids, nil
}

// APINotificationPage is a page of GET /api/notifications.
type APINotificationPage struct {
	Items []struct {
		ID    string `json:"id"`
		Type  string `json:"type"`
		Actor struct {
			ID   string `json:"id"`
			Name string `json:"name"`
		} `json:"actor"`
		CreatedAt string `json:"createdAt"`
	} `json:"items"`
	NextCursor *string `json:"nextCursor"`
	Unread     int     `json:"unread"`
}

// DiffNotifications compares the notification ids a reader was served,
// in order, and the first page's unread count with the truth (want,
// newest first; unread the truth's count for the reader's marker).
func DiffNotifications(got []string, unreadGot int, want []string, unread int) []string {
	var out []string
	if !slices.Equal(got, want) {
		seen := map[string]bool{}
		for _, id := range got {
			seen[id] = true
		}
		missing, foreign := 0, 0
		for _, id := range want {
			if !seen[id] {
				missing++
			}
		}
		wantSet := map[string]bool{}
		for _, id := range want {
			wantSet[id] = true
		}
		for _, id := range got {
			if !wantSet[id] {
				foreign++
			}
		}
		out = append(out, fmt.Sprintf("notifications: %d served, %d by the truth (%d missing, %d foreign, or out of order)", len(got), len(want), missing, foreign))
	}
	if unreadGot != unread {
		out = append(out, fmt.Sprintf("notifications: unread %d served, %d by the truth", unreadGot, unread))
	}
	return out
}
