package commands

import (
	"errors"
	"fmt"
)

// Errors callers branch on. The HTTP layer maps each to one status in one
// place (api/problem.go); wrap them with context, never replace them.
var (
	// ErrInvalid means the command itself is malformed (empty content, a
	// self-follow, ...): retrying it unchanged cannot succeed.
	ErrInvalid = errors.New("invalid command")
	// ErrNotFound means a user or post the command names does not exist.
	ErrNotFound = errors.New("not found")
	// ErrForbidden means the actor may not do this to that resource (deleting
	// another author's post).
	ErrForbidden = errors.New("forbidden")
	// ErrBlocked means a follow between two accounts one of which blocks
	// the other. It matches ErrForbidden with errors.Is.
	ErrBlocked = fmt.Errorf("one of the accounts blocks the other: %w", ErrForbidden)
	// ErrPostUnavailable means a post the command refers to (a reply's
	// parent, a quoted post) does not exist or was deleted: the request
	// is well formed but cannot be carried out.
	ErrPostUnavailable = errors.New("the post referred to does not exist or was deleted")
	// ErrBlockedByAuthor means the author of the post the command acts on
	// or refers to (a reply, quote, repost or like) blocks the actor. It
	// matches ErrForbidden with errors.Is.
	ErrBlockedByAuthor = fmt.Errorf("the post's author blocks the caller: %w", ErrForbidden)
	// ErrVersionConflict means another transaction appended to the same
	// stream first, and retries did not get past it. Retrying later may work.
	ErrVersionConflict = errors.New("version conflict")
	// ErrStaleVersion means the caller named the version it expects a
	// post at (EditPost.IfVersion) and the post is at another: someone
	// changed it since the caller read it. Unlike ErrVersionConflict it is
	// not retried: only the caller can decide what to do.
	ErrStaleVersion = errors.New("the post is not at the expected version")
	// ErrIdempotencyKeyReused means an idempotency key already belongs to a
	// different request of the same actor.
	ErrIdempotencyKeyReused = errors.New("idempotency key reused with a different request")
	// ErrOutcomeUnknown means the connection to PostgreSQL was lost while
	// the transaction's COMMIT was in flight and the command had no
	// idempotency key: it may or may not have committed, so it was not run
	// again. A retry with an idempotency key is safe.
	ErrOutcomeUnknown = errors.New("connection lost during commit: the outcome is unknown")
)

// ValidationError says which field of a command is wrong and why. It
// matches ErrInvalid with errors.Is.
type ValidationError struct {
	Field  string
	Reason string
}

// Error implements error.
func (e *ValidationError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return fmt.Sprintf("%s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) true for every validation error.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
