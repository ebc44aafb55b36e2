package live

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/queries"
)

// Source is the query side as a stream reads it; *queries.Feed is one.
type Source interface {
	// HomeAbove is every entry the home read shows above b, oldest first,
	// up to max (more: there were more), and the settled horizon; the
	// entries of have (keys above b, ascending) are left out and not
	// hydrated.
	HomeAbove(ctx context.Context, user int64, b events.FeedKey, have []events.FeedKey, max int) ([]queries.Entry, events.FeedKey, bool, error)
	// StreamOpened marks user active now: the fan-out pushes to the
	// user's inbox (and so wakes the stream) from then on.
	StreamOpened(ctx context.Context, user int64) error
	// HomeTop is the newest entry's key (zero for an empty feed).
	HomeTop(ctx context.Context, user int64) (events.FeedKey, error)
	// HomeShown is, of ids, the posts the home feed shows, hydrated.
	HomeShown(ctx context.Context, user int64, ids []int64) ([]queries.Entry, error)
	// Follows says whether author's posts are in user's home feed.
	Follows(ctx context.Context, user, author int64) (bool, error)
	// FollowedCelebrities are the authors the home read pulls for user.
	FollowedCelebrities(ctx context.Context, user int64) ([]int64, error)
	// LearnEdit applies an edit to the process's post cache.
	LearnEdit(id, version int64, content string, editedAt time.Time)
}

// Event is one server-sent event: its type ("post", "edit", "delete"),
// its id (Resume.Encode: the stream's state once the client has it) and
// its data (the item's JSON as GET /api/feed writes it; a deletion's
// {"id": ...}).
type Event struct {
	Type string
	ID   string
	Data []byte
}

// stepEntries is how many entries one read sends at most; a stream
// further behind reads again at once.
const stepEntries = 200

// stepChanges is how many changes one read handles at most.
const stepChanges = 256

// Stream is one client's stream of its home feed: its position (Resume)
// and how to read what comes after it. Not safe for concurrent use.
type Stream struct {
	user int64
	src  Source
	hub  *Hub
	r    Resume
	// Overflowed counts the times Sent passed MaxSent (B moved up to the
	// newest sent entry).
	Overflowed int
	// changesAt is the hub's ChangesSeen when the last complete read of
	// the changes stream began; read says that count may be trusted (the
	// channel was up then).
	changesAt uint64
	read      bool
}

// Open returns user's stream: resumed from lastID (a Last-Event-ID) when
// given, else starting at cursor (a home feed cursor: every entry above
// it is sent) when given, else at the top (nothing replayed).
// ErrBadID and a queries cursor error are the client's.
func Open(ctx context.Context, hub *Hub, src Source, user int64, lastID, cursor string) (*Stream, error) {
	s := &Stream{user: user, src: src, hub: hub}
	if err := src.StreamOpened(ctx, user); err != nil {
		return nil, err
	}
	switch {
	case lastID != "":
		r, err := DecodeResume(lastID)
		if err != nil {
			return nil, err
		}
		s.r = r
		return s, nil
	case cursor != "":
		k, err := queries.CursorKey(cursor)
		if err != nil {
			return nil, err
		}
		s.r.B, s.r.B0 = k, k
	default:
		k, err := src.HomeTop(ctx, user)
		if err != nil {
			return nil, err
		}
		s.r.B, s.r.B0 = k, k
	}
	c, err := hub.live.LastChange(ctx, hub.rdb)
	if err != nil {
		return nil, err
	}
	s.r.C = c
	return s, nil
}

// Resume is the stream's position now.
func (s *Stream) Resume() Resume { return s.r }

// ID is the event id of the stream's position now.
func (s *Stream) ID() string { return s.r.Encode() }

// Channels are the channels that wake the stream up: its user's inbox,
// its user's own posts, the celebrities its user follows, the changes.
func (s *Stream) Channels(ctx context.Context) ([]string, error) {
	l := s.hub.live
	chs := []string{l.WakeUser(s.user), l.WakeAuthor(s.user), l.ChangesChannel()}
	celebs, err := s.src.FollowedCelebrities(ctx, s.user)
	if err != nil {
		return chs, err
	}
	for _, c := range celebs {
		chs = append(chs, l.WakeAuthor(c))
	}
	return chs, nil
}

// Step is a wake-up: it reads the entries above B and returns those not
// sent yet, oldest first, then the edits and deletions after C of the
// entries the client has; more says the stream is further behind than
// one step sends (call Step again).
func (s *Stream) Step(ctx context.Context, out []Event) ([]Event, bool, error) {
	entries, settled, more, err := s.src.HomeAbove(ctx, s.user, s.r.B, s.r.Sent, stepEntries)
	if err != nil {
		return out, false, fmt.Errorf("read the stream's entries: %w", err)
	}
	for _, e := range entries {
		if s.r.sent(e.Key) {
			continue
		}
		s.r.add(e.Key)
		if len(s.r.Sent) > MaxSent {
			s.r.raise(s.r.Sent[len(s.r.Sent)-1])
			s.Overflowed++
		}
		out = append(out, Event{Type: "post", ID: s.r.Encode(), Data: e.Post.AppendJSON(nil)})
	}
	switch {
	case more && len(entries) > 0:
		// Every entry up to the last one read was sent.
		s.r.raise(entries[len(entries)-1].Key)
	case !more:
		// Every entry shown above B was read, and the entries below the
		// settled horizon are taken as projected.
		s.r.raise(settled)
	}
	// The changes: only when the hub received a wake-up of the changes
	// channel since the last complete read of them began, or cannot tell
	// (the channel not subscribed: Hub.ChangesSeen).
	seen, up := s.hub.ChangesSeen()
	if up && s.read && seen == s.changesAt {
		return out, more, nil
	}
	out, cmore, err := s.changes(ctx, out)
	if err == nil && !cmore {
		s.changesAt, s.read = seen, up
	}
	return out, more || cmore, err
}

// changes appends the events of the changes after C.
func (s *Stream) changes(ctx context.Context, out []Event) ([]Event, bool, error) {
	cs, err := s.hub.live.ChangesAfter(ctx, s.hub.rdb, s.r.C, stepChanges)
	if err != nil {
		return out, false, err
	}
	for _, c := range cs {
		k := events.FeedKey{Ms: snowflake.Time(c.Post).UnixMilli(), ID: c.Post}
		var ev *Event
		if s.r.shown(k) {
			if c.Deleted {
				ok, err := s.src.Follows(ctx, s.user, c.Author)
				if err != nil {
					return out, false, err
				}
				if ok {
					ev = &Event{Type: "delete", Data: []byte(`{"id":"` + strconv.FormatInt(c.Post, 10) + `"}`)}
				}
			} else {
				s.src.LearnEdit(c.Post, c.Version, c.Content, c.EditedAt)
				shown, err := s.src.HomeShown(ctx, s.user, []int64{c.Post})
				if err != nil {
					return out, false, err
				}
				if len(shown) == 1 {
					ev = &Event{Type: "edit", Data: shown[0].Post.AppendJSON(nil)}
				}
			}
		}
		s.r.C = c.Pos
		if ev != nil {
			ev.ID = s.r.Encode()
			out = append(out, *ev)
		}
	}
	return out, len(cs) == stepChanges, nil
}

// Overflows is how many times the stream's sent entries passed their
// bound.
func (s *Stream) Overflows() int { return s.Overflowed }
