package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/gorilla/mux"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/internal/tracing"
)

// commandHandler is a command's entry point as the API uses it;
// *commands.Handler is one. It runs the whole command (transaction,
// retries, idempotency under idempotencyKey when it is not "").
type commandHandler[C, R any] interface {
	Do(ctx context.Context, cmd C, idempotencyKey string) (res R, replayed bool, err error)
}

// runCommand runs cmd through h, idempotently when the request has an
// Idempotency-Key (scoped by the command to its actor), and answers the
// result with status and, unless present is nil, the JSON of present(res)
// as the body, and unless headers is nil, the response headers it sets
// from res (the Location of what a 201 created, a post's ETag). A
// replayed result gets `Idempotent-Replayed: true` and is encoded exactly
// as a fresh one, with the same headers, so a retry's body is
// byte-for-byte the first's. It is the one place where command results become responses, as
// problemFor is for errors (which it returns unanswered).
func runCommand[C, R any](w http.ResponseWriter, r *http.Request, h commandHandler[C, R], cmd C, status int, present func(R) any, headers func(R, http.Header)) (res R, replayed bool, err error) {
	key, err := idempotencyKey(r)
	if err != nil {
		return res, false, err
	}
	res, replayed, err = h.Do(r.Context(), cmd, key)
	if err != nil {
		return res, false, err
	}
	var body []byte
	if present != nil {
		if body, err = json.Marshal(present(res)); err != nil {
			return res, false, fmt.Errorf("encode response: %w", err)
		}
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if headers != nil {
		headers(res, w.Header())
	}
	writeRaw(w, status, body)
	return res, replayed, nil
}

// runOnTarget runs the bodiless command that build makes of the id in the
// path variable varName (reported as field when malformed) and answers
// 204: the shape of follow, unfollow and delete. The body is read all the
// same, so that an oversized one is 413 as on every write.
func runOnTarget[C, R any](w http.ResponseWriter, r *http.Request, varName, field string, h commandHandler[C, R], build func(id int64) C) error {
	id, err := parseID(field, mux.Vars(r)[varName])
	if err != nil {
		return err
	}
	if _, err := readBody(r); err != nil {
		return err
	}
	_, _, err = runCommand(w, r, h, build(id), http.StatusNoContent, nil, nil)
	return err
}

// idempotencyKey is the request's Idempotency-Key, "" when it has none.
// Several keys, or a malformed one (an empty one included), are 400.
func idempotencyKey(r *http.Request) (string, error) {
	keys := r.Header.Values("Idempotency-Key")
	switch {
	case len(keys) == 0:
		return "", nil
	case len(keys) > 1:
		return "", &badInput{"send one Idempotency-Key header, not several"}
	}
	if err := commands.ValidateIdempotencyKey(keys[0]); err != nil {
		return "", &badInput{err.Error()}
	}
	return keys[0], nil
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	if len(body) > 0 {
		// With its length known, net/http sends the body as it is, not
		// chunked (a page is larger than its 2 KiB pre-chunking buffer).
		// The values are shared, never modified slices (Header.Set
		// replaces a value and Add appends past their capacity): no
		// allocation per response.
		h := w.Header()
		h["Content-Type"] = jsonContentType
		h["Content-Length"] = contentLength(len(body))
	}
	w.WriteHeader(status)
	if len(body) > 0 {
		_, _ = w.Write(body)
	}
}

var jsonContentType = []string{"application/json"}

// contentLengths are the Content-Length values of bodies below 16 KiB,
// each made the first time a body of that length is written.
var contentLengths [16 << 10]atomic.Pointer[[]string]

// contentLength returns the header value of a body of n bytes: the same
// slice for every body of n bytes below 16 KiB, which no one may modify.
func contentLength(n int) []string {
	if n >= len(contentLengths) {
		return []string{strconv.Itoa(n)}
	}
	if v := contentLengths[n].Load(); v != nil {
		return *v
	}
	v := []string{strconv.Itoa(n)}
	contentLengths[n].Store(&v)
	return v
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	writeRaw(w, status, b)
	return nil
}

func (s *Server) trace(r *http.Request) commands.Trace {
	return commands.Trace{CorrelationID: correlationID(r.Context()), CausationID: requestID(r.Context()),
		TraceParent: tracing.TraceParent(r.Context())}
}
