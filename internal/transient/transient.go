// Package transient is the one classification of errors that waiting may
// fix: PostgreSQL or Redis being down, a transaction losing a concurrency
// race, a time-out. Each predicate answers one question a caller asks (the
// HTTP layer: 503 or 500; the commands runner: run the transaction again
// or report an unknown outcome; the projectors: redeliver the message or
// park it as poison; CDC: how long to wait before the next session). The
// checks are typed (errors.Is, errors.As, SQLSTATE codes and go-redis's
// error types), never the text of an error.
package transient

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
)

// PostgresDown reports whether err says PostgreSQL is not there or not
// accepting work at the moment, so the same request may succeed later:
// a connection that could not be made (pgconn.ConnectError: refused,
// reset, the server starting up or not accepting connections to the
// database) or broke under a statement (EOF, reset, broken pipe, a request
// pgconn reports as never sent), or a statement the server answered with
// SQLSTATE class 08 (connection exception), class 53 (insufficient
// resources, e.g. too many clients), 57P01 (admin shutdown,
// pg_terminate_backend, a terminated walsender), 57P02 (crash shutdown),
// 57P03 (cannot connect now) or 57P05 (idle session timeout). A connection
// refused for its configuration (class 28, authentication; 3D000, no such
// database) and a statement answered with any other code are not
// PostgreSQL being down. Nor is a time-out of the caller's own deadline
// (Timeout).
func PostgresDown(err error) bool {
	if err == nil || pgconn.Timeout(err) {
		return false
	}
	var ce *pgconn.ConnectError
	var pg *pgconn.PgError
	switch {
	case errors.As(err, &ce):
		return !errors.As(err, &pg) || !(pg.Code[:min(2, len(pg.Code))] == "28" || pg.Code == "3D000")
	case errors.As(err, &pg):
		return postgresDownCode(pg.Code)
	}
	var ne *net.OpError
	return errors.As(err, &ne) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func postgresDownCode(code string) bool {
	switch code {
	case "57P01", "57P02", "57P03", "57P05":
		return true
	}
	return len(code) == 5 && (code[:2] == "08" || code[:2] == "53")
}

// NotSent reports whether PostgreSQL certainly never received the request
// that failed: running it again cannot apply it twice. Either pgconn says
// so (pgconn.SafeToRetry), or no connection was made at all
// (pgconn.ConnectError: refused, reset during start-up, the server not
// accepting connections), so nothing was sent on one.
func NotSent(err error) bool {
	if err == nil {
		return false
	}
	var ce *pgconn.ConnectError
	return pgconn.SafeToRetry(err) || errors.As(err, &ce)
}

// DeadConn reports whether err says the pooled connection a statement
// went out on was already dead: the server had terminated it (57P01 admin
// shutdown, pg_terminate_backend; 57P02 crash shutdown; 57P05 idle
// session timeout) or it was closed under the statement (EOF, reset,
// broken pipe). A read-only statement is safe to run once more on another
// connection; the pool's other idle connections are likely dead too.
func DeadConn(err error) bool {
	if err == nil || pgconn.Timeout(err) {
		return false
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "57P01" || pg.Code == "57P02" || pg.Code == "57P05"
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return false // no connection: not a dead pooled one
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// TxConflict reports whether PostgreSQL rolled a transaction back because
// it lost a race with another one: SQLSTATE 40001 (serialization failure)
// or 40P01 (deadlock detected). Running the whole transaction again can
// succeed.
func TxConflict(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == "40001" || pg.Code == "40P01")
}

// RedisDown reports whether err says Redis cannot serve the request at the
// moment, so the same request may succeed later: a connection that could
// not be made or broke (dial refused, i/o timeout, EOF, reset), a pool
// with no free connection in time, a closed client, or a server that
// refuses work for now (LOADING after a restart, BUSY running a script,
// CLUSTERDOWN, MASTERDOWN, TRYAGAIN, READONLY after a failover, max
// clients). redis.Nil (a missing key) is an answer, never Redis being
// down.
func RedisDown(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) {
		return false
	}
	var ne net.Error
	switch {
	case errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted), errors.Is(err, redis.ErrClosed),
		redis.IsLoadingError(err), redis.IsReadOnlyError(err), redis.IsClusterDownError(err),
		redis.IsMasterDownError(err), redis.IsTryAgainError(err), redis.IsMaxClientsError(err),
		redisBusy(err):
		return true
	}
	return false
}

// redisBusy reports a BUSY reply (a script or function runs past
// busy-reply-threshold). go-redis has no type for it, so the reply's error
// code (its first word) is compared, as go-redis does for the others.
func redisBusy(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "BUSY ")
}

// Timeout reports whether err is a deadline that passed: a context's
// (context.DeadlineExceeded, also as pgconn reports it) or a network
// read's or write's.
func Timeout(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) || (errors.As(err, &ne) && ne.Timeout())
}

// Unavailable reports whether err is a dependency (PostgreSQL or Redis)
// that is down or too slow: what the HTTP layer answers with 503.
func Unavailable(err error) bool {
	return PostgresDown(err) || RedisDown(err) || Timeout(err)
}

// Retryable reports whether err looks like an outage or a race that
// waiting and trying again fixes: Unavailable or TxConflict. A consumer
// redelivers such a message later instead of giving up on it.
func Retryable(err error) bool {
	return Unavailable(err) || TxConflict(err)
}
