//go:build !linux

package rawsock

import "errors"

// StampReceives is supported on Linux only.
func (c *Conn) StampReceives() error { return c.opError("setsockopt", errors.ErrUnsupported) }

// recvmsg is never called: stamp is never set here.
func (c *Conn) recvmsg(fd uintptr) bool {
	c.rd.err = errors.ErrUnsupported
	return true
}
