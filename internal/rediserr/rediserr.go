// Package rediserr classifies Redis client errors for the packages that
// answer them (the query side falls back to PostgreSQL, the HTTP layer
// maps them to 503): it is the one place that says which Redis errors mean
// "Redis cannot be used right now".
package rediserr

import (
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Unavailable reports whether err says Redis cannot serve the request at
// the moment, so the same request may succeed later: a connection that
// could not be made or broke (dial refused, i/o timeout, EOF, reset), a
// pool with no free connection in time, a closed client, or a server that
// refuses work for now (LOADING after a restart, CLUSTERDOWN, MASTERDOWN,
// TRYAGAIN, READONLY after a failover, max clients). redis.Nil (a missing
// key) is an answer, never unavailability.
func Unavailable(err error) bool {
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
		redis.IsMasterDownError(err), redis.IsTryAgainError(err), redis.IsMaxClientsError(err):
		return true
	}
	return false
}
