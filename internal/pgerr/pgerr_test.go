package pgerr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestUnreachable(t *testing.T) {
	t.Parallel()
	if !Unreachable(fmt.Errorf("begin: %w", &pgconn.ConnectError{})) {
		t.Error("a wrapped connect error is not unreachable")
	}
	if Unreachable(errors.New("boom")) || Unreachable(&pgconn.PgError{Code: "23505"}) {
		t.Error("other errors are unreachable")
	}
}
