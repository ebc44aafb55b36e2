package transient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/testkit/testenv"
)

// closedAddr is an address nobody listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func TestPostgresDown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A real refused connection.
	_, refused := pgconn.Connect(ctx, "postgres://postgres@"+closedAddr(t)+"/feed?sslmode=disable&connect_timeout=5")
	if refused == nil {
		t.Fatal("connected to a closed port")
	}
	// A real server that refuses a connection for its configuration: a
	// database that does not exist (3D000).
	cfg, err := pgconn.ParseConfig(testenv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = testenv.RandomName("feed_missing_")
	_, missing := pgconn.ConnectConfig(ctx, cfg)
	var pg *pgconn.PgError
	if !errors.As(missing, &pg) || pg.Code != "3D000" {
		t.Fatalf("connecting to a missing database: %v, want SQLSTATE 3D000", missing)
	}
	for _, e := range []error{
		fmt.Errorf("begin: %w", refused),
		&pgconn.ConnectError{},
		fmt.Errorf("insert: %w", &pgconn.PgError{Code: "57P01"}),
		&pgconn.PgError{Code: "57P02"},
		&pgconn.PgError{Code: "57P03"},
		&pgconn.PgError{Code: "08006"},
		&pgconn.PgError{Code: "53300"},
		fmt.Errorf("commit: %w", io.ErrUnexpectedEOF),
	} {
		if !PostgresDown(e) || !Unavailable(e) || !Retryable(e) {
			t.Errorf("%v: not PostgreSQL down", e)
		}
	}
	for _, e := range []error{
		nil, errors.New("boom"), missing,
		&pgconn.PgError{Code: "23505"}, &pgconn.PgError{Code: "40001"}, &pgconn.PgError{Code: "42704"},
		&pgconn.PgError{Code: "55000"},
		fmt.Errorf("query: %w", context.DeadlineExceeded),
	} {
		if PostgresDown(e) {
			t.Errorf("%v: PostgreSQL down", e)
		}
	}
	if Retryable(missing) || Unavailable(missing) {
		t.Errorf("%v: a refusal is transient", missing)
	}
}

func TestTxConflict(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"40001", "40P01"} {
		e := fmt.Errorf("append: %w", &pgconn.PgError{Code: code})
		if !TxConflict(e) || !Retryable(e) || Unavailable(e) {
			t.Errorf("%s: TxConflict %v Retryable %v Unavailable %v", code, TxConflict(e), Retryable(e), Unavailable(e))
		}
	}
	if TxConflict(&pgconn.PgError{Code: "23505"}) || TxConflict(errors.New("40001")) {
		t.Error("TxConflict: wrong class")
	}
}

// busyReply is a Redis error reply as go-redis returns one it has no type
// for.
type busyReply string

func (e busyReply) Error() string { return string(e) }
func (busyReply) RedisError()     {}

func TestRedisDown(t *testing.T) {
	t.Parallel()
	// A real dial error.
	c := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	dialErr := c.Ping(context.Background()).Err()
	if dialErr == nil {
		t.Fatal("dialing a closed port did not fail")
	}
	for _, e := range []error{
		dialErr,
		fmt.Errorf("read inbox: %w", io.EOF),
		redis.ErrPoolTimeout,
		redis.ErrClosed,
		fmt.Errorf("push: %w", busyReply("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.")),
	} {
		if !RedisDown(e) || !Unavailable(e) || !Retryable(e) {
			t.Errorf("%v: not Redis down", e)
		}
	}
	for _, e := range []error{
		nil, redis.Nil, fmt.Errorf("get: %w", redis.Nil),
		errors.New("WRONGTYPE Operation against a key holding the wrong kind of value"),
		busyReply("BUSYKEY Target key name already exists."),
		errors.New("BUSY but not a Redis reply"),
	} {
		if RedisDown(e) || Retryable(e) {
			t.Errorf("%v: Redis down", e)
		}
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	<-ctx.Done()
	for _, e := range []error{fmt.Errorf("query: %w", ctx.Err()), &net.OpError{Op: "read", Err: timeoutErr{}}} {
		if !Timeout(e) || !Unavailable(e) || !Retryable(e) {
			t.Errorf("%v: not a time-out", e)
		}
	}
	if Timeout(context.Canceled) || Timeout(nil) || Unavailable(context.Canceled) {
		t.Error("a cancellation is a time-out")
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestNotSent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A real request pgconn refuses to send: a statement on a closed
	// connection.
	conn, err := pgconn.Connect(ctx, testenv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
	_, closed := conn.Exec(ctx, "select 1").ReadAll()
	if closed == nil {
		t.Fatal("a closed connection ran a statement")
	}
	if !NotSent(closed) || !PostgresDown(closed) {
		t.Errorf("%v: NotSent %v PostgresDown %v", closed, NotSent(closed), PostgresDown(closed))
	}
	if NotSent(nil) || NotSent(io.ErrUnexpectedEOF) {
		t.Error("NotSent: wrong class")
	}
}

// A refused connection sent nothing: a write may be run again, and its
// failure is not an unknown outcome. A dead pooled connection is one the
// server terminated or that closed under a statement, never a refused
// one or a time-out.
func TestNotSentAndDeadConn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, refused := pgconn.Connect(ctx, "postgres://postgres@"+closedAddr(t)+"/feed?sslmode=disable&connect_timeout=5")
	if refused == nil {
		t.Fatal("connected to a closed port")
	}
	if !NotSent(fmt.Errorf("create post: %w", refused)) {
		t.Errorf("a refused connection is not NotSent: %v", refused)
	}
	for _, c := range []struct {
		err  error
		dead bool
	}{
		{fmt.Errorf("query: %w", &pgconn.PgError{Code: "57P01"}), true},
		{&pgconn.PgError{Code: "57P02"}, true},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{io.EOF, true},
		{refused, false},
		{&pgconn.PgError{Code: "57P03"}, false}, // starting up: no pooled connection was dead
		{&pgconn.PgError{Code: "23505"}, false},
		{context.DeadlineExceeded, false},
		{nil, false},
	} {
		if got := DeadConn(c.err); got != c.dead {
			t.Errorf("DeadConn(%v) = %v, want %v", c.err, got, c.dead)
		}
	}
}
