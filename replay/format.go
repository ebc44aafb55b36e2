package replay

import (
	"bufio"
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/parquet-go/parquet-go"

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
	// Parquet is one Apache Parquet file of ParquetRow rows (for DuckDB,
	// pandas): a file is complete only when closed, so it is written for a
	// replay that ends (not with --follow), and a replay that matches
	// nothing still writes a valid file with no rows.
	Parquet Format = "parquet"
)

// ParseFormat reads a --format value.
func ParseFormat(s string) (Format, error) {
	switch Format(s) {
	case JSONL, CSV, Parquet:
		return Format(s), nil
	}
	return "", invalidf("--format %q: want jsonl, csv or parquet", s)
}

// ParquetRow is one event in the Parquet format: CSV's columns, typed
// (64-bit ids as INT64, recorded_at a microsecond timestamp adjusted to
// UTC, which readers load as a timestamp with time zone, the payload the
// JSON text JSON lines print, of the JSON logical type, commit_lsn null
// unless asked for).
type ParquetRow struct {
	Position      int64   `parquet:"position"`
	EventID       string  `parquet:"event_id"`
	StreamID      string  `parquet:"stream_id"`
	StreamVersion int64   `parquet:"stream_version"`
	Type          string  `parquet:"type,dict"`
	RecordedAt    int64   `parquet:"recorded_at,timestamp(microsecond)"`
	AudienceKey   int64   `parquet:"audience_key"`
	CorrelationID string  `parquet:"correlation_id"`
	CausationID   string  `parquet:"causation_id"`
	Actor         string  `parquet:"actor"`
	CommitLSN     *string `parquet:"commit_lsn,optional"`
	Payload       string  `parquet:"payload,json"`
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
	pq      *parquet.GenericWriter[ParquetRow]
	pqRow   []ParquetRow
	closed  bool
	count   atomic.Int64
	parts   *partitions // set: the output is a partitioned directory
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
	case Parquet:
		wr.pq = parquet.NewGenericWriter[ParquetRow](bw, parquet.Compression(&parquet.Zstd))
		wr.pqRow = make([]ParquetRow, 1)
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
	if w.parts != nil {
		return w.parts.write(e)
	}
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
	if w.pq != nil {
		w.line = events.AppendCompactJSON(w.line[:0], c.Payload) // as in JSON lines
		r := ParquetRow{Position: c.Position, EventID: c.EventID, StreamID: c.StreamID, StreamVersion: c.StreamVersion,
			Type: c.Type, RecordedAt: c.RecordedAt.UnixMicro(), AudienceKey: c.AudienceKey,
			CorrelationID: c.Metadata.CorrelationID, CausationID: c.Metadata.CausationID, Actor: c.Metadata.Actor,
			Payload: string(w.line)}
		if w.withLSN {
			lsn := c.CommitLSN
			r.CommitLSN = &lsn
		}
		w.pqRow[0] = r
		if _, err := w.pq.Write(w.pqRow); err != nil {
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

// Close finishes the output: Flush, and for Parquet the file's footer
// (after it nothing more can be written).
func (w *Writer) Close() error {
	if w.parts != nil {
		return w.parts.close()
	}
	if w.pq != nil && !w.closed {
		w.closed = true
		if err := w.pq.Close(); err != nil {
			return fmt.Errorf("close parquet output: %w", err)
		}
	}
	return w.Flush()
}

// Flush writes out what is buffered. An output with no event stays empty,
// in CSV too (no header): a filter that matches nothing prints nothing.
// Parquet rows are held until Close (a file is readable only whole).
func (w *Writer) Flush() error {
	if w.parts != nil {
		return w.parts.flush()
	}
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
func (w *Writer) Count() int64 {
	if w.parts != nil {
		return w.parts.count.Load()
	}
	return w.count.Load()
}

// wholeFiles reports whether the output is readable only once closed
// (Parquet), so that saving a checkpoint before the end is pointless.
func (w *Writer) wholeFiles() bool { return w.format == Parquet }
