package live

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/readmodel"
)

// The notifications stream (GET /api/notifications/stream) is the home
// stream's rules applied to a user's notifications: a notification's
// place is its (millisecond, member) in the user's set, the id carries B
// (every notification shown at or below it was sent), the ones sent
// above B, and each wake-up sends those above B not sent yet, oldest
// first, then tells the notifications removed since its last read
// (readmodel.Notifications.RemovalsAfter: an unlike, an undone repost, an
// unfollow, a deleted reply or quote) that it sent, as `delete` events
// with the notification's id, then moves B up to the settled horizon.
// The id also carries where the stream started (B0) and the removals'
// position it has read up to (C).

// NotifSource is the query side as the notifications stream reads it;
// *queries.Feed is one.
type NotifSource interface {
	NotificationsAbove(ctx context.Context, user, ms int64, member string, max int) ([]queries.NotifEntry, int64, bool, error)
	// NotificationRemovalsAfter is up to n of user's removed
	// notifications after pos, oldest first.
	NotificationRemovalsAfter(ctx context.Context, user int64, pos readmodel.ChangePos, n int64) ([]readmodel.Removal, error)
	// LastNotificationRemoval is the position of user's newest removal.
	LastNotificationRemoval(ctx context.Context, user int64) (readmodel.ChangePos, error)
}

// notifPos is a place in a user's notifications.
type notifPos struct {
	ms     int64
	member string
}

func (a notifPos) newer(b notifPos) bool {
	return a.ms > b.ms || a.ms == b.ms && a.member > b.member
}

// MaxNotifSent bounds the notifications a notifications stream's id
// carries above its B (an id stays under MaxIDLen).
const MaxNotifSent = 32

// notifResumeV2 and notifResumeV3 are the notifications id's version
// bytes: base64url of it, then B, (v3) B0 and C (two uvarints), and each
// sent position (ascending), a position as an 8-byte big-endian ms, a
// uvarint length and the member's bytes, the number of sent positions
// (a uvarint) before them. A v2 id (issued before removals were told)
// resumes with B0 = B and C zero: only the removals of the notifications
// it carries as sent are told.
const (
	notifResumeV2 = 2
	notifResumeV3 = 3
)

type notifResume struct {
	b, b0 notifPos
	c     readmodel.ChangePos
	sent  []notifPos
}

func (r notifResume) encode() string {
	buf := []byte{notifResumeV3}
	put := func(p notifPos) {
		buf = binary.BigEndian.AppendUint64(buf, uint64(p.ms))
		buf = binary.AppendUvarint(buf, uint64(len(p.member)))
		buf = append(buf, p.member...)
	}
	put(r.b)
	put(r.b0)
	buf = binary.AppendUvarint(buf, r.c.Ms)
	buf = binary.AppendUvarint(buf, r.c.Seq)
	buf = binary.AppendUvarint(buf, uint64(len(r.sent)))
	for _, p := range r.sent {
		put(p)
	}
	return idEncoding.EncodeToString(buf)
}

func decodeNotifResume(s string) (notifResume, error) {
	if len(s) > MaxIDLen {
		return notifResume{}, ErrBadID
	}
	b, err := idEncoding.DecodeString(s)
	if err != nil || len(b) < 1 || (b[0] != notifResumeV2 && b[0] != notifResumeV3) {
		return notifResume{}, ErrBadID
	}
	v3 := b[0] == notifResumeV3
	rest := b[1:]
	get := func() (notifPos, bool) {
		if len(rest) < 8 {
			return notifPos{}, false
		}
		ms := int64(binary.BigEndian.Uint64(rest))
		rest = rest[8:]
		n, w := binary.Uvarint(rest)
		if w <= 0 || n > 64 || uint64(len(rest)-w) < n {
			return notifPos{}, false
		}
		p := notifPos{ms: ms, member: string(rest[w : w+int(n)])}
		rest = rest[w+int(n):]
		return p, ms >= 0
	}
	uvarint := func() (uint64, bool) {
		v, w := binary.Uvarint(rest)
		if w <= 0 {
			return 0, false
		}
		rest = rest[w:]
		return v, true
	}
	var r notifResume
	var ok bool
	if r.b, ok = get(); !ok {
		return notifResume{}, ErrBadID
	}
	r.b0 = r.b
	if v3 {
		var ok1, ok2, ok3 bool
		r.b0, ok1 = get()
		r.c.Ms, ok2 = uvarint()
		r.c.Seq, ok3 = uvarint()
		if !ok1 || !ok2 || !ok3 || r.b0.newer(r.b) {
			return notifResume{}, ErrBadID
		}
	}
	n, ok := uvarint()
	if !ok || n > MaxNotifSent {
		return notifResume{}, ErrBadID
	}
	prev := r.b
	for range n {
		p, ok := get()
		if !ok || !p.newer(prev) {
			return notifResume{}, ErrBadID
		}
		r.sent = append(r.sent, p)
		prev = p
	}
	if len(rest) != 0 {
		return notifResume{}, ErrBadID
	}
	return r, nil
}

// shown reports whether the notification at p was sent to the client:
// among the sent ones, or in (B0, B].
func (r *notifResume) shown(p notifPos) bool {
	if _, ok := slices.BinarySearchFunc(r.sent, p, cmpNotif); ok {
		return true
	}
	return p.newer(r.b0) && !p.newer(r.b)
}

func cmpNotif(a, b notifPos) int {
	switch {
	case a == b:
		return 0
	case b.newer(a):
		return -1
	}
	return 1
}

func (r *notifResume) raise(b notifPos) {
	if !b.newer(r.b) {
		return
	}
	r.b = b
	i := 0
	for i < len(r.sent) && !r.sent[i].newer(b) {
		i++
	}
	r.sent = slices.Delete(r.sent, 0, i)
}

// NotifStream is one client's stream of its notifications.
type NotifStream struct {
	user int64
	src  NotifSource
	hub  *Hub
	r    notifResume
	// Overflowed counts the times the sent notifications passed
	// MaxNotifSent.
	Overflowed int
}

// OpenNotifications returns user's notifications stream, resumed from
// lastID when given, else starting at the newest notification (nothing
// replayed).
func OpenNotifications(ctx context.Context, hub *Hub, src NotifSource, user int64, lastID string) (*NotifStream, error) {
	s := &NotifStream{user: user, src: src, hub: hub}
	if lastID != "" {
		r, err := decodeNotifResume(lastID)
		if err != nil {
			return nil, err
		}
		s.r = r
		return s, nil
	}
	// The removals from the newest on (read first: one made while the top
	// is read concerns nothing the stream sent).
	c, err := src.LastNotificationRemoval(ctx, user)
	if err != nil {
		return nil, err
	}
	s.r.c = c
	// The top: the newest notification shown, or nothing.
	for {
		es, _, more, err := src.NotificationsAbove(ctx, user, s.r.b.ms, s.r.b.member, stepEntries)
		if err != nil {
			return nil, err
		}
		if len(es) > 0 {
			last := es[len(es)-1]
			s.r.b = notifPos{ms: last.MS, member: last.Member}
		}
		if !more {
			s.r.b0 = s.r.b
			return s, nil
		}
	}
}

// CheckNotifID says whether s is a notifications stream's id.
func CheckNotifID(s string) error {
	_, err := decodeNotifResume(s)
	return err
}

// Channels are the user's notifications channel.
func (s *NotifStream) Channels(context.Context) ([]string, error) {
	return []string{s.hub.live.WakeNotifications(s.user)}, nil
}

// Step sends the notifications above B not sent yet, oldest first.
func (s *NotifStream) Step(ctx context.Context, out []Event) ([]Event, bool, error) {
	es, settledMs, more, err := s.src.NotificationsAbove(ctx, s.user, s.r.b.ms, s.r.b.member, stepEntries)
	if err != nil {
		return out, false, fmt.Errorf("read the stream's notifications: %w", err)
	}
	for _, e := range es {
		p := notifPos{ms: e.MS, member: e.Member}
		i, found := slices.BinarySearchFunc(s.r.sent, p, cmpNotif)
		if found {
			continue
		}
		s.r.sent = slices.Insert(s.r.sent, i, p)
		if len(s.r.sent) > MaxNotifSent {
			s.r.raise(s.r.sent[len(s.r.sent)-1])
			s.Overflowed++
		}
		var data bytes.Buffer
		if err := json.NewEncoder(&data).Encode(e.View); err != nil {
			return out, false, err
		}
		out = append(out, Event{Type: "notification", ID: s.r.encode(), Data: bytes.TrimSpace(data.Bytes())})
	}
	// The removals, before B moves up: one of a notification above B not
	// sent (added and removed between two reads) is not the client's.
	out, rmore, err := s.removals(ctx, out)
	if err != nil {
		return out, false, err
	}
	if more && len(es) > 0 {
		last := es[len(es)-1]
		s.r.raise(notifPos{ms: last.MS, member: last.Member})
	} else if !more {
		s.r.raise(notifPos{ms: settledMs})
	}
	return out, more || rmore, nil
}

// removals appends a delete event for each notification removed after C
// that the client was sent, and moves C past every removal read.
func (s *NotifStream) removals(ctx context.Context, out []Event) ([]Event, bool, error) {
	rs, err := s.src.NotificationRemovalsAfter(ctx, s.user, s.r.c, stepChanges)
	if err != nil {
		return out, false, fmt.Errorf("read the stream's removed notifications: %w", err)
	}
	for _, r := range rs {
		p := notifPos{ms: r.N.MS, member: r.N.Member()}
		told := s.r.shown(p)
		s.r.c = r.Pos
		if told {
			out = append(out, Event{Type: "delete", ID: s.r.encode(), Data: []byte(`{"id":"` + r.N.ID() + `"}`)})
		}
	}
	return out, len(rs) == stepChanges, nil
}

// Overflows is how many times the stream's sent entries passed their
// bound.
func (s *NotifStream) Overflows() int { return s.Overflowed }

// ID is the event id of the stream's position now.
func (s *NotifStream) ID() string { return s.r.encode() }
