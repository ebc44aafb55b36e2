// Package pgerr classifies PostgreSQL driver errors for the packages that
// answer them without depending on the driver (the HTTP layer maps them to
// statuses, the commands runner decides what it may retry).
package pgerr

import (
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unreachable reports whether err is a failure to connect to PostgreSQL
// (the server is down, refuses or drops the connection attempt): a
// dependency problem, so the same request may succeed later.
func Unreachable(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}

// Terminated reports whether the server ended the session: SQLSTATE 57P01
// (admin shutdown, pg_terminate_backend), 57P02 (crash shutdown), 57P03
// (cannot connect now), or a class 08 connection exception.
func Terminated(err error) bool {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return false
	}
	switch {
	case pg.Code == "57P01", pg.Code == "57P02", pg.Code == "57P03":
		return true
	case len(pg.Code) == 5 && pg.Code[:2] == "08":
		return true
	}
	return false
}

// ConnectionLost reports whether err says the connection to PostgreSQL
// could not be made or broke under the statement: Unreachable, Terminated,
// a request pgconn reports as never sent (pgconn.SafeToRetry), or a
// connection closed under a read or write (EOF, reset, broken pipe).
// A timeout of the caller's own deadline is not one.
func ConnectionLost(err error) bool {
	if err == nil || pgconn.Timeout(err) {
		return false
	}
	var ne *net.OpError
	return Unreachable(err) || Terminated(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED)
}

// Unavailable reports whether err is PostgreSQL being down or dropping
// connections (ConnectionLost): the same request may succeed later.
func Unavailable(err error) bool { return ConnectionLost(err) }
