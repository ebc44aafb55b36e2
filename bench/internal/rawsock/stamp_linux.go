package rawsock

import (
	"os"
	"syscall"
	"unsafe"
)

// StampReceives turns on the kernel's receive timestamps of the socket
// (SO_TIMESTAMPNS; TCP on Linux): each Read then takes, beside the data,
// the time the kernel received the newest of it, which Arrived returns. A
// reader that is late to run (waiting for a P or a core) still learns
// when its data came in.
func (c *Conn) StampReceives() error {
	var serr error
	err := c.rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return c.opError("setsockopt", err)
	}
	c.rmu.Lock()
	c.stamp = true
	c.rmu.Unlock()
	return nil
}

// recvmsg is read with recvmsg(2) and the receive timestamp's control
// message, parsed in place (no allocation).
func (c *Conn) recvmsg(fd uintptr) bool {
	iov := syscall.Iovec{Base: &c.rd.p[0]}
	iov.SetLen(len(c.rd.p))
	for {
		msg := syscall.Msghdr{Iov: &iov, Iovlen: 1, Control: &c.oob[0]}
		msg.SetControllen(len(c.oob))
		n, _, e := syscall.RawSyscall(syscall.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&msg)), 0)
		switch e {
		case 0:
			c.rd.n = int(n)
			if n > 0 {
				c.arrived = stampOf(c.oob[:msg.Controllen])
			}
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		default:
			c.rd.err = os.NewSyscallError("recvmsg", e)
			return true
		}
	}
}

// stampOf returns the SCM_TIMESTAMPNS time in the control messages oob,
// in ns, or 0 when there is none.
func stampOf(oob []byte) int64 {
	for len(oob) >= syscall.SizeofCmsghdr {
		h := (*syscall.Cmsghdr)(unsafe.Pointer(&oob[0]))
		if h.Len < syscall.SizeofCmsghdr || int(h.Len) > len(oob) {
			return 0
		}
		if h.Level == syscall.SOL_SOCKET && h.Type == syscall.SCM_TIMESTAMPNS && int(h.Len) >= syscall.CmsgLen(int(unsafe.Sizeof(syscall.Timespec{}))) {
			ts := (*syscall.Timespec)(unsafe.Pointer(&oob[syscall.CmsgLen(0)]))
			return ts.Nano()
		}
		oob = oob[min(len(oob), syscall.CmsgSpace(int(h.Len)-syscall.CmsgLen(0))):]
	}
	return 0
}
