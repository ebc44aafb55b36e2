package commands

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// MaxIdempotencyKeyLen bounds an idempotency key, in bytes.
const MaxIdempotencyKeyLen = 200

// IdempotencyKey identifies one logical write of one actor. RequestHash
// fingerprints the request (method, path, body) so that a key reused for a
// different request is refused instead of answered with the wrong response.
type IdempotencyKey struct {
	ActorID     int64 // 0 for writes without an identity (registration)
	Key         string
	RequestHash []byte
}

// Response is what an idempotent write stores and replays verbatim.
type Response struct {
	Status int
	Body   []byte
}

// ValidateIdempotencyKey accepts 1..MaxIdempotencyKeyLen printable ASCII
// characters.
func ValidateIdempotencyKey(key string) error {
	if key == "" {
		return invalid("Idempotency-Key", "must not be empty")
	}
	if len(key) > MaxIdempotencyKeyLen {
		return invalid("Idempotency-Key", "longer than %d characters", MaxIdempotencyKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return invalid("Idempotency-Key", "must be printable ASCII")
		}
	}
	return nil
}

// RunIdempotent runs fn like Run, and stores its response under key in the
// same transaction. A later (or concurrent) call with the same key does not
// run fn: it returns the stored response and replayed=true. Concurrent
// duplicates wait on the key's unique index until the first commits; if the
// first fails (and so rolls back, key included) the next one runs normally.
// The same key with a different RequestHash is ErrIdempotencyKeyReused.
func (r *Runner) RunIdempotent(ctx context.Context, key IdempotencyKey, fn func(ctx context.Context, tx pgx.Tx) (Response, error)) (resp Response, replayed bool, err error) {
	if err := ValidateIdempotencyKey(key.Key); err != nil {
		return Response{}, false, err
	}
	err = r.Run(ctx, func(ctx context.Context, tx pgx.Tx) error {
		resp, replayed = Response{}, false
		tag, err := tx.Exec(ctx, `
			INSERT INTO idempotency_keys (actor_id, key, request_hash, status, response)
			VALUES ($1, $2, $3, 0, '') ON CONFLICT DO NOTHING`,
			key.ActorID, key.Key, key.RequestHash)
		if err != nil {
			return fmt.Errorf("claim idempotency key: %w", err)
		}
		if tag.RowsAffected() == 0 {
			// The key was committed by an earlier request (this statement
			// waited for it if it was in flight): replay its response.
			var hash []byte
			err := tx.QueryRow(ctx, `
				SELECT request_hash, status, response FROM idempotency_keys
				WHERE actor_id = $1 AND key = $2`, key.ActorID, key.Key).Scan(&hash, &resp.Status, &resp.Body)
			if errors.Is(err, pgx.ErrNoRows) {
				// Deleted between our insert and read (expiry): run again.
				return fmt.Errorf("idempotency key vanished: %w", ErrVersionConflict)
			}
			if err != nil {
				return fmt.Errorf("read idempotency key: %w", err)
			}
			if !bytes.Equal(hash, key.RequestHash) {
				return ErrIdempotencyKeyReused
			}
			replayed = true
			return nil
		}
		resp, err = fn(ctx, tx)
		if err != nil {
			return err
		}
		if resp.Body == nil {
			resp.Body = []byte{} // the column is NOT NULL; nil would be NULL
		}
		if _, err := tx.Exec(ctx, `
			UPDATE idempotency_keys SET status = $3, response = $4
			WHERE actor_id = $1 AND key = $2`,
			key.ActorID, key.Key, resp.Status, resp.Body); err != nil {
			return fmt.Errorf("store idempotent response: %w", err)
		}
		return nil
	})
	if err != nil {
		return Response{}, false, err
	}
	return resp, replayed, nil
}
