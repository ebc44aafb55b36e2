package cdc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/feedco/feed/events"
)

// ErrMalformed is returned for a pgoutput message that cannot be parsed:
// the stream is broken, so the session is restarted from the slot.
var ErrMalformed = errors.New("malformed pgoutput message")

// pgoutput protocol 1 message kinds this package reads (PostgreSQL docs,
// "Logical Replication Message Formats"). Others are skipped.
const (
	msgBegin    = 'B'
	msgCommit   = 'C'
	msgRelation = 'R'
	msgInsert   = 'I'
)

// beginMsg starts a transaction. With protocol 1 the walsender sends a
// transaction only after it committed, so FinalLSN is its commit LSN.
type beginMsg struct {
	FinalLSN   pglogrepl.LSN
	CommitTime time.Time
	Xid        uint32
}

// commitMsg ends a transaction; EndLSN is what the slot may confirm once
// every event of the transaction is acknowledged.
type commitMsg struct {
	CommitLSN  pglogrepl.LSN
	EndLSN     pglogrepl.LSN
	CommitTime time.Time
}

// relation is one table's column layout, sent once per table per
// connection before its first row (and again after it changed).
type relation struct {
	ID        uint32
	Namespace string
	Name      string
	Columns   []string
}

// insertMsg is one inserted row, columns in the relation's order; nil is
// NULL (or an unchanged TOAST value, which an insert never has).
type insertMsg struct {
	RelationID uint32
	Values     [][]byte
}

// pgEpoch is PostgreSQL's timestamp epoch.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// parser reads big-endian fields with bounds checks: the input comes from
// the network, and a short message must be an error, never a panic.
type parser struct {
	b   []byte
	err error
}

// take returns the next n bytes, or nil (and ErrMalformed) when fewer
// are left.
func (p *parser) take(n int) []byte {
	if p.err != nil {
		return nil
	}
	if n < 0 || len(p.b) < n {
		p.err = ErrMalformed
		return nil
	}
	v := p.b[:n:n]
	p.b = p.b[n:]
	return v
}

func (p *parser) u8() byte {
	if b := p.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (p *parser) u16() uint16 {
	if b := p.take(2); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (p *parser) u32() uint32 {
	if b := p.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (p *parser) u64() uint64 {
	if b := p.take(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

func (p *parser) time() time.Time {
	return pgEpoch.Add(time.Duration(int64(p.u64())) * time.Microsecond)
}

func (p *parser) str() string {
	if p.err != nil {
		return ""
	}
	i := bytes.IndexByte(p.b, 0)
	if i < 0 {
		p.err = ErrMalformed
		return ""
	}
	s := string(p.b[:i])
	p.b = p.b[i+1:]
	return s
}

// pgoutputDecoder parses one pgoutput message into a *beginMsg,
// *commitMsg, *relation, *insertMsg, or nil for a kind CDC does not need
// (origin, type, update, delete, truncate, logical message); what cannot be
// read is ErrMalformed. CDC runs decodeMessage; parseMessage is the same
// on pglogrepl.Parse, and the decode tests and fuzz target hold the two to
// the same results.
type pgoutputDecoder func(data []byte) (any, error)

// decodeMessage is the pgoutputDecoder CDC runs. Byte slices in an
// insertMsg alias data. It replaces pglogrepl.Parse because of the insert,
// the one message per event: Parse allocates every column and copies its
// bytes one at a time, 25 allocations against 2 and several times the CPU
// per insert (BenchmarkDecode in decode_test.go); on begin and commit the
// two are even.
func decodeMessage(data []byte) (any, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("empty message: %w", ErrMalformed)
	}
	p := &parser{b: data[1:]}
	var out any
	switch data[0] {
	case msgBegin:
		m := &beginMsg{FinalLSN: pglogrepl.LSN(p.u64()), CommitTime: p.time(), Xid: p.u32()}
		out = m
	case msgCommit:
		p.u8() // flags, unused
		m := &commitMsg{CommitLSN: pglogrepl.LSN(p.u64()), EndLSN: pglogrepl.LSN(p.u64()), CommitTime: p.time()}
		out = m
	case msgRelation:
		r := &relation{ID: p.u32(), Namespace: p.str(), Name: p.str()}
		p.u8() // replica identity
		n := int(p.u16())
		if p.err == nil && n > len(p.b) { // each column takes at least 10 bytes
			return nil, fmt.Errorf("relation with %d columns in %d bytes: %w", n, len(p.b), ErrMalformed)
		}
		r.Columns = make([]string, 0, n)
		for i := 0; i < n && p.err == nil; i++ {
			p.u8() // flags (part of the key)
			r.Columns = append(r.Columns, p.str())
			p.u32() // type oid
			p.u32() // type modifier
		}
		out = r
	case msgInsert:
		m := &insertMsg{RelationID: p.u32()}
		if kind := p.u8(); p.err == nil && kind != 'N' {
			return nil, fmt.Errorf("insert tuple kind %q: %w", kind, ErrMalformed)
		}
		n := int(p.u16())
		if p.err == nil && n > len(p.b) { // each column takes at least 1 byte
			return nil, fmt.Errorf("tuple with %d columns in %d bytes: %w", n, len(p.b), ErrMalformed)
		}
		m.Values = make([][]byte, n)
		for i := 0; i < n && p.err == nil; i++ {
			switch kind := p.u8(); kind {
			case 't', 'b':
				l := p.u32()
				if l > uint32(len(p.b)) {
					p.err = ErrMalformed
					break
				}
				m.Values[i] = p.take(int(l))
			case 'n', 'u':
			default:
				if p.err == nil {
					return nil, fmt.Errorf("tuple column kind %q: %w", kind, ErrMalformed)
				}
			}
		}
		out = m
	default:
		return nil, nil
	}
	if p.err != nil {
		return nil, fmt.Errorf("decode %q message: %w", data[0], p.err)
	}
	return out, nil
}

// parseMessage is decodeMessage on github.com/jackc/pglogrepl's Parse: the
// same results and the same ErrMalformed for what cannot be read.
// pglogrepl indexes its input without bounds checks and panics on a short
// message, so a panic is turned into ErrMalformed here; and it allocates
// what a column's length says before finding the message shorter, up to
// 4 GiB for a corrupt length.
func parseMessage(data []byte) (out any, err error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("empty message: %w", ErrMalformed)
	}
	switch data[0] {
	case msgBegin, msgCommit, msgRelation, msgInsert:
	default:
		return nil, nil
	}
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("decode %q message: %v: %w", data[0], p, ErrMalformed)
		}
	}()
	msg, err := pglogrepl.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("decode %q message: %v: %w", data[0], err, ErrMalformed)
	}
	switch m := msg.(type) {
	case *pglogrepl.BeginMessage:
		return &beginMsg{FinalLSN: m.FinalLSN, CommitTime: m.CommitTime.UTC(), Xid: m.Xid}, nil
	case *pglogrepl.CommitMessage:
		return &commitMsg{CommitLSN: m.CommitLSN, EndLSN: m.TransactionEndLSN, CommitTime: m.CommitTime.UTC()}, nil
	case *pglogrepl.RelationMessage:
		r := &relation{ID: m.RelationID, Namespace: m.Namespace, Name: m.RelationName, Columns: make([]string, 0, len(m.Columns))}
		for _, c := range m.Columns {
			r.Columns = append(r.Columns, c.Name)
		}
		return r, nil
	case *pglogrepl.InsertMessage:
		ins := &insertMsg{RelationID: m.RelationID, Values: make([][]byte, len(m.Tuple.Columns))}
		for i, c := range m.Tuple.Columns {
			switch c.DataType {
			case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
				ins.Values[i] = c.Data
			case pglogrepl.TupleDataTypeNull, pglogrepl.TupleDataTypeToast:
			default:
				return nil, fmt.Errorf("tuple column kind %q: %w", c.DataType, ErrMalformed)
			}
		}
		return ins, nil
	}
	return nil, nil
}

// eventColumns maps the events table's column names to positions in a
// relation, so a column added to the table later does not break CDC.
type eventColumns struct {
	position, eventID, streamID, streamVersion, typ, payload, metadata, recordedAt int
}

var requiredColumns = []string{"position", "event_id", "stream_id", "stream_version", "type", "payload", "metadata", "recorded_at"}

func newEventColumns(r *relation) (eventColumns, error) {
	idx := map[string]int{}
	for i, c := range r.Columns {
		idx[c] = i
	}
	for _, c := range requiredColumns {
		if _, ok := idx[c]; !ok {
			return eventColumns{}, fmt.Errorf("relation %s.%s has no column %q", r.Namespace, r.Name, c)
		}
	}
	return eventColumns{
		position: idx["position"], eventID: idx["event_id"], streamID: idx["stream_id"],
		streamVersion: idx["stream_version"], typ: idx["type"], payload: idx["payload"],
		metadata: idx["metadata"], recordedAt: idx["recorded_at"],
	}, nil
}

// eventRow is one inserted events row on its way to Kafka. The reader
// fills what choosing the lane needs (the audience key); the lane finishes
// the envelope and the message (envelope), off the reader's serial path.
type eventRow struct {
	env        events.Envelope // without Metadata and RecordedAt until envelope
	metadata   []byte
	recordedAt string
	// decodeErr is set when this binary cannot decode the payload (a type
	// newer than it): the event is still published, with audience key 0,
	// because losing it would be worse.
	decodeErr error
}

// rowOf reads one inserted row (text format columns) and computes its
// audience key by decoding the payload. It copies what it keeps: vals alias
// the connection's read buffer.
func rowOf(cols eventColumns, vals [][]byte, commitLSN pglogrepl.LSN) (*eventRow, error) {
	get := func(i int, name string) ([]byte, error) {
		if i >= len(vals) || vals[i] == nil {
			return nil, fmt.Errorf("events row: %s is missing: %w", name, ErrMalformed)
		}
		return vals[i], nil
	}
	r := &eventRow{}
	env := &r.env
	b, err := get(cols.position, "position")
	if err != nil {
		return nil, err
	}
	if env.Position, err = strconv.ParseInt(string(b), 10, 64); err != nil {
		return nil, fmt.Errorf("events row: position %q: %w", b, ErrMalformed)
	}
	if b, err = get(cols.eventID, "event_id"); err != nil {
		return nil, err
	}
	env.EventID = string(b)
	if b, err = get(cols.streamID, "stream_id"); err != nil {
		return nil, err
	}
	env.StreamID = string(b)
	if b, err = get(cols.streamVersion, "stream_version"); err != nil {
		return nil, err
	}
	if env.StreamVersion, err = strconv.ParseInt(string(b), 10, 64); err != nil {
		return nil, fmt.Errorf("events row: stream_version %q: %w", b, ErrMalformed)
	}
	if b, err = get(cols.typ, "type"); err != nil {
		return nil, err
	}
	env.Type = string(b)
	if b, err = get(cols.payload, "payload"); err != nil {
		return nil, err
	}
	env.Payload = json.RawMessage(append([]byte(nil), b...))
	if b, err = get(cols.metadata, "metadata"); err != nil {
		return nil, err
	}
	r.metadata = append([]byte(nil), b...)
	if b, err = get(cols.recordedAt, "recorded_at"); err != nil {
		return nil, err
	}
	r.recordedAt = string(b)
	env.CommitLSN = commitLSN.String()
	env.AudienceKey, r.decodeErr = events.DefaultCodec.AudienceKeyOf(env.Type, env.Payload)
	return r, nil
}

// envelope finishes the envelope: metadata and recorded_at (the session
// runs with DateStyle ISO and TimeZone UTC).
func (r *eventRow) envelope() (events.Envelope, error) {
	env := r.env
	var err error
	if env.Metadata, err = events.ParseMetadata(r.metadata); err != nil {
		return env, fmt.Errorf("events row %s: metadata: %w", env.EventID, ErrMalformed)
	}
	t, err := parseTimestamptz(r.recordedAt)
	if err != nil {
		return env, fmt.Errorf("events row %s: recorded_at: %w", env.EventID, err)
	}
	env.RecordedAt = t
	return env, nil
}

// timestamptz text layouts: the session sets TimeZone UTC, so the offset is
// "+00", but other offsets parse too.
var tsLayouts = []string{
	"2006-01-02 15:04:05.999999999-07",
	"2006-01-02 15:04:05.999999999-07:00",
	"2006-01-02 15:04:05.999999999-07:00:00",
}

// parseTimestamptz parses recorded_at: parseUTCTimestamptz for the form
// the session prints, parseTimestamptzLayouts for anything else.
func parseTimestamptz(s string) (time.Time, error) {
	if t, ok := parseUTCTimestamptz(s); ok {
		return t, nil
	}
	return parseTimestamptzLayouts(s)
}

// parseTimestamptzLayouts is the plain way: time.Parse of each layout.
func parseTimestamptzLayouts(s string) (time.Time, error) {
	for _, l := range tsLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("timestamp %q: %w", s, ErrMalformed)
}

// parseUTCTimestamptz is the fast path of parseTimestamptz for what the
// session prints: "2006-01-02 15:04:05[.f{1,6}]+00". ok is false for
// anything else (the layouts then decide). It takes several times less
// CPU than parseTimestamptzLayouts (BenchmarkEventToMessage in
// decode_test.go, recorded_at/fast against recorded_at/layouts);
// TestTimestamptzFastPath and FuzzTimestamptz hold the two equal.
func parseUTCTimestamptz(s string) (time.Time, bool) {
	n := len(s)
	if n < 22 || s[n-3:] != "+00" || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':' || s[16] != ':' {
		return time.Time{}, false
	}
	num := func(from, to int) (int, bool) {
		v := 0
		for i := from; i < to; i++ {
			c := s[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		return v, true
	}
	year, ok1 := num(0, 4)
	month, ok2 := num(5, 7)
	day, ok3 := num(8, 10)
	hour, ok4 := num(11, 13)
	minute, ok5 := num(14, 16)
	sec, ok6 := num(17, 19)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	nsec := 0
	switch rest := s[19 : n-3]; {
	case rest == "":
	case rest[0] == '.' && len(rest) >= 2 && len(rest) <= 10:
		f, ok := num(20, n-3)
		if !ok {
			return time.Time{}, false
		}
		for range 10 - len(rest) {
			f *= 10
		}
		nsec = f
	default:
		return time.Time{}, false
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	if t.Day() != day { // 31 February and the like: let time.Parse refuse it
		return time.Time{}, false
	}
	return t, true
}
