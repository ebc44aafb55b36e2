// Package rawsock reads and writes TCP and Unix sockets with raw system
// calls instead of the runtime's syscall wrappers.
//
// Go's sockets are non-blocking: a read or a write returns at once, with
// data or EAGAIN (the goroutine then parks on the poller). Still, the
// runtime wraps each call in entersyscall/exitsyscall, and its sysmon
// thread takes the P from a thread whose call spans two of its ticks
// (20 µs or more) when no other P is idle: a hand-off that wakes another
// thread, and on return a wait for a P again; while it finds such work,
// sysmon keeps polling every 20 µs instead of backing off. A process at
// one P whose loopback writes outlast a tick (a send delivers to the
// receiver and wakes it, which in a VM takes tens of microseconds) pays
// that on nearly every write.
//
// Conn makes the same calls with syscall.RawSyscall through the socket's
// syscall.RawConn: the P stays with the goroutine for the call, and
// EAGAIN still parks it on the poller (RawConn's Read and Write wait for
// readiness, honouring deadlines). A call on a non-blocking socket never
// waits in the kernel for the peer, so a raw call holds the P only for
// its own length.
//
// The load generator (bench's leanClient, at one P) uses it: its CPU at
// 5,000 reads/s fell to 0.59-0.66x. The API's connections, at two Ps,
// were measured with it and gained nothing (docs/benchmarks.md, "Raw
// socket calls"), so they keep Go's own calls.
//
// With StampReceives (Linux), reads are recvmsg(2) calls that also take
// the kernel's receive timestamp of the data (Arrived): the load
// generator times its reads to their responses' arrival at the socket
// too, without its own wait to run.
package rawsock

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// Conn is a net.Conn whose Read and Write are raw system calls on its
// socket. Everything else is the wrapped connection's.
type Conn struct {
	net.Conn
	rc syscall.RawConn

	rmu sync.Mutex // held by a Read: rd is its call's
	rd  rawCall
	wmu sync.Mutex // held by a Write: wr is its call's
	wr  rawCall

	readFn, writeFn func(fd uintptr) bool // c.read and c.write, bound once

	// With receive timestamps on (StampReceives), reads are recvmsg(2)
	// calls that also take the kernel's arrival time of the data read.
	stamp   bool
	oob     [64]byte // the control message of one recvmsg
	arrived int64    // CLOCK_REALTIME ns of the last read's data; 0 if none
}

// rawCall is one call's arguments and results, kept in the Conn so that
// the RawConn callbacks (bound once, in Wrap) allocate nothing.
type rawCall struct {
	p   []byte
	n   int
	err error
}

// Wrap returns c reading and writing through raw calls when it is a
// *net.TCPConn or a *net.UnixConn, else c itself.
func Wrap(c net.Conn) net.Conn {
	var sc syscall.Conn
	switch t := c.(type) {
	case *net.TCPConn:
		sc = t
	case *net.UnixConn:
		sc = t
	default:
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	rw := &Conn{Conn: c, rc: rc}
	rw.readFn, rw.writeFn = rw.read, rw.write
	return rw
}

// Read reads into p with one raw read(2), parking on the poller while the
// socket has nothing.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	c.rd = rawCall{p: p}
	err := c.rc.Read(c.readFn)
	n := c.rd.n
	if err == nil {
		err = c.rd.err
	}
	c.rd = rawCall{}
	c.rmu.Unlock()
	if err != nil {
		return n, c.opError("read", err)
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (c *Conn) read(fd uintptr) bool {
	if c.stamp {
		return c.recvmsg(fd)
	}
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rd.p[0])), uintptr(len(c.rd.p)))
		switch e {
		case 0:
			c.rd.n = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait until readable
		default:
			c.rd.err = os.NewSyscallError("read", e)
			return true
		}
	}
}

// Arrived returns when the kernel received the data of the last Read that
// returned any, with StampReceives on; the zero Time otherwise, and also
// for data received before the kernel's timestamping was on (Linux turns
// it on in the background once a first socket asks). Call it from the
// goroutine that reads.
func (c *Conn) Arrived() time.Time {
	c.rmu.Lock()
	ns := c.arrived
	c.rmu.Unlock()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Write writes all of p with raw write(2)s, parking on the poller while
// the socket's send buffer is full.
func (c *Conn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.wmu.Lock()
	c.wr = rawCall{p: p}
	err := c.rc.Write(c.writeFn)
	n := c.wr.n
	if err == nil {
		err = c.wr.err
	}
	c.wr = rawCall{}
	c.wmu.Unlock()
	if err != nil {
		return n, c.opError("write", err)
	}
	return n, nil
}

func (c *Conn) write(fd uintptr) bool {
	for c.wr.n < len(c.wr.p) {
		rest := c.wr.p[c.wr.n:]
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&rest[0])), uintptr(len(rest)))
		switch e {
		case 0:
			c.wr.n += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // wait until writable, then go on from c.wr.n
		default:
			c.wr.err = os.NewSyscallError("write", e)
			return true
		}
	}
	return true
}

// opError wraps err as net.Conn's methods do, so callers that look for a
// *net.OpError (or a timeout through net.Error) see one.
func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// CloseWrite shuts the sending side, as net.TCPConn's does (net/http's
// graceful close uses it).
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
