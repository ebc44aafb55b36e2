package pgerr

import (
	"errors"
	"fmt"
	"io"
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

func TestConnectionLost(t *testing.T) {
	t.Parallel()
	for _, e := range []error{
		&pgconn.ConnectError{},
		fmt.Errorf("insert: %w", &pgconn.PgError{Code: "57P01"}),
		&pgconn.PgError{Code: "57P02"},
		&pgconn.PgError{Code: "57P03"},
		&pgconn.PgError{Code: "08006"},
		fmt.Errorf("commit: %w", io.ErrUnexpectedEOF),
	} {
		if !ConnectionLost(e) || !Unavailable(e) {
			t.Errorf("%v: not a lost connection", e)
		}
	}
	for _, e := range []error{nil, errors.New("boom"), &pgconn.PgError{Code: "23505"}, &pgconn.PgError{Code: "40001"}} {
		if ConnectionLost(e) {
			t.Errorf("%v: a lost connection", e)
		}
	}
	if !Terminated(&pgconn.PgError{Code: "57P01"}) || Terminated(&pgconn.ConnectError{}) {
		t.Error("Terminated: wrong class")
	}
}
