package api

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/commands"
)

// writeFunc is one attempt of a write endpoint's command inside the
// transaction; it returns the success status and body (nil: no body).
type writeFunc func(ctx context.Context, tx pgx.Tx) (status int, body any, err error)

// runWrite runs a command's transaction, idempotently when the request has an
// Idempotency-Key (scoped to actor; 0 for anonymous registration), writes the
// response, and reports whether it was a replay of a stored one.
func (s *Server) runWrite(w http.ResponseWriter, r *http.Request, actor int64, reqBody []byte, fn writeFunc) (replayed bool, err error) {
	attempt := func(ctx context.Context, tx pgx.Tx) (commands.Response, error) {
		status, body, err := fn(ctx, tx)
		if err != nil {
			return commands.Response{}, err
		}
		resp := commands.Response{Status: status}
		if body != nil {
			if resp.Body, err = json.Marshal(body); err != nil {
				return commands.Response{}, fmt.Errorf("encode response: %w", err)
			}
		}
		return resp, nil
	}
	var resp commands.Response
	keys := r.Header.Values("Idempotency-Key")
	switch {
	case len(keys) == 0:
		err = s.deps.Commands.Tx.Run(r.Context(), func(ctx context.Context, tx pgx.Tx) error {
			var err error
			resp, err = attempt(ctx, tx)
			return err
		})
	case len(keys) > 1:
		return false, &badInput{"send one Idempotency-Key header, not several"}
	default:
		if verr := commands.ValidateIdempotencyKey(keys[0]); verr != nil {
			return false, &badInput{verr.Error()}
		}
		key := commands.IdempotencyKey{ActorID: actor, Key: keys[0], RequestHash: requestHash(r, reqBody)}
		resp, replayed, err = s.deps.Commands.Tx.RunIdempotent(r.Context(), key, attempt)
	}
	if err != nil {
		return false, err
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeRaw(w, resp.Status, resp.Body)
	return replayed, nil
}

// requestHash fingerprints what makes two requests "the same" for an
// idempotency key: method, path and body.
func requestHash(r *http.Request, body []byte) []byte {
	h := sha256.New()
	h.Write([]byte(r.Method))
	h.Write([]byte{0})
	h.Write([]byte(r.URL.EscapedPath()))
	h.Write([]byte{0})
	h.Write(body)
	return h.Sum(nil)
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	if len(body) > 0 {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	if len(body) > 0 {
		_, _ = w.Write(body)
	}
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
	return commands.Trace{CorrelationID: correlationID(r.Context()), CausationID: requestID(r.Context())}
}
