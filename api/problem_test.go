package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/internal/auth"
	"github.com/feedco/feed/queries"
)

type fakeCursorErr struct{ bad bool }

func (e fakeCursorErr) Error() string   { return "cursor" }
func (e fakeCursorErr) BadCursor() bool { return e.bad }

// TestProblemFor checks the one error-to-status mapping, with every error
// wrapped the way the layers below wrap them.
func TestProblemFor(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("handle: %w", fmt.Errorf("tx: %w", err)) }
	cases := []struct {
		err      error
		status   int
		internal bool
	}{
		{wrap(&commands.ValidationError{Field: "content", Reason: "empty"}), 400, false},
		{wrap(commands.ErrInvalid), 400, false},
		{wrap(&badInput{"bad id"}), 400, false},
		{wrap(fakeCursorErr{bad: true}), 400, false},
		{wrap(queries.ErrInvalidLimit), 400, false},
		{wrap(errUnauthenticated), 401, false},
		{wrap(auth.ErrInvalidToken), 401, false},
		{wrap(commands.ErrForbidden), 403, false},
		{wrap(commands.ErrNotFound), 404, false},
		{errRouteNotFound, 404, false},
		{errMethodNotAllowed, 405, false},
		{wrap(commands.ErrVersionConflict), 409, false},
		{wrap(&http.MaxBytesError{Limit: 10}), 413, false},
		{wrap(commands.ErrIdempotencyKeyReused), 422, false},
		{wrap(commands.ErrPostUnavailable), 422, false},
		{wrap(commands.ErrBlockedByAuthor), 403, false},
		{wrap(errFeedUnavailable), 503, false},
		{wrap(&pgconn.ConnectError{}), 503, true},
		{wrap(context.DeadlineExceeded), 503, true},
		{wrap(&pgconn.PgError{Code: "57P01"}), 503, true},
		{wrap(io.ErrUnexpectedEOF), 503, true},
		{wrap(syscall.ECONNREFUSED), 503, true},
		{wrap(redis.ErrPoolTimeout), 503, true},
		{wrap(queries.ErrRedisUnavailable), 503, true},
		{wrap(queries.ErrFallbackBusy), 503, true},
		{wrap(commands.ErrOutcomeUnknown), 503, true},
		{wrap(context.Canceled), 503, false},
		{wrap(fakeCursorErr{bad: false}), 500, true},
		{errors.New("boom"), 500, true},
	}
	for _, tc := range cases {
		p, internal := problemFor(tc.err)
		if p.Status != tc.status || internal != tc.internal {
			t.Errorf("problemFor(%v) = %d internal=%v, want %d internal=%v", tc.err, p.Status, internal, tc.status, tc.internal)
		}
		if p.Type == "" || p.Title == "" || p.Detail == "" {
			t.Errorf("problemFor(%v) incomplete: %+v", tc.err, p)
		}
		if internal && p.Detail == tc.err.Error() {
			t.Errorf("problemFor(%v) leaks the internal error text", tc.err)
		}
	}
}
