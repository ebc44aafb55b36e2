// Package pgerr classifies PostgreSQL driver errors for the packages that
// answer them without depending on the driver (the HTTP layer maps them to
// statuses).
package pgerr

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unreachable reports whether err is a failure to connect to PostgreSQL
// (the server is down, refuses or drops the connection attempt): a
// dependency problem, so the same request may succeed later.
func Unreachable(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}
