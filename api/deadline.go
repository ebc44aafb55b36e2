package api

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// deadlineCtx is context.WithDeadline made lazily: the deadline is known
// at once (Deadline, Err), but the timer and the channel behind Done are
// made only when something first asks for Done. A read answered from
// memory never waits on its context, and the timer (made, added to the
// runtime's heap, stopped) is most of what a deadline context costs; a
// request that waits (PostgreSQL, a Redis round trip) gets a real one.
//
// Once made, the inner context.WithDeadline answers everything, Value
// included: a child context (context.WithCancel of this one) then finds the
// inner's cancelCtx and is cancelled with it like any child, with no
// goroutine. Before that, Value answers from the parent, so
// context.Cause of a deadlineCtx whose Done was never asked for reports
// the parent's cause (nil while the parent lives) where Err already says
// DeadlineExceeded: nothing in feed asks Cause without waiting first.
type deadlineCtx struct {
	parent   context.Context
	deadline time.Time

	inner    atomic.Pointer[context.Context] // made by the first Done
	final    atomic.Pointer[error]           // the error once stopped
	mu       sync.Mutex                      // serialises making inner and stopping
	stopFunc context.CancelFunc              // inner's cancel
}

// newDeadlineCtx returns parent bounded to d from now, and its stop (the
// CancelFunc), which the caller must call when done.
func newDeadlineCtx(parent context.Context, d time.Duration) *deadlineCtx {
	return &deadlineCtx{parent: parent, deadline: time.Now().Add(d)}
}

// withTimeout is context.WithTimeout(parent, d) through a deadlineCtx when
// parent has no deadline of its own (one sooner would bound it instead: a
// plain context.WithTimeout then).
func withTimeout(parent context.Context, d time.Duration) (context.Context, func()) {
	if _, ok := parent.Deadline(); ok {
		return context.WithTimeout(parent, d)
	}
	c := newDeadlineCtx(parent, d)
	return c, c.stop
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *deadlineCtx) Done() <-chan struct{} { return c.made().Done() }

func (c *deadlineCtx) Err() error {
	if err := c.final.Load(); err != nil {
		return *err
	}
	if in := c.inner.Load(); in != nil {
		return (*in).Err()
	}
	return c.errNow()
}

// errNow is what the inner context would answer, were it made now.
func (c *deadlineCtx) errNow() error {
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *deadlineCtx) Value(key any) any {
	if in := c.inner.Load(); in != nil {
		return (*in).Value(key)
	}
	return c.parent.Value(key)
}

// made returns the inner context, making it on first use.
func (c *deadlineCtx) made() context.Context {
	if in := c.inner.Load(); in != nil {
		return *in
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if in := c.inner.Load(); in != nil {
		return *in
	}
	in, cancel := context.WithDeadline(c.parent, c.deadline)
	if c.final.Load() != nil {
		cancel() // stopped already: Done is closed (Err keeps the final error)
	}
	c.stopFunc = cancel
	c.inner.Store(&in)
	return in
}

// stop cancels the context (its error stays the one it had if it had
// ended: the deadline, or the parent's) and releases the inner context's
// timer if it was made.
func (c *deadlineCtx) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.final.Load() != nil {
		return
	}
	var err error
	if in := c.inner.Load(); in != nil {
		c.stopFunc()
		err = (*in).Err()
	} else if err = c.errNow(); err == nil {
		err = context.Canceled
	}
	switch err {
	case context.Canceled:
		c.final.Store(&errCanceled)
	case context.DeadlineExceeded:
		c.final.Store(&errDeadline)
	default:
		e := err
		c.final.Store(&e)
	}
}

// The final errors of most stops, shared.
var errCanceled, errDeadline = context.Canceled, context.DeadlineExceeded

func (c *deadlineCtx) String() string { return "api.deadlineCtx" }
