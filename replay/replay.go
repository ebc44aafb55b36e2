// Package replay streams the event log to analysts: from PostgreSQL (the
// source of truth) or from the Kafka topic CDC feeds, filtered, as JSON lines
// or CSV, with bounded memory. `feed events` is its command line.
//
// Both sources produce events.Envelope values with the same field values, so
// their outputs can be compared byte for byte; only the commit LSN differs
// (the PostgreSQL source cannot know it), and the writers leave it out unless
// asked to (see NewWriter).
package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/feedco/feed/events"
)

// ErrInvalid marks a bad filter or option: the caller's mistake, reported
// with exit code 2 by `feed events`. Match it with errors.Is.
var ErrInvalid = errors.New("invalid replay option")

// errStop ends a stream early without an error (the limit was reached).
var errStop = errors.New("replay: stop")

// invalidf returns an error wrapping ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Source yields the events of one replay, in its order, to emit. A
// following source calls emit(nil) whenever it has caught up, so the
// consumer can flush what it buffered (tail -f). It returns
// when the replay is complete (not following), when emit returns an error
// (that error), or when ctx ends (ctx.Err()).
type Source interface {
	Stream(ctx context.Context, emit func(*events.Envelope) error) error
}

// Copy streams src into w, stopping after limit events when limit > 0, and
// flushes w. It returns the number of events written. A cancelled ctx ends
// a following replay: Copy then flushes and returns ctx.Err().
func Copy(ctx context.Context, src Source, w *Writer, limit int64) (int64, error) {
	var n int64
	err := src.Stream(ctx, func(e *events.Envelope) error {
		if e == nil {
			return w.Flush()
		}
		if err := w.Write(e); err != nil {
			return err
		}
		n++
		if limit > 0 && n >= limit {
			return errStop
		}
		return nil
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	if ferr := w.Flush(); err == nil && ferr != nil {
		err = ferr
	}
	return n, err
}
