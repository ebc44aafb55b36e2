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
	"time"

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
// closes w (flushes it; finishes a Parquet file). It returns the number of
// events written. A cancelled ctx ends a following replay: Copy then
// closes w and returns ctx.Err().
func Copy(ctx context.Context, src Source, w *Writer, limit int64) (int64, error) {
	return copyEach(ctx, src, w, limit, nil)
}

// copyEach is Copy, calling after (when set) after each event written and
// each time the source has caught up.
func copyEach(ctx context.Context, src Source, w *Writer, limit int64, after func() error) (int64, error) {
	var n int64
	err := src.Stream(ctx, func(e *events.Envelope) error {
		if e == nil {
			if err := w.Flush(); err != nil {
				return err
			}
		} else {
			if err := w.Write(e); err != nil {
				return err
			}
			n++
			if limit > 0 && n >= limit {
				return errStop
			}
		}
		if after != nil {
			return after()
		}
		return nil
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	if ferr := w.Close(); err == nil && ferr != nil {
		err = ferr
	}
	return n, err
}

// Checkpoint is where CopyCheckpointed saves resume tokens.
type Checkpoint struct {
	// Every is the interval between saves while the replay runs (0: only
	// at the end). Ignored for Parquet, whose file is complete only at the
	// end.
	Every time.Duration
	// Save stores a token; it is called only after everything the token
	// covers was flushed to the output.
	Save func(Token) error
}

// CopyCheckpointed is Copy of a PostgreSQL replay that saves its resume
// token (PG.Token) every cp.Every, and at the end when the replay finished,
// reached its limit or was cancelled, each time right after flushing the
// output: a replay resumed from the last token saved prints exactly what
// the output lacks after what was flushed. On an output error no final
// token is saved (what reached the reader is unknown; the previous one
// stays, behind the output by at most what was written since).
func CopyCheckpointed(ctx context.Context, src *PG, w *Writer, limit int64, cp Checkpoint) (int64, error) {
	last := time.Now()
	var after func() error
	if cp.Every > 0 && !w.wholeFiles() {
		after = func() error {
			if time.Since(last) < cp.Every {
				return nil
			}
			if err := w.Flush(); err != nil {
				return err
			}
			last = time.Now()
			return cp.Save(src.Token())
		}
	}
	n, err := copyEach(ctx, src, w, limit, after)
	if err == nil || errors.Is(err, context.Canceled) {
		if serr := cp.Save(src.Token()); serr != nil {
			return n, errors.Join(err, serr)
		}
	}
	return n, err
}
