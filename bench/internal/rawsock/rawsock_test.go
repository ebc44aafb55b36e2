package rawsock

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// pair returns a wrapped client connection and the server's end of it.
func pair(t *testing.T, network, addr string) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	w, ok := Wrap(c).(*Conn)
	if !ok {
		t.Fatalf("Wrap(%T) did not wrap", c)
	}
	t.Cleanup(func() { w.Close(); srv.Close() })
	return w, srv
}

// TestLargeTransfersBothWays sends more than the sockets' buffers hold in
// each direction at once, so that writes meet EAGAIN and park, and reads
// find the socket empty and park, and checks every byte.
func TestLargeTransfersBothWays(t *testing.T) {
	for _, nw := range []struct{ network, addr string }{
		{"tcp", "127.0.0.1:0"},
		{"unix", filepath.Join(t.TempDir(), "s")},
	} {
		t.Run(nw.network, func(t *testing.T) {
			c, srv := pair(t, nw.network, nw.addr)
			up := make([]byte, 8<<20)
			down := make([]byte, 8<<20)
			rand.Read(up)
			rand.Read(down)
			var wg sync.WaitGroup
			var gotUp, gotDown []byte
			var errs [4]error
			wg.Add(4)
			go func() { defer wg.Done(); _, errs[0] = c.Write(up) }()
			go func() { defer wg.Done(); gotUp, errs[1] = readN(srv, len(up)) }()
			go func() { defer wg.Done(); _, errs[2] = srv.Write(down) }()
			go func() { defer wg.Done(); gotDown, errs[3] = readN(c, len(down)) }()
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
			}
			if !bytes.Equal(gotUp, up) || !bytes.Equal(gotDown, down) {
				t.Fatal("bytes differ")
			}
		})
	}
}

// readN reads n bytes in reads of at most 3000 (so that a read often finds
// only part of what it asks for, or nothing).
func readN(c net.Conn, n int) ([]byte, error) {
	out := make([]byte, 0, n)
	buf := make([]byte, 3000)
	for len(out) < n {
		k, err := c.Read(buf)
		out = append(out, buf[:k]...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func TestReadDeadlineAndEOF(t *testing.T) {
	c, srv := pair(t, "tcp", "127.0.0.1:0")
	if err := c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %d, %v; want a timeout", n, err)
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "read" {
		t.Fatalf("error %v is not a read *net.OpError", err)
	}
	c.SetReadDeadline(time.Time{})
	if _, err := srv.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "hi" {
		t.Fatalf("ReadAll after the peer's close: %q, %v", got, err)
	}
	if n, err := c.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("read after EOF: %d, %v", n, err)
	}
}

func TestWriteDeadlineWhenThePeerDoesNotRead(t *testing.T) {
	c, _ := pair(t, "tcp", "127.0.0.1:0")
	big := make([]byte, 64<<20) // more than the two sockets' buffers
	if err := c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	n, err := c.Write(big)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a peer that never reads: %d, %v; want the deadline", n, err)
	}
	if n <= 0 || n >= len(big) {
		t.Fatalf("wrote %d of %d: want the part the buffers took", n, len(big))
	}
}

func TestWriteToAClosedPeerFails(t *testing.T) {
	c, srv := pair(t, "tcp", "127.0.0.1:0")
	srv.(*net.TCPConn).SetLinger(0) // reset, not FIN
	srv.Close()
	time.Sleep(20 * time.Millisecond)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = c.Write([]byte("x"))
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "write" {
		t.Fatalf("writes to a reset connection: %v; want a write *net.OpError", err)
	}
}

func TestCloseWriteSendsFIN(t *testing.T) {
	c, srv := pair(t, "tcp", "127.0.0.1:0")
	if _, err := c.Write([]byte("last")); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(srv)
	if err != nil || string(got) != "last" {
		t.Fatalf("peer read %q, %v; want \"last\" then EOF", got, err)
	}
}

func TestWrapLeavesOtherConnsAlone(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Wrap(a) != a {
		t.Fatal("a net.Pipe conn was wrapped")
	}
}

func TestWrappedReadsAndWritesDoNotAllocate(t *testing.T) {
	c, srv := pair(t, "tcp", "127.0.0.1:0")
	msg := []byte("ping")
	buf := make([]byte, 16)
	sbuf := make([]byte, 16)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(srv, sbuf[:len(msg)]); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:len(msg)]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Fatalf("%.1f allocations a round trip; want 0", allocs)
	}
}

// TestStampReceives checks that with receive timestamps on, Arrived is
// when the data reached the socket, not when it was read: the read
// comes 30 ms after the write, the stamp lies within the write's call
// (on loopback the kernel delivers inside the sender's write), on every
// read of a stream of messages; and that a socket without them reports
// no time.
func TestStampReceives(t *testing.T) {
	c, srv := pair(t, "tcp", "127.0.0.1:0")
	if !c.Arrived().IsZero() {
		t.Fatal("a time before any read")
	}
	if err := c.StampReceives(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	// The kernel turns its timestamping on in the background when the
	// first socket asks for it (net_enable_timestamp): until then reads
	// carry no stamp.
	for tries := 0; c.Arrived().IsZero(); tries++ {
		if tries == 200 {
			t.Fatal("no receive timestamp in 2 s")
		}
		if _, err := srv.Write([]byte("warm")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 5 {
		before := time.Now()
		if _, err := srv.Write([]byte("message")); err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		time.Sleep(30 * time.Millisecond)
		n, err := c.Read(buf)
		if err != nil || string(buf[:n]) != "message" {
			t.Fatalf("read %q, %v", buf[:n], err)
		}
		got := c.Arrived()
		const slack = time.Millisecond // the wall clock's reading around the stamp
		if got.Before(before.Add(-slack)) || got.After(after.Add(slack)) {
			t.Fatalf("message %d: arrived at %v, want within the write's call [%v, %v]", i, got.Format(time.StampMicro), before.Format(time.StampMicro), after.Format(time.StampMicro))
		}
	}

	plain, srv2 := pair(t, "tcp", "127.0.0.1:0")
	if _, err := srv2.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Read(buf); err != nil {
		t.Fatal(err)
	}
	if !plain.Arrived().IsZero() {
		t.Fatal("a time without StampReceives")
	}
}
