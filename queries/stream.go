package queries

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/readmodel"
)

// The live streams' reads (docs/streams.md): a stream shows what a home
// page shows, so it reads through the same home read (homeItems: inbox,
// celebrity pull, own posts, PostgreSQL below what Redis is sure of),
// the same hydration and the same item JSON.

// Entry is a home feed entry with its place in the feed.
type Entry struct {
	Key  events.FeedKey
	Post Post
}

// StreamScan is how many entries above a stream's position HomeAbove
// walks through in Redis before it asks PostgreSQL instead (as a refresh
// does: refreshScan).
const StreamScan = refreshScan

// HomeAbove returns the entries of userID's home feed strictly newer than
// b, oldest first: every one the home read shows now, up to max, the
// ones closest to b when more lie above it (more is then true). Unlike a
// refresh it reads from the top: entries not settled yet are included.
// settled is the refresh's settled horizon (RefreshSettle behind the
// clock): entries below it are taken as projected.
//
// have are keys above b the caller already has (a stream's sent
// entries, oldest first): they are neither hydrated nor returned, and the
// reads take that many more keys, so that a stream whose position lags
// the settling window (every entry of those seconds is above it) reads
// them in its first read and hydrates only what is new. The PostgreSQL
// read of a stream far behind may still return some of them.
func (f *Feed) HomeAbove(ctx context.Context, userID int64, b events.FeedKey, have []events.FeedKey, max int) (entries []Entry, settled events.FeedKey, more bool, err error) {
	if userID <= 0 {
		return nil, events.FeedKey{}, false, ErrInvalidID
	}
	// A stream reads because a projector just wrote: it reads the
	// entries from Redis itself, not from the read cache, which may not
	// have received that write's invalidation yet (directKey).
	ctx = context.WithValue(ctx, directKey{}, true)
	a := key{ms: b.Ms, id: b.ID}
	h := f.settled()
	settled = events.FeedKey{Ms: h.ms, ID: h.id}
	var above []item // newest first
	cur := startKey
	// A wake-up finds one or two entries above b: the first batch is
	// small, the next ones double, and only the entries above b are
	// hydrated (hydration is most of a read's cost).
	batch := 4
	for len(above) <= f.refreshScan {
		got, _, err := f.homeItemsAbove(ctx, userID, cur, batch, nil, a, have)
		if err != nil {
			return nil, settled, false, err
		}
		reached := len(got) < batch
		for _, it := range got {
			if !a.less(it.key) {
				reached = true
				break
			}
			above = append(above, it)
		}
		if reached {
			more = len(above) > max
			above = above[len(above)-min(len(above), max):]
			out := make([]Entry, len(above))
			for i, it := range above {
				out[len(above)-1-i] = Entry{Key: events.FeedKey{Ms: it.key.ms, ID: it.key.id}, Post: it.post}
			}
			return out, settled, more, nil
		}
		cur = got[len(got)-1].key
		batch = min(2*batch, MaxLimit+1)
	}
	// Many entries above b: PostgreSQL answers the closest ones upwards.
	items, err := f.pgPullAfter(ctx, userID, a, key{ms: maxCursorMs, id: math.MaxInt64}, max+1)
	if err != nil {
		return nil, settled, false, err
	}
	f.metrics.Sources.WithLabelValues("home_stream", "pg").Inc()
	more = len(items) > max
	items = items[len(items)-min(len(items), max):] // newest first: the closest to b are last
	out := make([]Entry, len(items))
	for i, it := range items {
		out[len(items)-1-i] = Entry{Key: events.FeedKey{Ms: it.key.ms, ID: it.key.id}, Post: it.post}
	}
	return out, settled, more, nil
}

// HomeTop returns the key of the newest entry of userID's home feed (the
// zero key when the feed is empty): where a stream without a resume
// point starts.
func (f *Feed) HomeTop(ctx context.Context, userID int64) (events.FeedKey, error) {
	if userID <= 0 {
		return events.FeedKey{}, ErrInvalidID
	}
	got, _, err := f.homeItems(ctx, userID, startKey, 1, nil)
	if err != nil || len(got) == 0 {
		return events.FeedKey{}, err
	}
	return events.FeedKey{Ms: got[0].key.ms, ID: got[0].key.id}, nil
}

// HomeShown returns, of the posts ids, those userID's home feed shows
// (not deleted; the user's own or of an account the user follows), as
// a page would show them, in the order given.
func (f *Feed) HomeShown(ctx context.Context, userID int64, ids []int64) ([]Entry, error) {
	if userID <= 0 {
		return nil, ErrInvalidID
	}
	keys := make([]key, len(ids))
	for i, id := range ids {
		keys[i] = key{ms: snowflake.Time(id).UnixMilli(), id: id}
	}
	items, err := f.hydrate(ctx, keys, visibility{viewer: userID, checkFollow: true}, len(keys), nil)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, len(items))
	for i, it := range items {
		out[i] = Entry{Key: events.FeedKey{Ms: it.key.ms, ID: it.key.id}, Post: it.post}
	}
	return out, nil
}

// Follows reports whether userID sees author's posts in the home feed:
// userID's own, or an account userID follows and does not mute.
func (f *Feed) Follows(ctx context.Context, userID, author int64) (bool, error) {
	if userID == author {
		return true, nil
	}
	is, err := f.followsDirect(ctx, userID, []int64{author})
	if err != nil {
		return false, err
	}
	return is[0], nil
}

// FollowedCelebrities returns the celebrities userID follows: the authors
// whose posts the home read pulls instead of finding them in the inbox.
func (f *Feed) FollowedCelebrities(ctx context.Context, userID int64) ([]int64, error) {
	cs, err := f.celebrities(ctx, f.inboxes())
	if err != nil || len(cs) == 0 {
		return nil, err
	}
	ids := make([]int64, len(cs))
	for i, c := range cs {
		ids[i] = c.id
	}
	is, err := f.followsDirect(ctx, userID, ids)
	if err != nil {
		return nil, err
	}
	var out []int64
	for i, ok := range is {
		if ok {
			out = append(out, ids[i])
		}
	}
	return out, nil
}

// LearnEdit applies an edit learnt from the changes stream to the
// process's post cache, so that the next hydration shows it (as the
// change feed's edits are applied: markEdited).
func (f *Feed) LearnEdit(id, version int64, content string, editedAt time.Time) {
	if version >= 2 {
		f.posts.markEdited(id, version, content, editedAt, f.now())
	}
}

// CursorKey returns the feed key a cursor of the home feed stands for
// (the oldest entry its page showed): a stream given ?cursor= starts
// there, as a refresh from it would.
func CursorKey(cursor string) (events.FeedKey, error) {
	k, err := parseAfter(cursor)
	if err != nil {
		return events.FeedKey{}, err
	}
	return events.FeedKey{Ms: k.ms, ID: k.id}, nil
}

// ForgetTimelineHead drops the cached head of author's timeline, so the
// next read that pulls author reads it from Redis: a live stream woken by
// a post of a celebrity it follows reads the post at once, not a
// CelebrityCacheTTL later.
func (f *Feed) ForgetTimelineHead(author int64) {
	c := &f.timelines
	c.mu.Lock()
	delete(c.heads, author)
	c.mu.Unlock()
}

// StreamOpened marks userID active at once (not in the background, as a
// page read does: touch), so that from the stream's first answer on the
// fan-out pushes to the user's inbox, and so wakes the stream up.
func (f *Feed) StreamOpened(ctx context.Context, userID int64) error {
	if f.cfg.ReadOnly {
		return nil
	}
	if !f.activity.markUnlessRecent(userID, f.now()) {
		return nil
	}
	if err := f.recordActivity(ctx, userID); err != nil {
		f.activity.forget(userID)
		return err
	}
	return nil
}

// NotifEntry is a notification with its place in the user's set: its
// millisecond and its member (readmodel.Notification.Member).
type NotifEntry struct {
	MS     int64
	Member string
	View   NotificationView
}

// NotificationsAbove returns the notifications of userID shown now
// (mutes and blocks applied, as a page) strictly above (ms, member),
// oldest first, up to max (the ones closest to it when more lie above:
// more is then true), and the settled horizon's millisecond: entries
// older than it are taken as projected (RefreshSettle, as HomeAbove).
func (f *Feed) NotificationsAbove(ctx context.Context, userID, ms int64, member string, max int) (entries []NotifEntry, settledMs int64, more bool, err error) {
	if userID <= 0 {
		return nil, 0, false, ErrInvalidID
	}
	settledMs = f.settled().ms
	above := func(n readmodel.Notification) bool {
		return n.MS > ms || n.MS == ms && n.Member() > member
	}
	shown, _, err := f.scanNotifications(ctx, userID, readmodel.Notification{MS: math.MaxInt64}, above, StreamScan)
	if err != nil {
		return nil, settledMs, false, err
	}
	more = len(shown) > max
	shown = shown[len(shown)-min(len(shown), max):] // newest first: the closest are last
	views, err := f.viewNotifications(ctx, shown, nil)
	if err != nil {
		return nil, settledMs, false, err
	}
	if len(views) != len(shown) {
		return nil, settledMs, false, fmt.Errorf("notifications of %d: %d views of %d", userID, len(views), len(shown))
	}
	entries = make([]NotifEntry, len(shown))
	for i, n := range shown {
		entries[len(shown)-1-i] = NotifEntry{MS: n.MS, Member: n.Member(), View: views[i]}
	}
	return entries, settledMs, more, nil
}

// NotificationRemovalsAfter returns up to n of the notifications removed
// from userID's set (by undos) after pos, oldest first: a notifications
// stream tells those it sent (readmodel.Notifications.RemovalsAfter).
func (f *Feed) NotificationRemovalsAfter(ctx context.Context, userID int64, pos readmodel.ChangePos, n int64) ([]readmodel.Removal, error) {
	return readmodel.NewNotifications(f.cfg.Keys, 0, 0).RemovalsAfter(ctx, f.rdb, userID, pos, n)
}

// LastNotificationRemoval is the position of userID's newest removal:
// where a new notifications stream starts reading them.
func (f *Feed) LastNotificationRemoval(ctx context.Context, userID int64) (readmodel.ChangePos, error) {
	return readmodel.NewNotifications(f.cfg.Keys, 0, 0).LastRemoval(ctx, f.rdb, userID)
}

// directKey in a read's context makes its home read's entries (step 1:
// the inbox, the own timeline and their markers) come from Redis, not
// from the read cache (readHome): a live stream's read, made because a
// projector wrote an entry, must see that write, and the entries changed
// since the last read anyway. Waiting for the cache's barrier instead (a
// PING queued behind every invalidation the node sent the process)
// stalled streams for seconds under a full mix, as the invalidations
// queued. The entries' hydration still asks the cache (followsThrough,
// sharesThrough): follows, relations, counts and the viewer's state are
// not what the wake-up was for, and a projector's change to them is in
// the cache as soon as its invalidation arrives, as for any page.
type directKey struct{}
