package commands

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Command is what every command of this package satisfies, so that one
// entry point (Handler) and one idempotency decorator serve them all.
type Command interface {
	// Actor is the user the command acts as, 0 for a registration (which
	// has no identity yet). Idempotency keys are scoped to it.
	Actor() int64
}

// TxHandler is one command's work inside a transaction the caller owns:
// validate against the inline projections, change them, append the
// command's events, and return the command's domain result.
type TxHandler[C, R any] func(ctx context.Context, tx pgx.Tx, cmd C) (R, error)

// StmtHandler is one command's whole work as a single autocommitted
// statement on db, for a command whose transaction fits in one: one round
// trip instead of BEGIN, the statements and COMMIT.
type StmtHandler[C, R any] func(ctx context.Context, db DB, cmd C) (R, error)

// Handler is the entry point of one kind of command. It runs the whole
// thing: the command's transaction, that transaction again when it loses a
// concurrency race (see Runner), and idempotency when given a key (see
// Idempotent). Callers never see a transaction.
type Handler[C Command, R any] struct {
	tx   *Runner
	exec TxHandler[C, R]
	idem KeyedTxHandler[C, R]
	// stmt, when set, runs the command without an idempotency key; it must
	// write exactly what exec writes. stmtIf, when set, limits it to the
	// commands it answers true for; the others run as exec's transaction.
	stmt   StmtHandler[C, R]
	stmtIf func(C) bool
}

// newHandler builds the entry point of the command called name (the name
// scopes its idempotency fingerprints) whose work is exec.
func newHandler[C Command, R any](tx *Runner, name string, exec TxHandler[C, R]) *Handler[C, R] {
	return &Handler[C, R]{tx: tx, exec: exec, idem: Idempotent(name, exec)}
}

// withStatement makes h run a command without an idempotency key as the
// single statement stmt.
func (h *Handler[C, R]) withStatement(stmt StmtHandler[C, R]) *Handler[C, R] {
	h.stmt = stmt
	return h
}

// withStatementIf is withStatement for the commands when answers true for.
func (h *Handler[C, R]) withStatementIf(when func(C) bool, stmt StmtHandler[C, R]) *Handler[C, R] {
	h.stmt, h.stmtIf = stmt, when
	return h
}

// Do runs cmd in its own transaction and returns its result. With a
// non-empty idempotencyKey it runs idempotently: when the actor already
// completed a command under that key, cmd is not run, and the stored result
// of that command is returned with replayed=true (ErrIdempotencyKeyReused
// if that command was not the same as cmd). An empty key runs cmd
// unconditionally. A connection to PostgreSQL lost before COMMIT is
// retried either way; one lost during COMMIT is retried only under a key
// (the retry replays the first run if it committed), else it is
// ErrOutcomeUnknown. A command with a single-statement form runs without a
// key as that one autocommitted statement (see Runner.RunStatement).
func (h *Handler[C, R]) Do(ctx context.Context, cmd C, idempotencyKey string) (res R, replayed bool, err error) {
	if idempotencyKey == "" && h.stmt != nil && (h.stmtIf == nil || h.stmtIf(cmd)) {
		err = h.tx.RunStatement(ctx, func(ctx context.Context, db DB) error {
			var err error
			res, err = h.stmt(ctx, db, cmd)
			return err
		})
		if err != nil {
			var zero R
			return zero, false, err
		}
		return res, false, nil
	}
	run := h.tx.Run
	if idempotencyKey != "" {
		// A second run under the key replays the first if it committed.
		run = h.tx.RunReplaySafe
	}
	err = run(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		res, replayed, err = h.idem(ctx, tx, cmd, idempotencyKey)
		return err
	})
	if err != nil {
		var zero R
		return zero, false, err
	}
	return res, replayed, nil
}

// Handle runs cmd in its own transaction without an idempotency key, for
// callers that never retry (tests, seeding).
func (h *Handler[C, R]) Handle(ctx context.Context, cmd C) (R, error) {
	res, _, err := h.Do(ctx, cmd, "")
	return res, err
}

// Exec runs cmd inside tx, a transaction the caller owns, with neither
// retries nor idempotency: for composing several commands in one
// transaction.
func (h *Handler[C, R]) Exec(ctx context.Context, tx pgx.Tx, cmd C) (R, error) {
	return h.exec(ctx, tx, cmd)
}
