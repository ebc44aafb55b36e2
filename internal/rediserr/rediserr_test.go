package rediserr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestUnavailable(t *testing.T) {
	t.Parallel()
	// A real dial error: a port nobody listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	dialErr := c.Ping(context.Background()).Err()
	for _, e := range []error{
		dialErr,
		fmt.Errorf("read inbox: %w", io.EOF),
		redis.ErrPoolTimeout,
		redis.ErrClosed,
	} {
		if e == nil {
			t.Fatal("dialing a closed port did not fail")
		}
		if !Unavailable(e) {
			t.Errorf("%v: not unavailable", e)
		}
	}
	for _, e := range []error{nil, redis.Nil, fmt.Errorf("get: %w", redis.Nil), errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")} {
		if Unavailable(e) {
			t.Errorf("%v: unavailable", e)
		}
	}
}
