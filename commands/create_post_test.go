package commands_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/internal/transient"
	"github.com/feedco/feed/testkit/testenv"
)

// postRows is what a create-post leaves in PostgreSQL, as text, with the
// post's id and time and the event's id left out so that two posts of the
// same command compare equal.
type postRows struct {
	Post, EventType, Payload, Metadata string
	Version                            int64
}

func readPostRows(t *testing.T, pool *pgxpool.Pool, p commands.Post) postRows {
	t.Helper()
	var r postRows
	err := pool.QueryRow(context.Background(), `
		SELECT format('%s|%s|%s', p.author_id, p.content, p.created_at = $2),
		       e.type, e.stream_version,
		       (e.payload - 'postId' - 'createdAt')::text,
		       e.metadata::text
		FROM posts p JOIN events e ON e.stream_id = $3
		WHERE p.id = $1`, p.ID, p.CreatedAt, events.PostStream(p.ID)).Scan(&r.Post, &r.EventType, &r.Version, &r.Payload, &r.Metadata)
	if err != nil {
		t.Fatalf("rows of post %d: %v", p.ID, err)
	}
	return r
}

// The single statement writes the same post row and the same event as the
// transaction (Append of events.Encode's payload), and the payload decodes
// to the PostCreated the command describes.
func TestCreatePostStatementMatchesTransaction(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	author, fan := register(t, c, "author"), register(t, c, "fan")
	if _, err := c.Follow.Handle(ctx, commands.Follow{FollowerID: fan, FolloweeID: author}); err != nil {
		t.Fatal(err)
	}
	cmd := commands.CreatePost{AuthorID: author, Content: "olá \"mundo\" \u2028 <&>", Trace: commands.Trace{CorrelationID: "corr", CausationID: "cause"}}
	viaStmt, err := c.CreatePost.Handle(ctx, cmd)
	if err != nil {
		t.Fatal(err)
	}
	viaTx, err := createPostInTx(ctx, c, cmd)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := readPostRows(t, b.pool, viaStmt), readPostRows(t, b.pool, viaTx); got != want {
		t.Fatalf("statement wrote %+v, transaction %+v", got, want)
	}
	// The whole payload, ids and time included, is Encode's as jsonb.
	want, err := events.Encode(events.PostCreated{PostID: viaStmt.ID, AuthorID: author, Content: cmd.Content, CreatedAt: viaStmt.CreatedAt, AuthorFollowers: 1})
	if err != nil {
		t.Fatal(err)
	}
	var same bool
	if err := b.pool.QueryRow(ctx, `SELECT payload::text = $2::jsonb::text FROM events WHERE stream_id = $1`,
		events.PostStream(viaStmt.ID), string(want)).Scan(&same); err != nil || !same {
		t.Fatalf("payload is not Encode's (%v)", err)
	}
	evs := streamEvents(t, b.pool, events.PostStream(viaStmt.ID))
	if got := evs[0].Event.(events.PostCreated); got.PostID != viaStmt.ID || got.AuthorFollowers != 1 || !got.CreatedAt.Equal(viaStmt.CreatedAt) || evs[0].Meta.Actor == "" {
		t.Fatalf("decoded %+v %+v", got, evs[0].Meta)
	}
}

// An unknown author is ErrNotFound and writes nothing.
func TestCreatePostStatementUnknownAuthor(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	_, err := c.CreatePost.Handle(context.Background(), commands.CreatePost{AuthorID: 424242, Content: "hi"})
	if !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("want ErrNotFound, got %v", err)
	}
	if n, e := postCount(t, b.pool, 424242); n != 0 || e != 0 {
		t.Fatalf("%d posts and %d events", n, e)
	}
}

// openFollow starts a follow of author in a transaction left open: it
// holds the author's row, so a create-post waits for it.
func openFollow(t *testing.T, c *commands.Commands, pool *pgxpool.Pool, fan, author int64) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := c.Follow.Exec(context.Background(), tx, commands.Follow{FollowerID: fan, FolloweeID: author}); err != nil {
		t.Fatal(err)
	}
	return tx
}

// waitingPost returns the pid of the backend whose create-post statement
// waits for a lock.
func waitingPost(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	return waitingFor(t, pool, "INSERT INTO posts", "create-post")
}

// waitingFor returns the pid of the backend whose statement containing
// sql waits for a lock (what names it in the failure).
func waitingFor(t *testing.T, pool *pgxpool.Pool, sql, what string) int {
	t.Helper()
	var pid int
	testenv.Eventually(t, 10*time.Second, what+" waiting for a lock", func() bool {
		return pool.QueryRow(context.Background(), `
			SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND strpos(query, $1) > 0`, sql).Scan(&pid) == nil
	})
	return pid
}

// terminate ends backend pid with pg_terminate_backend, waiting up to 5 s.
func terminate(t *testing.T, pool *pgxpool.Pool, pid int) {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(), `SELECT pg_terminate_backend($1, 5000)`, pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate %d: %v %v", pid, ok, err)
	}
}

// A follow in flight when a post is written: the post waits for the
// follow and records the count the follow committed, in both orders.
func TestCreatePostStatementConcurrentFollow(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	author, fan1, fan2 := register(t, c, "author"), register(t, c, "fan1"), register(t, c, "fan2")

	// postBehind writes a post while fan's follow of author is open, then
	// ends the follow with end and returns the followers the post recorded.
	postBehind := func(fan int64, content string, end func(pgx.Tx, context.Context) error) int64 {
		t.Helper()
		tx := openFollow(t, c, b.pool, fan, author)
		type result struct {
			p   commands.Post
			err error
		}
		done := make(chan result, 1)
		go func() {
			p, err := c.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: author, Content: content})
			done <- result{p, err}
		}()
		waitingPost(t, b.pool)
		if err := end(tx, ctx); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		return streamEvents(t, b.pool, events.PostStream(r.p.ID))[0].Event.(events.PostCreated).AuthorFollowers
	}
	if got := postBehind(fan1, "after the follow", pgx.Tx.Commit); got != 1 {
		t.Fatalf("post after a committed follow records %d followers, want 1", got)
	}
	// A follow that rolls back leaves the count as it was.
	if got := postBehind(fan2, "after a rolled back follow", pgx.Tx.Rollback); got != 1 {
		t.Fatalf("post after a rolled back follow records %d followers, want 1", got)
	}
}

// The backend terminated in the middle of the statement (waiting for the
// author's row, after nothing is visible yet): the outcome is reported as
// unknown, not retried, and nothing was written, neither the post nor its
// event.
func TestCreatePostStatementTerminatedMidStatement(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	author, fan := register(t, c, "author"), register(t, c, "fan")
	tx := openFollow(t, c, b.pool, fan, author)
	errc := make(chan error, 1)
	go func() {
		_, err := c.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: author, Content: "killed"})
		errc <- err
	}()
	terminate(t, b.pool, waitingPost(t, b.pool))
	if err := <-errc; !errors.Is(err, commands.ErrOutcomeUnknown) {
		t.Fatalf("want ErrOutcomeUnknown, got %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n, e := postCount(t, b.pool, author); n != 0 || e != 0 {
		t.Fatalf("%d posts and %d events after a killed statement", n, e)
	}
}

// Two processes that issue the same post ids (one node id for both and
// one stopped clock: what node leases and their high-water marks
// prevent): every post is created once, each with an id of its own, with
// or without an Idempotency-Key; a duplicate id is retried with a new
// one, never an error.
func TestDuplicatePostIDIsRetried(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	var procs []*commands.Commands
	stopped := time.Now()
	for range 2 {
		ids, err := snowflake.NewWithClock(9, func() time.Time { return stopped }) // the same node id and time
		if err != nil {
			t.Fatal(err)
		}
		// Frozen clocks on one node id make the two generators issue the
		// same ids in runs: a skip can land in the other's run and collide
		// again, several times in a row under load. The attempts are
		// raised so that the test shows the retry, not the default bound.
		c, err := commands.New(db.Pool, ids, commands.Config{MaxAttempts: 64})
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, c)
	}
	author := register(t, procs[0], "author")
	ctx := context.Background()
	const each = 300
	var wg sync.WaitGroup
	errs := make(chan error, 2*each)
	for p, c := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				key := ""
				if i%2 == 0 {
					key = fmt.Sprintf("k-%d-%d", p, i)
				}
				if _, _, err := c.CreatePost.Do(ctx, commands.CreatePost{AuthorID: author, Content: fmt.Sprint("post ", p, i)}, key); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a post failed: %v", err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM posts WHERE author_id = $1`, author).Scan(&n); err != nil || n != 2*each {
		t.Fatalf("%d posts (%v), want %d", n, err, 2*each)
	}
}

// A PostgreSQL that refuses connections received nothing: a post is a
// plain unavailable error (503 with Retry-After), never an unknown
// outcome.
func TestRefusedConnectionIsNotAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ids, _ := snowflake.New(1)
	c, err := commands.New(pool, ids, commands.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"", "key-1"} {
		_, _, err = c.CreatePost.Do(context.Background(), commands.CreatePost{AuthorID: 1, Content: "x"}, key)
		if err == nil || errors.Is(err, commands.ErrOutcomeUnknown) || !transient.Unavailable(err) {
			t.Fatalf("a post against a refused PostgreSQL (key %q): %v; want unavailable, not an unknown outcome", key, err)
		}
	}
}
