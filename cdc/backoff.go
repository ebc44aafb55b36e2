package cdc

import (
	"time"

	"github.com/feedco/feed/internal/transient"
)

// retryDelay is the pause before the next replication session after err,
// given the current exponential backoff: while PostgreSQL is down
// (transient.PostgresDown: refusing connections, starting up, shutting
// down) it is capped at unavailableCap, so CDC is back within about that
// long after the server is; other errors wait the whole backoff.
func retryDelay(backoff time.Duration, err error, unavailableCap time.Duration) time.Duration {
	if transient.PostgresDown(err) {
		return min(backoff, unavailableCap)
	}
	return backoff
}
