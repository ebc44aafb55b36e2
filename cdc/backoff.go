package cdc

import (
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// retryDelay is the pause before the next replication session after err,
// given the current exponential backoff: while PostgreSQL is unavailable
// (refusing connections, starting up, shutting down) it is capped at
// unavailableCap, so CDC is back within about that long after the server
// is; other errors wait the whole backoff.
func retryDelay(backoff time.Duration, err error, unavailableCap time.Duration) time.Duration {
	if unavailable(err) {
		return min(backoff, unavailableCap)
	}
	return backoff
}

// unavailable reports whether err says the server is not there or not
// accepting sessions at the moment, as opposed to refusing what CDC asked
// for: SQLSTATE 57P01 (admin shutdown, also a terminated walsender), 57P02
// (crash shutdown), 57P03 (cannot connect now: starting up or shutting
// down), or a connection that could not be made or broke (dial errors,
// connection refused or reset).
func unavailable(err error) bool {
	if err == nil {
		return false
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch pg.Code {
		case "57P01", "57P02", "57P03":
			return true
		}
		return false // the server answered: authentication, a missing database, ...
	}
	var ce *pgconn.ConnectError
	var op *net.OpError
	return errors.As(err, &ce) || errors.As(err, &op) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}
