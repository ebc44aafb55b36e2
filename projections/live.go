package projections

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/readmodel"
)

// Live streams' wake-ups (docs/streams.md): after the inbox projector
// pushed entries into inboxes, it publishes `wake:{u}` for those of the
// users with an open stream. Who has one is a Redis sorted set the API
// processes keep (readmodel.Live.MarkOnline); the projector holds a copy,
// read again when it is older than Config.OnlineRefresh, so a push costs
// no extra read. A stream opened since the copy was read misses that
// wake-up, which its read 2 s after its start covers.

// liveWakes publishes wake-ups for the users online.
type liveWakes struct {
	live    readmodel.Live
	rdb     redis.UniversalClient
	refresh time.Duration // Config.OnlineRefresh

	mu     sync.Mutex
	online map[int64]struct{}
	loaded time.Time
}

func newLiveWakes(keys readmodel.Keys, rdb redis.UniversalClient, refresh time.Duration) *liveWakes {
	return &liveWakes{live: readmodel.NewLive(keys), rdb: rdb, refresh: refresh}
}

// onlineSet returns the copy of the online users, read again when stale.
func (w *liveWakes) onlineSet(ctx context.Context) (map[int64]struct{}, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if w.online != nil && now.Sub(w.loaded) < w.refresh {
		return w.online, nil
	}
	ids, err := w.live.Online(ctx, w.rdb, now)
	if err != nil {
		return nil, err
	}
	m := make(map[int64]struct{}, len(ids))
	for _, id := range ids {
		m[id] = struct{}{}
	}
	w.online, w.loaded = m, now
	return m, nil
}

// wakeUsers publishes the wake-up of each of users that is online, in one
// pipeline. An error fails the event (its redelivery pushes again, which
// changes nothing, and publishes).
func (w *liveWakes) wakeUsers(ctx context.Context, users []int64) error {
	online, err := w.onlineSet(ctx)
	if err != nil || len(online) == 0 {
		return err
	}
	pipe := w.rdb.Pipeline()
	for _, u := range users {
		if _, ok := online[u]; ok {
			w.live.QueuePublish(ctx, pipe, w.live.WakeUser(u))
		}
	}
	if pipe.Len() == 0 {
		return nil
	}
	_, err = pipe.Exec(ctx)
	return err
}

// Notified implements Notifier: it publishes wake:n:{u} when user has an
// open stream. A failure is logged by nobody and costs the stream its
// wake-up only: what it would have read comes with its next wake-up.
func (w *liveWakes) Notified(ctx context.Context, user int64, _ readmodel.Notification) {
	w.wakeNotifications(ctx, user)
}

// Unnotified implements Notifier: the same wake-up, so that a stream that
// sent the notification reads its removal.
func (w *liveWakes) Unnotified(ctx context.Context, user int64, _ readmodel.Notification) {
	w.wakeNotifications(ctx, user)
}

func (w *liveWakes) wakeNotifications(ctx context.Context, user int64) {
	online, err := w.onlineSet(ctx)
	if err != nil {
		return
	}
	if _, ok := online[user]; ok {
		_ = w.live.Publish(ctx, w.rdb, w.live.WakeNotifications(user))
	}
}
