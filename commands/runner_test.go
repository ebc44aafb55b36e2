package commands_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/testkit/testenv"
)

// killingDB terminates the backend of a transaction with
// pg_terminate_backend, as an operator or a failover does: right after
// BEGIN (the command's statements then fail), or just before COMMIT is
// sent (at: "begin" or "commit"), for the first kills transactions.
type killingDB struct {
	t     *testing.T
	pool  *pgxpool.Pool
	at    string
	kills atomic.Int32
}

func (d *killingDB) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if d.kills.Add(-1) < 0 {
		return tx, nil
	}
	if d.at == "begin" {
		d.terminate(ctx, tx)
		return tx, nil
	}
	return &killAtCommit{Tx: tx, db: d}, nil
}

func (d *killingDB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return d.pool.SendBatch(ctx, b)
}

func (d *killingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return d.pool.QueryRow(ctx, sql, args...)
}

// terminate ends tx's backend and waits (up to 5 s) until it is gone.
func (d *killingDB) terminate(ctx context.Context, tx pgx.Tx) {
	pid := tx.Conn().PgConn().PID()
	var ok bool
	if err := d.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 5000)`, pid).Scan(&ok); err != nil || !ok {
		d.t.Errorf("terminate backend %d: %v %v", pid, ok, err)
	}
}

type killAtCommit struct {
	pgx.Tx
	db *killingDB
}

func (k *killAtCommit) Commit(ctx context.Context) error {
	k.db.terminate(ctx, k.Tx)
	return k.Tx.Commit(ctx)
}

func setupKilling(t *testing.T, at string, kills int32) (*commands.Commands, *pgxpool.Pool) {
	t.Helper()
	db := testenv.NewDB(t)
	ids, err := snowflake.New(1)
	if err != nil {
		t.Fatal(err)
	}
	kd := &killingDB{t: t, pool: db.Pool, at: at}
	c, err := commands.New(kd, ids, commands.Config{})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := commands.New(db.Pool, ids, commands.Config{})
	if err != nil {
		t.Fatal(err)
	}
	register(t, plain, "author")
	kd.kills.Store(kills)
	return c, db.Pool
}

func postCount(t *testing.T, pool *pgxpool.Pool, author int64) (posts, events int) {
	t.Helper()
	ctx := context.Background()
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM posts WHERE author_id = $1`, author).Scan(&posts); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE type LIKE 'post.created.%'`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	return posts, events
}

// createPostInTx runs CreatePost without a key as a transaction (Run and
// Exec), the path a key-less create-post took before it became one
// statement.
func createPostInTx(ctx context.Context, c *commands.Commands, cmd commands.CreatePost) (commands.Post, error) {
	var p commands.Post
	err := c.Tx.Run(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		p, err = c.CreatePost.Exec(ctx, tx, cmd)
		return err
	})
	return p, err
}

// A backend terminated under a command's statements (57P01: nothing
// committed) is retried on a new connection: the post exists once.
func TestRunnerRetriesTerminatedConnection(t *testing.T) {
	t.Parallel()
	c, pool := setupKilling(t, "begin", 2)
	p, err := createPostInTx(context.Background(), c, commands.CreatePost{AuthorID: 1, Content: "survives two kills"})
	if err != nil {
		t.Fatalf("create post after terminated connections: %v", err)
	}
	if n, e := postCount(t, pool, 1); n != 1 || e != 1 || p.ID == 0 {
		t.Fatalf("%d posts and %d events, want one of each", n, e)
	}
}

// A connection lost at COMMIT without an idempotency key leaves the
// outcome unknown: not retried, ErrOutcomeUnknown. With a key the retry
// is replay-safe and the post exists once.
func TestRunnerConnectionLostAtCommit(t *testing.T) {
	t.Parallel()
	t.Run("no key", func(t *testing.T) {
		t.Parallel()
		c, pool := setupKilling(t, "commit", 1)
		_, err := createPostInTx(context.Background(), c, commands.CreatePost{AuthorID: 1, Content: "maybe"})
		if !errors.Is(err, commands.ErrOutcomeUnknown) {
			t.Fatalf("want ErrOutcomeUnknown, got %v", err)
		}
		if n, _ := postCount(t, pool, 1); n != 0 { // the backend was gone before COMMIT reached it
			t.Fatalf("%d posts", n)
		}
	})
	t.Run("key", func(t *testing.T) {
		t.Parallel()
		c, pool := setupKilling(t, "commit", 2)
		p, _, err := c.CreatePost.Do(context.Background(), commands.CreatePost{AuthorID: 1, Content: "once"}, "k-1")
		if err != nil {
			t.Fatalf("create post with a key after lost commits: %v", err)
		}
		if n, e := postCount(t, pool, 1); n != 1 || e != 1 || p.ID == 0 {
			t.Fatalf("%d posts and %d events, want one of each", n, e)
		}
	})
}
