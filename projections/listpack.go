package projections

import (
	"context"
	"log/slog"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// ListpackEntriesFor is the zset-max-listpack-entries a Redis server needs
// so full inboxes stay in the compact listpack encoding: InboxMax real
// entries (trims start at or below it: InboxTrimBand), the overshoot between two sampled
// trims (a gap longer than 20 × InboxTrimEvery pushes has odds of about
// e^-20; it would only turn that inbox into a skiplist) and the two
// sentinels: 822 with the defaults. docs/projections.md explains the
// memory and speed trade-off; production uses 1024.
func ListpackEntriesFor(cfg Config) int {
	cfg = cfg.withDefaults()
	return cfg.InboxMax + 20*cfg.InboxTrimEvery + 2
}

// WarnListpack logs once at start when the server keeps full inboxes in the
// larger skiplist encoding. The projector never changes server settings.
func WarnListpack(ctx context.Context, rdb redis.UniversalClient, inboxMax int, log *slog.Logger) {
	want := ListpackEntriesFor(Config{InboxMax: inboxMax})
	v, err := rdb.ConfigGet(ctx, "zset-max-listpack-entries").Result()
	if err != nil {
		return // CONFIG may be disabled on managed servers
	}
	got, err := strconv.Atoi(v["zset-max-listpack-entries"])
	if err == nil && got < want {
		log.Warn("projections: Redis keeps full inboxes as skiplists (about 110 bytes an entry); "+
			"set zset-max-listpack-entries to at least "+strconv.Itoa(want)+" for about 21 bytes an entry "+
			"(see docs/projections.md)", "zset-max-listpack-entries", got)
	}
}
