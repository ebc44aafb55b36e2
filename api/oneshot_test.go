package api

import (
	"errors"
	"net"
	"testing"
)

// failConn fails every write and records its close.
type failConn struct {
	net.Conn
	writes int
	closed bool
}

func (c *failConn) Write(p []byte) (int, error) { c.writes++; return 0, errors.New("broken pipe") }
func (c *failConn) Close() error                { c.closed = true; return nil }

// Held writes succeed, are sent as one, and a failed send closes the
// connection instead of leaving a truncated response on it.
func TestOneShotReleaseFails(t *testing.T) {
	fc := &failConn{}
	c := &oneShotConn{Conn: fc}
	c.hold()
	for _, p := range []string{"HTTP/1.1 200 OK\r\n", "\r\n", "body"} {
		if n, err := c.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("held write: %d, %v", n, err)
		}
	}
	if fc.writes != 0 {
		t.Fatalf("%d writes reached the socket while held", fc.writes)
	}
	c.release()
	if fc.writes != 1 || !fc.closed {
		t.Fatalf("release: %d writes, closed %v; want one write, then closed", fc.writes, fc.closed)
	}
	if _, err := c.Write([]byte("x")); err == nil {
		t.Fatal("a write after release is not passed through")
	}
	if len(c.held) != 0 || c.holding {
		t.Fatalf("release left %d bytes held, holding %v", len(c.held), c.holding)
	}
}
