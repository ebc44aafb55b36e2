package replay

import (
	"bufio"
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/feedco/feed/events"
)

// Format is an output format of `feed events`.
type Format string

// The output formats.
const (
	// JSONL is one events.Envelope per line, with its stable field names
	// (64-bit ids as strings).
	JSONL Format = "jsonl"
	// CSV is a header line and then one row per event in the fixed columns
	// of CSVHeader; the payload is a JSON string column.
	CSV Format = "csv"
)

// ParseFormat reads a --format value.
func ParseFormat(s string) (Format, error) {
	switch Format(s) {
	case JSONL, CSV:
		return Format(s), nil
	}
	return "", invalidf("--format %q: want jsonl or csv", s)
}

// CSVHeader returns the fixed CSV columns; commit_lsn is there only when
// asked for, as in JSON lines.
func CSVHeader(withLSN bool) []string {
	h := []string{"position", "event_id", "stream_id", "stream_version", "type", "recorded_at",
		"audience_key", "correlation_id", "causation_id", "actor"}
	if withLSN {
		h = append(h, "commit_lsn")
	}
	return append(h, "payload")
}

// Writer encodes envelopes into a buffered output. It is not safe for
// concurrent Writes; Count may be read from any goroutine (progress).
type Writer struct {
	bw      *bufio.Writer
	format  Format
	withLSN bool
	line    []byte
	cw      *csv.Writer
	row     []string
	header  bool
	count   atomic.Int64
}

// NewWriter returns a writer of format f on w. Unless withLSN, the commit
// LSN is left out, so the PostgreSQL source (which has none) and the Kafka
// source print the same bytes for the same events.
func NewWriter(w io.Writer, f Format, withLSN bool) *Writer {
	bw := bufio.NewWriterSize(w, 256<<10)
	wr := &Writer{bw: bw, format: f, withLSN: withLSN}
	switch f {
	case CSV:
		wr.cw = csv.NewWriter(bw)
	default:
		wr.format = JSONL
		// JSON lines are what json.Marshal prints (HTML escaping on
		// purpose: it is what CDC's json.Marshal put into Kafka, so both
		// sources print identical payload bytes), by a faster encoder.
	}
	return wr
}

// Write encodes one envelope.
func (w *Writer) Write(e *events.Envelope) error {
	c := *e
	if !w.withLSN {
		c.CommitLSN = ""
	}
	if w.format == JSONL {
		var err error
		if w.line, err = c.AppendJSON(w.line[:0], false); err != nil {
			return fmt.Errorf("write event %s: %w", e.EventID, err)
		}
		w.line = append(w.line, '\n')
		if _, err := w.bw.Write(w.line); err != nil {
			return fmt.Errorf("write event %s: %w", e.EventID, err)
		}
		w.count.Add(1)
		return nil
	}
	if !w.header {
		w.header = true
		if err := w.cw.Write(CSVHeader(w.withLSN)); err != nil {
			return fmt.Errorf("write csv header: %w", err)
		}
	}
	w.line = events.AppendCompactJSON(w.line[:0], c.Payload) // as in JSON lines
	w.row = append(w.row[:0],
		strconv.FormatInt(c.Position, 10), c.EventID, c.StreamID,
		strconv.FormatInt(c.StreamVersion, 10), c.Type,
		c.RecordedAt.UTC().Format(time.RFC3339Nano),
		strconv.FormatInt(c.AudienceKey, 10),
		c.Metadata.CorrelationID, c.Metadata.CausationID, c.Metadata.Actor)
	if w.withLSN {
		w.row = append(w.row, c.CommitLSN)
	}
	w.row = append(w.row, string(w.line))
	if err := w.cw.Write(w.row); err != nil {
		return fmt.Errorf("write event %s: %w", e.EventID, err)
	}
	w.count.Add(1)
	return nil
}

// Flush writes out what is buffered. An output with no event stays empty,
// in CSV too (no header): a filter that matches nothing prints nothing.
func (w *Writer) Flush() error {
	if w.cw != nil {
		w.cw.Flush()
		if err := w.cw.Error(); err != nil {
			return fmt.Errorf("flush output: %w", err)
		}
	}
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("flush output: %w", err)
	}
	return nil
}

// Count is the number of events written so far.
func (w *Writer) Count() int64 { return w.count.Load() }
