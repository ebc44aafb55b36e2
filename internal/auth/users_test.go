package auth

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/testkit/testenv"
)

// countingDB counts the queries that reach PostgreSQL.
type countingDB struct {
	RowQuerier
	n atomic.Int64
}

func (c *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.n.Add(1)
	return c.RowQuerier.QueryRow(ctx, sql, args...)
}

// Users finds registered users, remembers them (no query for the next
// lookups) and never remembers an unknown id.
func TestUsers(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDB(t)
	cdb := &countingDB{RowQuerier: db.Pool}
	u, err := NewUsers(cdb, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO users (id, name) VALUES (5, 'ana')`); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if ok, err := u.UserExists(ctx, 5); err != nil || !ok {
			t.Fatalf("user 5: %v %v", ok, err)
		}
	}
	if n := cdb.n.Load(); n != 1 {
		t.Fatalf("%d queries for three lookups of a known user; want 1", n)
	}
	if ok, err := u.UserExists(ctx, 6); err != nil || ok {
		t.Fatalf("unknown user 6: %v %v", ok, err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO users (id, name) VALUES (6, 'bo')`); err != nil {
		t.Fatal(err)
	}
	if ok, err := u.UserExists(ctx, 6); err != nil || !ok {
		t.Fatalf("user 6 after registering: %v %v", ok, err)
	}
	// A known user is looked up again once the ttl has passed.
	at := time.Now().Add(DefaultKnownUserTTL + time.Second)
	u.now = func() time.Time { return at }
	before := cdb.n.Load()
	for range 2 {
		if ok, err := u.UserExists(ctx, 5); err != nil || !ok {
			t.Fatalf("user 5 after the ttl: %v %v", ok, err)
		}
	}
	if n := cdb.n.Load() - before; n != 1 {
		t.Fatalf("%d queries for two lookups after the ttl; want 1", n)
	}
	if _, err := NewUsers(nil, 0); err == nil {
		t.Fatal("nil database accepted")
	}
}
