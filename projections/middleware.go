package projections

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// The watermill middleware package pulls modules this repository does not
// carry (a circuit breaker, a backoff library), so the two middlewares used
// here are written out: they are short.

// retryMiddleware retries a failing handler in place up to maxRetries times
// with exponential backoff (initial, doubling, capped at max, ±20% jitter).
// shouldRetry may veto a retry (permanent errors, shutdown).
func retryMiddleware(maxRetries int, initial, max time.Duration, shouldRetry func(error) bool) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			delay := initial
			for attempt := 0; ; attempt++ {
				out, err := h(msg)
				if err == nil || attempt >= maxRetries || !shouldRetry(err) {
					return out, err
				}
				jitter := time.Duration((rand.Float64()*0.4 - 0.2) * float64(delay))
				select {
				case <-time.After(delay + jitter):
				case <-msg.Context().Done():
					return out, err
				}
				delay = min(delay*2, max)
			}
		}
	}
}

// errPanic wraps a recovered panic.
var errPanic = errors.New("handler panicked")

// recoverMiddleware turns a panic into an error (with the stack), so it is
// retried and, if it keeps panicking, poisoned instead of killing the
// process.
func recoverMiddleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) (out []*message.Message, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%w: %v\n%s", errPanic, r, debug.Stack())
			}
		}()
		return h(msg)
	}
}
