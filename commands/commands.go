// Package commands is the write side: each command validates against the
// inline projections (users, posts, follows) and appends its events to the
// log in the same PostgreSQL transaction. One file per command holds its
// work (a TxHandler) and its domain result; the entry point that runs it
// (Handler: transaction, retries, idempotency), Append and the transaction
// runner are shared.
package commands

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/snowflake"
)

// DB is what the commands need from PostgreSQL; *pgxpool.Pool satisfies it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	// SendBatch runs a batch's statements as one implicit transaction
	// (the one-round-trip form of the pair commands, pairChange.batch).
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Config tunes the write side. The zero value means the defaults.
type Config struct {
	// MaxContentChars bounds a post's content, counted in Unicode code
	// points (runes), not bytes. Default 2000.
	MaxContentChars int
	// MaxNameChars bounds a user's name in runes. Default 100.
	MaxNameChars int
	// MaxAttempts is how many times a transaction runs when it loses a
	// concurrency race (version conflict, deadlock) before ErrVersionConflict
	// is returned. Default 5.
	MaxAttempts int
	// TxTimeout bounds each transaction attempt, every statement in it
	// included. Default 5s.
	TxTimeout time.Duration
}

func (c Config) withDefaults() Config {
	c.MaxContentChars = cmp.Or(c.MaxContentChars, 2000)
	c.MaxNameChars = cmp.Or(c.MaxNameChars, 100)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 5)
	c.TxTimeout = cmp.Or(c.TxTimeout, 5*time.Second)
	return c
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.MaxContentChars < 1:
		return fmt.Errorf("max content chars %d: want at least 1", c.MaxContentChars)
	case c.MaxNameChars < 1:
		return fmt.Errorf("max name chars %d: want at least 1", c.MaxNameChars)
	case c.MaxAttempts < 1:
		return fmt.Errorf("max attempts %d: want at least 1", c.MaxAttempts)
	case c.TxTimeout <= 0:
		return fmt.Errorf("tx timeout %v: want positive", c.TxTimeout)
	}
	return nil
}

// Trace carries the request's ids into the metadata of the events a command
// appends, so an event can be traced back to the request that caused it.
type Trace struct {
	// CorrelationID groups everything one client workflow caused.
	CorrelationID string
	// CausationID is the id of the request (or message) that caused this
	// command.
	CausationID string
	// TraceParent is the W3C traceparent of the caller's span (the API
	// takes it from the request's context), "" when it is not traced.
	TraceParent string
}

// metadata is the event metadata of a command traced by t and done by actor.
func (t Trace) metadata(actor int64) events.Metadata {
	return events.Metadata{CorrelationID: t.CorrelationID, CausationID: t.CausationID, Actor: strconv.FormatInt(actor, 10),
		TraceParent: t.TraceParent}
}

// Commands bundles the write side's entry points over one database.
type Commands struct {
	// Tx runs transactions the way every command's runs (retries
	// included), for work composed of several commands' Exec.
	Tx *Runner
	// RegisterUser returns the new user.
	RegisterUser *Handler[RegisterUser, User]
	// CreatePost returns the new post.
	CreatePost *Handler[CreatePost, Post]
	// DeletePost reports whether it deleted the post (false: it was
	// already deleted).
	DeletePost *Handler[DeletePost, bool]
	// EditPost returns the post as edited (as it is when the content is
	// unchanged).
	EditPost *Handler[EditPost, Post]
	// Follow reports whether it changed anything (false: already following).
	Follow *Handler[Follow, bool]
	// Unfollow reports whether it changed anything (false: was not
	// following).
	Unfollow *Handler[Unfollow, bool]
	// Mute and Unmute report whether they changed anything.
	Mute   *Handler[Mute, bool]
	Unmute *Handler[Unmute, bool]
	// Block and Unblock report whether they changed anything.
	Block   *Handler[Block, bool]
	Unblock *Handler[Unblock, bool]
	// Repost, Unrepost, Like and Unlike report whether they changed
	// anything.
	Repost   *Handler[Repost, bool]
	Unrepost *Handler[Unrepost, bool]
	Like     *Handler[Like, bool]
	Unlike   *Handler[Unlike, bool]
	db       DB
	cfg      Config
}

// New builds every handler. ids issues post ids; its node id must be unique
// among the processes writing to this database.
func New(db DB, ids *snowflake.Generator, cfg Config) (*Commands, error) {
	if db == nil {
		return nil, errors.New("commands: nil DB")
	}
	if ids == nil {
		return nil, errors.New("commands: nil snowflake generator")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("commands: %w", err)
	}
	tx := &Runner{db: db, cfg: cfg}
	return &Commands{
		Tx:           tx,
		RegisterUser: newHandler(tx, "register-user", registerUser(cfg)),
		CreatePost: newHandler(tx, "create-post", createPost(cfg, ids)).withStatementIf(func(c CreatePost) bool { return !refersToPost(c) },
			createPostStatement(cfg, ids)),
		DeletePost: newHandler(tx, "delete-post", deletePost),
		EditPost:   newHandler(tx, "edit-post", editPost(cfg)),
		Follow:     newHandler(tx, "follow", follow).withStatement(followStatement),
		Unfollow:   newHandler(tx, "unfollow", unfollow).withStatement(unfollowStatement),
		Mute:       newHandler(tx, "mute", mute).withStatement(muteStatement),
		Unmute:     newHandler(tx, "unmute", unmute).withStatement(unmuteStatement),
		Block:      newHandler(tx, "block", block),
		Unblock:    newHandler(tx, "unblock", unblock),
		Repost:     newHandler(tx, "repost", repost(ids)),
		Unrepost:   newHandler(tx, "unrepost", unrepost),
		Like:       newHandler(tx, "like", like),
		Unlike:     newHandler(tx, "unlike", unlike),
		db:         db,
		cfg:        cfg,
	}, nil
}

// Config returns the effective configuration, defaults filled in.
func (c *Commands) Config() Config { return c.cfg }
