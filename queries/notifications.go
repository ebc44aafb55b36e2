package queries

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/readmodel"
)

// UnreadMax bounds the unread count of a notifications page: it is exact
// up to UnreadMax, and UnreadMax means "UnreadMax or more" (an app shows
// "99+"; counting further would read a user's whole set on every open).
const UnreadMax = 100

// NotificationsPage is a page of a user's notifications, newest first.
type NotificationsPage struct {
	Items      []NotificationView `json:"items"`
	NextCursor *string            `json:"nextCursor"`
	// Unread is the number of shown notifications newer than the user's
	// notifications marker, at most UnreadMax (meaning that many or more).
	Unread int `json:"unread"`
}

// NotificationView is one notification as the API shows it. Post is the
// post it is about (the liked or reposted post, the reply, the quote),
// absent for a follow; {id, unavailable: true} once that post is deleted.
type NotificationView struct {
	ID        string            `json:"id"`
	Type      string            `json:"type"`
	Actor     Author            `json:"actor"`
	Post      *NotificationPost `json:"post,omitempty"`
	CreatedAt string            `json:"createdAt"`
}

// NotificationPost is a notification's post, minimal: the app opens the
// post itself (GET /api/posts/{id}) for the rest.
type NotificationPost struct {
	ID          string `json:"id"`
	AuthorID    string `json:"authorId,omitempty"`
	Content     string `json:"content,omitempty"`
	CreatedAt   string `json:"createdAt,omitempty"`
	Unavailable bool   `json:"unavailable,omitempty"`
}

// notifCursorError is a malformed notifications cursor or marker (400).
func notifCursorError(what string) error {
	return &CursorError{Reason: what + " is not a notification id"}
}

// ParseNotificationMarker decodes a notifications marker (a notification
// id) into its order key, for the markers' write.
func ParseNotificationMarker(id string) (ms int64, key []byte, err error) {
	if len(id) > MaxCursorLen {
		return 0, nil, notifCursorError("marker")
	}
	n, err := readmodel.ParseNotificationID(id)
	if err != nil {
		return 0, nil, notifCursorError("marker")
	}
	ms, key = n.OrderKey()
	return ms, key, nil
}

// ParseHomeMarker decodes a home marker (a home feed cursor: a page's
// prevCursor names its first item) into its order key.
func ParseHomeMarker(cursor string) (ms, id int64, err error) {
	if cursor == "" {
		return 0, 0, &CursorError{Reason: "empty"}
	}
	hc, err := parseHomeCursor(cursor)
	if err != nil {
		return 0, 0, err
	}
	return hc.at.ms, hc.at.id, nil
}

// Markers are a user's read markers: the home feed's (a cursor) and the
// notifications' (a notification id), nil when never set.
type Markers struct {
	Home          *string `json:"home"`
	Notifications *string `json:"notifications"`
}

// Markers reads user's markers from PostgreSQL.
func (f *Feed) Markers(ctx context.Context, user int64) (Markers, error) {
	var m Markers
	err := f.db.QueryRow(ctx, `SELECT home, notifications FROM markers WHERE user_id = $1`, user).Scan(&m.Home, &m.Notifications)
	if err != nil && !isNoRows(err) {
		return m, fmt.Errorf("read markers of %d: %w", user, err)
	}
	return m, nil
}

// Notifications returns a page of user's notifications below cursor ("":
// the newest), at most limit, with the unread count. Notifications by an
// account the user mutes, blocks or is blocked by are left out, read from
// the user's following state (readmodel.Follows.QueueRelations).
func (f *Feed) Notifications(ctx context.Context, user int64, cursor string, limit int) (NotificationsPage, error) {
	if err := checkArgs(user, limit); err != nil {
		return NotificationsPage{}, err
	}
	from := readmodel.Notification{MS: math.MaxInt64}
	if cursor != "" {
		n, err := readmodel.ParseNotificationID(cursor)
		if err != nil || len(cursor) > MaxCursorLen {
			return NotificationsPage{}, notifCursorError("cursor")
		}
		from = n
	}
	shown, more, err := f.scanNotifications(ctx, user, from, func(readmodel.Notification) bool { return true }, limit+1)
	if err != nil {
		return NotificationsPage{}, err
	}
	page := NotificationsPage{Items: make([]NotificationView, 0, min(len(shown), limit))}
	if len(shown) > limit {
		shown, more = shown[:limit], true
	}
	if more && len(shown) > 0 {
		c := shown[len(shown)-1].ID()
		page.NextCursor = &c
	}
	if page.Items, err = f.viewNotifications(ctx, shown, page.Items); err != nil {
		return NotificationsPage{}, err
	}
	if page.Unread, err = f.unread(ctx, user); err != nil {
		return NotificationsPage{}, err
	}
	return page, nil
}

// unread counts the shown notifications newer than user's marker, up to
// UnreadMax.
func (f *Feed) unread(ctx context.Context, user int64) (int, error) {
	var (
		ms  *int64
		key []byte
	)
	err := f.db.QueryRow(ctx, `SELECT notif_ms, notif_key FROM markers WHERE user_id = $1`, user).Scan(&ms, &key)
	if err != nil && !isNoRows(err) {
		return 0, fmt.Errorf("read notifications marker of %d: %w", user, err)
	}
	newer := func(readmodel.Notification) bool { return true }
	if ms != nil {
		marker := readmodel.Notification{MS: *ms}
		newer = func(n readmodel.Notification) bool {
			return n.MS > marker.MS || n.MS == marker.MS && n.Member() > string(key)
		}
	}
	shown, _, err := f.scanNotifications(ctx, user, readmodel.Notification{MS: math.MaxInt64}, newer, UnreadMax)
	return len(shown), err
}

// scanNotifications reads user's set from just below from, newest first,
// and returns up to want shown notifications for which keep holds; it
// stops at the first one for which keep fails (keep is a "newer than"
// test) or at the end of the list. Below the set's floor (the bound's
// cut, the horizon's edge) it continues from PostgreSQL
// (notificationsBelow), unless the set is built with floor 0 and holds
// nothing past the horizon: then it is the whole list. more reports that
// the list may hold more.
func (f *Feed) scanNotifications(ctx context.Context, user int64, from readmodel.Notification, keep func(readmodel.Notification) bool, want int) (shown []readmodel.Notification, more bool, err error) {
	model := f.notifications()
	chunk := max(want, 20)
	offset := 0
	completed, older := false, false
	for {
		pipe := f.rdb.Pipeline()
		read := model.QueueRange(ctx, pipe, user, from.MS, offset, chunk)
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, false, fmt.Errorf("read notifications of %d: %w", user, err)
		}
		rng, err := read.Result()
		if err != nil {
			return nil, false, fmt.Errorf("read notifications of %d: %w", user, err)
		}
		if !rng.Built && !completed && !f.cfg.ReadOnly {
			// Not built (lost, or made by the projector alone): complete
			// it from PostgreSQL, then read it again from the start.
			if err := f.completeNotifications(ctx, user); err != nil {
				return nil, false, err
			}
			completed, offset, shown, older = true, 0, nil, false
			continue
		}
		// An entry past the horizon not trimmed yet is among the oldest:
		// it may have come in an earlier chunk than the last.
		older = older || rng.Older
		offset += chunk
		var stop, filled bool
		shown, stop, filled, err = f.takeShown(ctx, user, from, keep, rng.Items, want, shown)
		if err != nil || filled {
			return shown, filled, err
		}
		if stop {
			return shown, false, nil
		}
		if !rng.More {
			if rng.Built && older {
				return f.notificationsBelow(ctx, user, from, rng.Floor, keep, want, shown)
			}
			return shown, false, nil
		}
	}
}

// takeShown appends to shown, up to want, the notifications of ns (newest
// first) below from for which keep holds, less those user does not see;
// stop reports that keep failed (nothing older is wanted), filled that
// shown reached want with more of ns left (more may follow).
func (f *Feed) takeShown(ctx context.Context, user int64, from readmodel.Notification, keep func(readmodel.Notification) bool, ns []readmodel.Notification, want int, shown []readmodel.Notification) (out []readmodel.Notification, stop, filled bool, err error) {
	var cand []readmodel.Notification
	for _, n := range ns {
		if from.MS != math.MaxInt64 && !from.Newer(n) {
			continue // at or above the cursor (same millisecond)
		}
		if !keep(n) {
			stop = true
			break
		}
		cand = append(cand, n)
	}
	visible, err := f.visibleNotifications(ctx, user, cand)
	if err != nil {
		return nil, false, false, err
	}
	for _, n := range visible {
		if len(shown) == want {
			return shown, stop, true, nil
		}
		shown = append(shown, n)
	}
	return shown, stop, false, nil
}

// notificationsBelow continues scanNotifications from PostgreSQL below
// the set's floor (at or below the millisecond floor, below from when
// from is set), newest first, appending to shown up to want notifications
// for which keep holds, the ones the user does not see left out as
// above. It reads pages of the newest rows (userNotificationsSQL, each
// kind one index range): a page that filled its limit is taken down to
// the millisecond before its last row's, whose rows (ties, in the list's
// order by member) come again with the next page.
func (f *Feed) notificationsBelow(ctx context.Context, user int64, from readmodel.Notification, floor int64, keep func(readmodel.Notification) bool, want int, shown []readmodel.Notification) ([]readmodel.Notification, bool, error) {
	upper := floor
	if from.MS < upper {
		upper = from.MS
	}
	limit := max(2*(want-len(shown)), 20)
	for {
		rows, err := f.userNotifications(ctx, user, limit, upper)
		if err != nil {
			return nil, false, err
		}
		full := len(rows) == limit
		if full {
			last := rows[len(rows)-1].MS
			for len(rows) > 0 && rows[len(rows)-1].MS == last {
				rows = rows[:len(rows)-1]
			}
			if len(rows) == 0 { // a whole page in one millisecond: read more of it
				limit *= 2
				continue
			}
		}
		var stop, filled bool
		shown, stop, filled, err = f.takeShown(ctx, user, from, keep, rows, want, shown)
		if err != nil || filled {
			return shown, filled, err
		}
		if stop || !full {
			return shown, false, nil
		}
		from = rows[len(rows)-1]
		upper = from.MS
	}
}

// userNotifications is user's newest limit live notifications at or
// below the millisecond atMost (math.MaxInt64: all), newest first.
func (f *Feed) userNotifications(ctx context.Context, user int64, limit int, atMost int64) ([]readmodel.Notification, error) {
	before := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	if atMost != math.MaxInt64 {
		before = time.UnixMilli(atMost + 1)
	}
	rows, err := f.db.Query(ctx, userNotificationsSQL, user, limit, before)
	if err != nil {
		return nil, fmt.Errorf("notifications of %d from PostgreSQL: %w", user, err)
	}
	defer rows.Close()
	var out []readmodel.Notification
	for rows.Next() {
		var (
			n   readmodel.Notification
			typ int32
		)
		if err := rows.Scan(&typ, &n.Actor, &n.Post, &n.MS); err != nil {
			return nil, fmt.Errorf("notifications of %d from PostgreSQL: %w", user, err)
		}
		n.Type = byte(typ)
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("notifications of %d from PostgreSQL: %w", user, err)
	}
	slices.SortFunc(out, func(a, b readmodel.Notification) int {
		if a.Newer(b) {
			return -1
		}
		return 1
	})
	return out, nil
}

// userNotificationsSQL is user $1's newest $2 live notifications
// recorded before $3, from the tables (the definition of
// projections.NotificationsSQL, for one user): each kind one index range,
// stopped at $2 rows, then the newest $2 of them.
const userNotificationsSQL = `
SELECT typ, actor, post, floor(extract(epoch FROM at) * 1000)::bigint FROM (
    (SELECT 1 AS typ, l.user_id AS actor, l.post_id AS post, l.created_at AS at
       FROM posts p JOIN likes l ON l.post_id = p.id WHERE p.author_id = $1 AND l.user_id <> $1 AND l.created_at < $3
      ORDER BY l.created_at DESC LIMIT $2)
    UNION ALL
    (SELECT 2, r.user_id, r.post_id, r.created_at
       FROM posts p JOIN reposts r ON r.post_id = p.id WHERE p.author_id = $1 AND r.user_id <> $1 AND r.created_at < $3
      ORDER BY r.created_at DESC LIMIT $2)
    UNION ALL
    (SELECT 3, q.author_id, q.id, q.created_at
       FROM posts p JOIN posts q ON q.quote_of = p.id WHERE p.author_id = $1 AND q.author_id <> $1 AND NOT q.deleted AND q.created_at < $3
      ORDER BY q.created_at DESC LIMIT $2)
    UNION ALL
    (SELECT 4, r.author_id, r.id, r.created_at
       FROM posts p JOIN posts r ON r.reply_to = p.id WHERE p.author_id = $1 AND r.author_id <> $1 AND NOT r.deleted AND r.created_at < $3
      ORDER BY r.created_at DESC LIMIT $2)
    UNION ALL
    (SELECT 5, f.follower_id, 0, f.created_at FROM follows f WHERE f.followee_id = $1 AND f.created_at < $3
      ORDER BY f.created_at DESC LIMIT $2)
) n ORDER BY at DESC LIMIT $2`

// completeNotifications builds user's notifications set from PostgreSQL
// through its owner (readmodel.Notifications.Complete: adds only, so the
// projector's writes meanwhile stay right; only the horizon is written,
// the newest older notification read sets the floor).
func (f *Feed) completeNotifications(ctx context.Context, user int64) error {
	model := f.notifications()
	truth, err := f.userNotifications(ctx, user, model.Max()+1, math.MaxInt64)
	if err != nil {
		return err
	}
	_, err = model.Complete(ctx, f.rdb, user, truth)
	return err
}

// visibleNotifications leaves out of ns those whose actor user mutes,
// blocks or is blocked by: one HMGET of the user's following state.
func (f *Feed) visibleNotifications(ctx context.Context, user int64, ns []readmodel.Notification) ([]readmodel.Notification, error) {
	if len(ns) == 0 {
		return nil, nil
	}
	actors := make([]int64, 0, len(ns))
	at := make(map[int64]int, len(ns))
	for _, n := range ns {
		if _, ok := at[n.Actor]; !ok {
			at[n.Actor] = len(actors)
			actors = append(actors, n.Actor)
		}
	}
	pipe := f.rdb.Pipeline()
	rel := f.follows.QueueRelations(ctx, pipe, user, actors)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read relations of %d: %w", user, err)
	}
	rels, err := rel.All()
	if err != nil {
		return nil, fmt.Errorf("read relations of %d: %w", user, err)
	}
	out := ns[:0:0]
	for _, n := range ns {
		r := rels[at[n.Actor]]
		if !r.Muted && !r.Blocked() {
			out = append(out, n)
		}
	}
	return out, nil
}

// viewNotifications hydrates ns: actor names (name:{u}) and post bodies
// (post:{p}) from Redis in one pipeline, what Redis lacks from
// PostgreSQL in one query.
func (f *Feed) viewNotifications(ctx context.Context, ns []readmodel.Notification, out []NotificationView) ([]NotificationView, error) {
	if len(ns) == 0 {
		return out, nil
	}
	var actors, posts []int64
	seenA, seenP := map[int64]bool{}, map[int64]bool{}
	for _, n := range ns {
		if !seenA[n.Actor] {
			seenA[n.Actor] = true
			actors = append(actors, n.Actor)
		}
		if n.Post != 0 && !seenP[n.Post] {
			seenP[n.Post] = true
			posts = append(posts, n.Post)
		}
	}
	pipe := f.rdb.Pipeline()
	names := readmodel.NewNames(f.cfg.Keys).QueueNames(ctx, pipe, actors)
	_, single := f.rdb.(*redis.Client)
	bodies := f.bodies.QueueGet(ctx, pipe, posts, single)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("hydrate notifications: %w", err)
	}
	name := make(map[int64]string, len(actors))
	var missingNames, missingPosts []int64
	for j, a := range actors {
		s, ok, err := names.At(j)
		if err != nil {
			return nil, fmt.Errorf("hydrate notifications: %w", err)
		}
		if !ok {
			missingNames = append(missingNames, a)
			continue
		}
		name[a] = s
	}
	post := make(map[int64]*NotificationPost, len(posts))
	for j, p := range posts {
		raw, ok := bodies.At(j)
		if !ok {
			missingPosts = append(missingPosts, p)
			continue
		}
		var b readmodel.Post
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, fmt.Errorf("post %d body: %w", p, err)
		}
		post[p] = notificationPost(b.ID, b.AuthorID, b.Content, b.CreatedAt, b.Deleted)
	}
	if len(missingNames)+len(missingPosts) > 0 {
		if err := f.notificationsFromPG(ctx, missingNames, missingPosts, name, post); err != nil {
			return nil, err
		}
	}
	for _, n := range ns {
		v := NotificationView{ID: n.ID(), Type: readmodel.TypeName(n.Type),
			Actor: Author{ID: itoa(n.Actor), Name: name[n.Actor]}, CreatedAt: formatTime(n.MS)}
		if n.Post != 0 {
			v.Post = post[n.Post]
			if v.Post == nil { // no such post anywhere
				v.Post = &NotificationPost{ID: itoa(n.Post), Unavailable: true}
			}
		}
		out = append(out, v)
	}
	return out, nil
}

func notificationPost(id, author int64, content, createdAt string, deleted bool) *NotificationPost {
	if deleted {
		return &NotificationPost{ID: itoa(id), Unavailable: true}
	}
	return &NotificationPost{ID: itoa(id), AuthorID: itoa(author), Content: content, CreatedAt: createdAt}
}

// notificationsFromPG reads the names and posts Redis did not hold.
func (f *Feed) notificationsFromPG(ctx context.Context, users, posts []int64, name map[int64]string, post map[int64]*NotificationPost) error {
	rows, err := f.db.Query(ctx, `
		SELECT 'u', id, 0, name, NULL::timestamptz, false FROM users WHERE id = ANY($1)
		UNION ALL
		SELECT 'p', id, author_id, content, created_at, deleted FROM posts WHERE id = ANY($2)`, users, posts)
	if err != nil {
		return fmt.Errorf("hydrate notifications from PostgreSQL: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			kind     string
			id, auth int64
			text     string
			at       *time.Time
			deleted  bool
		)
		if err := rows.Scan(&kind, &id, &auth, &text, &at, &deleted); err != nil {
			return fmt.Errorf("hydrate notifications from PostgreSQL: %w", err)
		}
		if kind == "u" {
			name[id] = text
			continue
		}
		created := ""
		if at != nil {
			created = formatTime(at.UnixMilli())
		}
		post[id] = notificationPost(id, auth, text, created, deleted)
	}
	return rows.Err()
}

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
