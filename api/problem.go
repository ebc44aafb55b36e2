package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/internal/auth"
	"github.com/feedco/feed/internal/transient"
	"github.com/feedco/feed/queries"
)

// ProblemBase prefixes every problem type URI: the page of the
// repository that documents the problem types (docs/problems.md), whose
// section for each type has the type's name as its anchor, so a type
// URI is both an identifier under the project's own namespace and a link
// to its documentation.
//
// WARNING: the type URIs are a stable public contract (docs/api.md):
// clients compare them as strings and branch on them. Never rename one,
// change ProblemBase, or reuse a name for another meaning; add new types.
const ProblemBase = "https://github.com/feedco/feed/blob/main/docs/problems.md#"

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
}

// Problem types, one per kind of failure a client can act on.
var (
	probBadRequest   = Problem{Type: ProblemBase + "bad-request", Title: "Bad request", Status: http.StatusBadRequest}
	probUnauthorized = Problem{Type: ProblemBase + "unauthorized", Title: "Unauthorized", Status: http.StatusUnauthorized}
	probForbidden    = Problem{Type: ProblemBase + "forbidden", Title: "Forbidden", Status: http.StatusForbidden}
	probNotFound     = Problem{Type: ProblemBase + "not-found", Title: "Not found", Status: http.StatusNotFound}
	probMethod       = Problem{Type: ProblemBase + "method-not-allowed", Title: "Method not allowed", Status: http.StatusMethodNotAllowed}
	probConflict     = Problem{Type: ProblemBase + "version-conflict", Title: "Version conflict", Status: http.StatusConflict}
	probTooLarge     = Problem{Type: ProblemBase + "payload-too-large", Title: "Payload too large", Status: http.StatusRequestEntityTooLarge}
	probSlowBody     = Problem{Type: ProblemBase + "request-timeout", Title: "Request timeout", Status: http.StatusRequestTimeout}
	probKeyReused    = Problem{Type: ProblemBase + "idempotency-key-reused", Title: "Idempotency key reused", Status: http.StatusUnprocessableEntity}
	probPostGone     = Problem{Type: ProblemBase + "post-unavailable", Title: "Post unavailable", Status: http.StatusUnprocessableEntity}
	probRateLimited  = Problem{Type: ProblemBase + "rate-limited", Title: "Rate limited", Status: http.StatusTooManyRequests}
	probOverloaded   = Problem{Type: ProblemBase + "overloaded", Title: "Too many requests", Status: http.StatusTooManyRequests}
	probUnavailable  = Problem{Type: ProblemBase + "unavailable", Title: "Service unavailable", Status: http.StatusServiceUnavailable}
	probUnknown      = Problem{Type: ProblemBase + "outcome-unknown", Title: "Outcome unknown", Status: http.StatusServiceUnavailable}
	probInternal     = Problem{Type: ProblemBase + "internal", Title: "Internal server error", Status: http.StatusInternalServerError}
)

// Errors of the HTTP layer itself; domain errors come from commands and the
// FeedReader.
var (
	errUnauthenticated  = errors.New("missing or invalid identity")
	errRouteNotFound    = errors.New("no such resource")
	errMethodNotAllowed = errors.New("method not allowed on this resource")
	errFeedUnavailable  = errors.New("the query side is not available in this process")
)

// retryAfterSeconds is the Retry-After of every 503 and 429: dependencies
// come back, the circuit breakers probe again, and a burst of requests in
// flight drains, within about a second.
const retryAfterSeconds = "1"

// badInput is a malformed request (JSON, id, limit, header).
type badInput struct{ msg string }

func (e *badInput) Error() string { return e.msg }

// badCursor is what the query side's cursor errors satisfy.
type badCursor interface{ BadCursor() bool }

// problemFor maps an error to its problem. It is the one place where errors
// become HTTP statuses. The detail of a 5xx never carries the error text
// (it may hold internals); the error is logged instead.
func problemFor(err error) (p Problem, internal bool) {
	var (
		bi  *badInput
		ve  *commands.ValidationError
		mbe *http.MaxBytesError
		bc  badCursor
		ov  *overloadedError
		rl  *rateLimitedError
	)
	switch {
	case errors.As(err, &rl):
		p = probRateLimited
		p.Detail = "past the caller's quota of " + rl.quota + " (RateLimit-Policy); retry after Retry-After"
	case errors.As(err, &ov):
		p = probOverloaded
		p.Detail = "the server is at its bound of " + ov.class + "s in flight; retry after Retry-After"
	case errors.As(err, &mbe):
		p = probTooLarge
		p.Detail = "the request body is larger than the limit"
	case errors.Is(err, errBodyTimeout):
		p = probSlowBody
		p.Detail = err.Error() + "; the connection is closed"
	case errors.As(err, &bi):
		p = probBadRequest
		p.Detail = bi.msg
	case errors.As(err, &ve):
		p = probBadRequest
		p.Detail = ve.Error()
	case errors.As(err, &bc) && bc.BadCursor():
		p = probBadRequest
		p.Detail = "the cursor is malformed or expired"
	case errors.Is(err, commands.ErrInvalid), errors.Is(err, queries.ErrInvalidLimit), errors.Is(err, queries.ErrInvalidID):
		p = probBadRequest
		p.Detail = err.Error()
	case errors.Is(err, errUnauthenticated), errors.Is(err, auth.ErrInvalidToken):
		p = probUnauthorized
		p.Detail = "a valid identity is required"
	case errors.Is(err, commands.ErrBlockedByAuthor):
		p = probForbidden
		p.Detail = "the post's author blocks the caller"
	case errors.Is(err, commands.ErrPostUnavailable):
		p = probPostGone
		p.Detail = err.Error()
	case errors.Is(err, commands.ErrBlocked):
		p = probForbidden
		p.Detail = "one of these accounts blocks the other: no follow while the block stands"
	case errors.Is(err, commands.ErrForbidden):
		p = probForbidden
		p.Detail = "only the owner may do this"
	case errors.Is(err, commands.ErrNotFound), errors.Is(err, queries.ErrPostNotFound), errors.Is(err, errRouteNotFound):
		p = probNotFound
		p.Detail = err.Error()
	case errors.Is(err, errMethodNotAllowed):
		p = probMethod
		p.Detail = err.Error()
	case errors.Is(err, commands.ErrStaleVersion):
		p = probConflict
		p.Detail = "the post was changed since the version in If-Match; read it again (its ETag) and retry"
	case errors.Is(err, commands.ErrVersionConflict):
		p = probConflict
		p.Detail = "a concurrent change won; retry the request"
	case errors.Is(err, commands.ErrIdempotencyKeyReused):
		p = probKeyReused
		p.Detail = "this Idempotency-Key was used for a different request"
	case errors.Is(err, errFeedUnavailable), errors.Is(err, errStatusUnavailable), errors.Is(err, errStreamsUnavailable), errors.Is(err, errTooManyStreams),
		errors.Is(err, errNoTurn):
		p = probUnavailable
		p.Detail = err.Error()
	case errors.Is(err, context.Canceled):
		// The client went away (or the server is stopping): nobody reads
		// this answer, and it is not a failure worth logging.
		p = probUnavailable
		p.Detail = "the request was canceled"
	case errors.Is(err, commands.ErrOutcomeUnknown):
		p = probUnknown
		p.Detail = "the connection to the database was lost while the write was committing; it may or may not have happened: retry with an Idempotency-Key"
		internal = true
	case errors.Is(err, queries.ErrFallbackBusy):
		p = probUnavailable
		p.Detail = "a dependency is down and the fallback is at capacity; retry later"
		internal = true
	case transient.Unavailable(err), errors.Is(err, queries.ErrRedisUnavailable):
		p = probUnavailable
		p.Detail = "a dependency is down or too slow; retry later"
		internal = true
	default:
		p = probInternal
		p.Detail = "an unexpected error happened; it was logged"
		internal = true
	}
	return p, internal
}

// writeError answers err as a problem, logging the ones the client cannot
// be blamed for.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	writeErrorWith(w, r, log, err, nil)
}

// writeErrorWith is writeError with extra response headers (name, value
// pairs), e.g. the Allow of a 405.
func writeErrorWith(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error, headers []string) {
	p, internal := problemFor(err)
	if internal {
		log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "status", p.Status,
			"request_id", requestID(r.Context()), "err", err)
	}
	p.Instance = r.URL.Path
	for i := 0; i+1 < len(headers); i += 2 {
		w.Header().Set(headers[i], headers[i+1])
	}
	switch p.Status {
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="feed"`)
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		var rl *rateLimitedError
		if errors.As(err, &rl) {
			w.Header().Set("Retry-After", rl.retryAfterHeader())
		} else {
			w.Header().Set("Retry-After", retryAfterSeconds)
		}
	}
	writeProblem(w, p)
}

func writeProblem(w http.ResponseWriter, p Problem) {
	b, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}
