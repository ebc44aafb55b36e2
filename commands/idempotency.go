package commands

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// MaxIdempotencyKeyLen bounds an idempotency key, in bytes.
const MaxIdempotencyKeyLen = 200

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

// KeyedTxHandler is a TxHandler that can run under an idempotency key ("":
// none). replayed reports that res is the stored result of an earlier run
// under that key rather than the result of running cmd now.
type KeyedTxHandler[C, R any] func(ctx context.Context, tx pgx.Tx, cmd C, key string) (res R, replayed bool, err error)

// Idempotent decorates h, the work of the command called name, so that it
// runs at most once per idempotency key of an actor (cmd.Actor()).
//
// Under a key, the decorated handler first claims the key in tx, then runs
// h and stores h's result (as JSON) in the same transaction. A later call
// with the same key does not run h: it returns the stored result and
// replayed=true. Concurrent duplicates wait on the key's unique index until
// the first commits; if the first fails (and so rolls back, key included)
// the next one runs normally. The key is bound to the fingerprint of the
// command (name and inputs, see fingerprint): the same key with another
// command is ErrIdempotencyKeyReused.
//
// R must survive a JSON round trip unchanged: a replay is the stored JSON
// decoded into R.
func Idempotent[C Command, R any](name string, h TxHandler[C, R]) KeyedTxHandler[C, R] {
	return func(ctx context.Context, tx pgx.Tx, cmd C, key string) (res R, replayed bool, err error) {
		if key == "" {
			res, err = h(ctx, tx, cmd)
			return res, false, err
		}
		if err := ValidateIdempotencyKey(key); err != nil {
			return res, false, err
		}
		fp, err := fingerprint(name, cmd)
		if err != nil {
			return res, false, err
		}
		stored, claimed, err := claimKey(ctx, tx, cmd.Actor(), key, fp)
		if err != nil {
			return res, false, err
		}
		if !claimed {
			if err := json.Unmarshal(stored, &res); err != nil {
				return res, false, fmt.Errorf("decode stored result of %s: %w", name, err)
			}
			return res, true, nil
		}
		if res, err = h(ctx, tx, cmd); err != nil {
			return res, false, err
		}
		b, err := json.Marshal(res)
		if err != nil {
			return res, false, fmt.Errorf("encode result of %s: %w", name, err)
		}
		if _, err := tx.Exec(ctx, `UPDATE idempotency_keys SET result = $3 WHERE actor_id = $1 AND key = $2`,
			cmd.Actor(), key, b); err != nil {
			return res, false, fmt.Errorf("store idempotent result: %w", err)
		}
		return res, false, nil
	}
}

// fingerprint is what makes two commands under one key "the same": the
// command's name and its inputs, as JSON. Trace fields are tagged `json:"-"`
// on every command, so a retry (which has a request id of its own) has the
// fingerprint of the first attempt. Renaming a command's field changes its
// fingerprint: a retry across that change is refused as a reused key.
func fingerprint(name string, cmd any) ([]byte, error) {
	b, err := json.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("fingerprint %s: %w", name, err)
	}
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write(b)
	return h.Sum(nil), nil
}

// claimKey takes the key for the command fingerprinted fp in tx
// (claimed=true), or, when a committed command already holds it, returns
// that command's stored result. It waits for an uncommitted claim of the
// same key to commit or roll back.
func claimKey(ctx context.Context, tx pgx.Tx, actor int64, key string, fp []byte) (stored []byte, claimed bool, err error) {
	tag, err := tx.Exec(ctx, `
		INSERT INTO idempotency_keys (actor_id, key, request_hash)
		VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, actor, key, fp)
	if err != nil {
		return nil, false, fmt.Errorf("claim idempotency key: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil, true, nil
	}
	// The key was committed by an earlier command (the insert waited for
	// it if it was in flight): replay its result.
	var hash []byte
	err = tx.QueryRow(ctx, `SELECT request_hash, result FROM idempotency_keys WHERE actor_id = $1 AND key = $2`,
		actor, key).Scan(&hash, &stored)
	if errors.Is(err, pgx.ErrNoRows) {
		// Deleted between our insert and read (expiry): run again.
		return nil, false, fmt.Errorf("idempotency key vanished: %w", ErrVersionConflict)
	}
	if err != nil {
		return nil, false, fmt.Errorf("read idempotency key: %w", err)
	}
	if !bytes.Equal(hash, fp) {
		return nil, false, ErrIdempotencyKeyReused
	}
	if stored == nil {
		// Every committed claim has its result: only a row from before
		// results were stored could lack one.
		return nil, false, fmt.Errorf("idempotency key %q has no stored result", key)
	}
	return stored, false, nil
}
