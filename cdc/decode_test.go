package cdc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/kafka"
)

// pgoutput encoders for tests: the server's side of the format.
func encBegin(lsn pglogrepl.LSN, t time.Time, xid uint32) []byte {
	b := []byte{'B'}
	b = binary.BigEndian.AppendUint64(b, uint64(lsn))
	b = binary.BigEndian.AppendUint64(b, uint64(t.Sub(pgEpoch).Microseconds()))
	return binary.BigEndian.AppendUint32(b, xid)
}

func encCommit(lsn, end pglogrepl.LSN, t time.Time) []byte {
	b := []byte{'C', 0}
	b = binary.BigEndian.AppendUint64(b, uint64(lsn))
	b = binary.BigEndian.AppendUint64(b, uint64(end))
	return binary.BigEndian.AppendUint64(b, uint64(t.Sub(pgEpoch).Microseconds()))
}

func encRelation(id uint32, ns, name string, cols []string) []byte {
	b := []byte{'R'}
	b = binary.BigEndian.AppendUint32(b, id)
	b = append(append(b, ns...), 0)
	b = append(append(b, name...), 0)
	b = append(b, 'd')
	b = binary.BigEndian.AppendUint16(b, uint16(len(cols)))
	for _, c := range cols {
		b = append(b, 0)
		b = append(append(b, c...), 0)
		b = binary.BigEndian.AppendUint32(b, 25)
		b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
	}
	return b
}

func encInsert(rel uint32, vals []*string) []byte {
	b := []byte{'I'}
	b = binary.BigEndian.AppendUint32(b, rel)
	b = append(b, 'N')
	b = binary.BigEndian.AppendUint16(b, uint16(len(vals)))
	for _, v := range vals {
		if v == nil {
			b = append(b, 'n')
			continue
		}
		b = append(b, 't')
		b = binary.BigEndian.AppendUint32(b, uint32(len(*v)))
		b = append(b, *v...)
	}
	return b
}

func sp(s string) *string { return &s }

// decoders are the two pgoutputDecoders: every decode test runs on both.
var decoders = []struct {
	name   string
	decode pgoutputDecoder
}{{"hand", decodeMessage}, {"pglogrepl", parseMessage}}

// A transaction of the events table decodes into the envelope of the
// Kafka contract, columns found by name whatever their order.
func TestDecodeTransaction(t *testing.T) {
	for _, d := range decoders {
		t.Run(d.name, func(t *testing.T) { testDecodeTransaction(t, d.decode) })
	}
}

func testDecodeTransaction(t *testing.T, decodeMessage pgoutputDecoder) {
	commit := time.Date(2026, 11, 30, 9, 41, 12, 345678000, time.UTC)
	msg, err := decodeMessage(encBegin(0x16B374D848, commit, 7))
	if err != nil {
		t.Fatal(err)
	}
	if b := msg.(*beginMsg); b.FinalLSN != 0x16B374D848 || !b.CommitTime.Equal(commit) || b.Xid != 7 {
		t.Fatalf("begin %+v", b)
	}
	cols := []string{"extra", "recorded_at", "metadata", "payload", "type", "stream_version", "stream_id", "event_id", "position"}
	msg, err = decodeMessage(encRelation(16384, "public", "events", cols))
	if err != nil {
		t.Fatal(err)
	}
	ec, err := newEventColumns(msg.(*relation))
	if err != nil {
		t.Fatal(err)
	}
	msg, err = decodeMessage(encInsert(16384, []*string{nil, sp("2026-11-30 09:41:12.345+00"), sp(`{"correlationId": "c1"}`),
		sp(`{"followerId": "5", "followeeId": "9", "followeeFollowers": 1}`), sp("user.followed.v1"), sp("3"),
		sp("follow-5-9"), sp("0193a4b2-7c1e-7d3a-9f00-1234567890ab"), sp("77")}))
	if err != nil {
		t.Fatal(err)
	}
	row, err := rowOf(ec, msg.(*insertMsg).Values, 0x16B374D848)
	if err != nil || row.decodeErr != nil {
		t.Fatal(err, row.decodeErr)
	}
	env, err := row.envelope()
	if err != nil {
		t.Fatal(err)
	}
	if env.AudienceKey != 9 || env.CommitLSN != "16/B374D848" || env.Position != 77 || env.StreamVersion != 3 ||
		env.Metadata.CorrelationID != "c1" || !env.RecordedAt.Equal(time.Date(2026, 11, 30, 9, 41, 12, 345000000, time.UTC)) {
		t.Fatalf("envelope %+v", env)
	}
	msg, err = decodeMessage(encCommit(0x16B374D848, 0x16B374D900, commit))
	if err != nil {
		t.Fatal(err)
	}
	if c := msg.(*commitMsg); c.EndLSN != 0x16B374D900 {
		t.Fatalf("commit %+v", c)
	}

	// A payload this binary cannot decode is still published, keyed 0.
	msg, _ = decodeMessage(encInsert(16384, []*string{nil, sp("2026-11-30 09:41:12+00"), sp(`{}`), sp(`{"x": 1}`),
		sp("user.renamed.v9"), sp("1"), sp("user-1"), sp("id"), sp("1")}))
	row, err = rowOf(ec, msg.(*insertMsg).Values, 1)
	if err != nil || row.decodeErr == nil || row.env.AudienceKey != 0 {
		t.Fatalf("unknown type: err %v, decodeErr %v, key %d", err, row.decodeErr, row.env.AudienceKey)
	}
	// A NULL in a required column is malformed.
	msg, _ = decodeMessage(encInsert(16384, []*string{nil, nil, nil, nil, nil, nil, nil, nil, nil}))
	if _, err := rowOf(ec, msg.(*insertMsg).Values, 1); !errors.Is(err, ErrMalformed) {
		t.Fatalf("NULL columns: %v", err)
	}
	// A relation without the needed columns is refused.
	if _, err := newEventColumns(&relation{Name: "events", Columns: []string{"position"}}); err == nil {
		t.Fatal("relation without columns accepted")
	}
}

// Truncated messages are errors, never panics.
func TestDecodeTruncated(t *testing.T) {
	for _, full := range decodeSeeds() {
		for i := 0; i < len(full); i++ {
			for _, d := range decoders {
				if _, err := d.decode(full[:i]); !errors.Is(err, ErrMalformed) {
					t.Fatalf("%s: %q truncated to %d: %v", d.name, full[0], i, err)
				}
			}
		}
	}
}

// decodeSeeds are one message of each kind CDC reads.
func decodeSeeds() [][]byte {
	return [][]byte{
		encBegin(1, time.Now(), 1), encCommit(1, 2, time.Now()),
		encRelation(1, "public", "events", requiredColumns), encInsert(1, []*string{sp("a"), nil, sp("bc")}),
	}
}

// FuzzDecodeMessage: decodeMessage does not panic, parseMessage accepts
// what it accepts and reads the same message from it, and a decoded insert
// goes through rowOf and envelope without panicking. parseMessage runs only
// on what decodeMessage accepted: on a corrupt column length pglogrepl
// allocates what the length says (TestDecodeTruncated has both refuse
// truncated messages).
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range decodeSeeds() {
		f.Add(s)
	}
	f.Add(encInsert(1, []*string{sp("1"), sp("x"), nil}))
	ec, _ := newEventColumns(&relation{Columns: requiredColumns})
	f.Fuzz(func(t *testing.T, data []byte) {
		msg, err := decodeMessage(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("%q: %v is not ErrMalformed", data, err)
			}
			return
		}
		plain, perr := parseMessage(data)
		if ins, ok := msg.(*insertMsg); ok && len(ins.Values) == 0 && perr != nil {
			return // pglogrepl refuses an insert of no columns (rowOf does too)
		}
		if perr != nil {
			t.Fatalf("%q: hand %#v, pglogrepl %v", data, msg, perr)
		}
		if !sameMessage(msg, plain) {
			t.Fatalf("%q: hand %#v, pglogrepl %#v", data, msg, plain)
		}
		if ins, ok := msg.(*insertMsg); ok {
			if row, err := rowOf(ec, ins.Values, 1); err == nil {
				_, _ = row.envelope()
			}
		}
	})
}

// sameTime compares two decoded times. pglogrepl counts nanoseconds since
// 1970 and decodeMessage nanoseconds since 2000 in an int64, so each
// overflows somewhere outside 1678-2261: there they may differ.
func sameTime(a, b time.Time) bool {
	inRange := func(t time.Time) bool { return t.Year() >= 1678 && t.Year() <= 2261 }
	return a.Equal(b) || !inRange(a) || !inRange(b)
}

// sameMessage compares two decoded messages.
func sameMessage(a, b any) bool {
	switch a := a.(type) {
	case *beginMsg:
		b, ok := b.(*beginMsg)
		return ok && a.FinalLSN == b.FinalLSN && sameTime(a.CommitTime, b.CommitTime) && a.Xid == b.Xid
	case *commitMsg:
		b, ok := b.(*commitMsg)
		return ok && a.CommitLSN == b.CommitLSN && a.EndLSN == b.EndLSN && sameTime(a.CommitTime, b.CommitTime)
	case *relation:
		b, ok := b.(*relation)
		return ok && a.ID == b.ID && a.Namespace == b.Namespace && a.Name == b.Name && slices.Equal(a.Columns, b.Columns)
	case *insertMsg:
		b, ok := b.(*insertMsg)
		return ok && a.RelationID == b.RelationID && slices.EqualFunc(a.Values, b.Values, func(x, y []byte) bool {
			return (x == nil) == (y == nil) && bytes.Equal(x, y)
		})
	case nil:
		return b == nil
	}
	return false
}

// The checkpointer confirms a transaction only when it and every older
// one are acknowledged, whatever order the lanes acknowledge in, and moves
// to the server's position only when nothing is in flight.
func TestCheckpointerConfirmsAcknowledgedPrefix(t *testing.T) {
	c := newCheckpointer(0)
	t1 := c.begin(100, time.Now())
	t1.pending.Add(2)
	c.commit(t1, 110)
	t2 := c.begin(200, time.Now())
	t2.pending.Add(1)
	c.commit(t2, 210)
	t3 := c.begin(300, time.Now())
	t3.pending.Add(1) // still open: no commit yet

	t2.ack()
	t3.ack()
	if p := c.advance(); p.confirmed != 0 || p.idle {
		t.Fatalf("confirmed %v before the oldest transaction was acknowledged", p.confirmed)
	}
	if got := c.confirmIdle(999); got != 0 {
		t.Fatalf("confirmIdle moved to %v while transactions are in flight", got)
	}
	t1.ack()
	if p := c.advance(); p.confirmed != 0 {
		t.Fatalf("one of t1's two events acknowledged: confirmed %v", p.confirmed)
	}
	t1.ack()
	if p := c.advance(); p.confirmed != 210 || p.idle {
		t.Fatalf("t1 and t2 acknowledged, t3 open: confirmed %v idle %v", p.confirmed, p.idle)
	}
	c.commit(t3, 310)
	if p := c.advance(); p.confirmed != 310 || !p.idle {
		t.Fatalf("all acknowledged: confirmed %v idle %v", p.confirmed, p.idle)
	}
	if got := c.confirmIdle(400); got != 400 {
		t.Fatalf("idle: confirmIdle gave %v, want the server's 400", got)
	}
	// An abandoned open transaction no longer holds the checkpoint.
	t4 := c.begin(500, time.Now())
	t4.pending.Add(1)
	c.abandon(t4)
	if p := c.advance(); !p.idle {
		t.Fatal("abandoned transaction still in flight")
	}
}

// TestTimestamptzFastPath: the fast path gives what the layouts give, and
// steps aside for anything it does not know.
func TestTimestamptzFastPath(t *testing.T) {
	for _, s := range []string{
		"2026-11-30 12:00:00+00", "2026-11-30 12:00:00.1+00", "2026-11-30 12:00:00.123456+00",
		"2024-02-29 23:59:59.999999+00", "1999-12-31 00:00:00.5+00",
		"2026-02-31 12:00:00+00", "2026-13-01 12:00:00+00", "2026-11-30 12:00:00.+00",
		"2026-11-30 12:00:00.1234567890+00", "2026-11-30 12:00:00+01", "2026-11-30T12:00:00+00",
		"2026-11-30 12:00:00.12a+00", "2026-11-30 12:00:00-07:30",
	} {
		want, werr := parseTimestamptzLayouts(s)
		got, err := parseTimestamptz(s)
		if (err != nil) != (werr != nil) || !got.Equal(want) {
			t.Errorf("%q: got %v, %v; layouts %v, %v", s, got, err, want, werr)
		}
	}
	if _, ok := parseUTCTimestamptz("2026-11-30 12:00:00.123456+00"); !ok {
		t.Error("the session's form missed the fast path")
	}
}

func FuzzTimestamptz(f *testing.F) {
	f.Add("2026-11-30 12:00:00.123456+00")
	f.Fuzz(func(t *testing.T, s string) {
		want, werr := parseTimestamptzLayouts(s)
		got, err := parseTimestamptz(s)
		if (err != nil) != (werr != nil) || !got.Equal(want) {
			t.Fatalf("%q: got %v, %v; layouts %v, %v", s, got, err, want, werr)
		}
	})
}

// BenchmarkEventToMessage is the CDC process's own CPU per event, from a
// decoded insert to the Kafka message (row, envelope, message, watermill's
// marshaling): "whole". Beside it, each fast path against the standard
// decoder it replaces, in the same run: the audience key
// (events.AudienceKeyOf against a full Codec.Decode), the metadata
// (events.ParseMetadata against json.Unmarshal) and recorded_at
// (parseUTCTimestamptz against time.Parse of the layouts).
//
//	go test -run '^$' -bench EventToMessage -count 5 ./cdc/
func BenchmarkEventToMessage(b *testing.B) {
	cols := []string{"position", "event_id", "stream_id", "stream_version", "type", "payload", "metadata", "recorded_at", "tx_id"}
	rel, err := decodeMessage(encRelation(16384, "public", "events", cols))
	if err != nil {
		b.Fatal(err)
	}
	ec, err := newEventColumns(rel.(*relation))
	if err != nil {
		b.Fatal(err)
	}
	payload := `{"postId": "7400000000000000077", "authorId": "1234", "content": "hello world, a post of some length", "createdAt": "2026-11-30T09:41:12.345Z", "authorFollowers": 321}`
	metadata := `{"actor": "1234", "causationId": "", "correlationId": "corr-0193a4b2-7c1e"}`
	recorded := "2026-11-30 09:41:12.345678+00"
	ins, err := decodeMessage(encInsert(16384, []*string{sp("77"), sp("0193a4b2-7c1e-7d3a-9f00-1234567890ab"),
		sp("post-7400000000000000077"), sp("1"), sp(events.TypePostCreated), sp(payload), sp(metadata), sp(recorded), sp("123456")}))
	if err != nil {
		b.Fatal(err)
	}
	vals := ins.(*insertMsg).Values
	b.Run("whole", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			row, err := rowOf(ec, vals, 0x16B374D848)
			if err != nil {
				b.Fatal(err)
			}
			msg, err := messageOf(row)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := kafka.Marshaler.Marshal("events", msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	pb, mb := []byte(payload), []byte(metadata)
	run := func(name string, f func() error) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	run("audience/fast", func() error { _, err := events.DefaultCodec.AudienceKeyOf(events.TypePostCreated, pb); return err })
	run("audience/codec", func() error {
		ev, err := events.DefaultCodec.Decode(events.TypePostCreated, pb)
		if err == nil {
			_ = ev.AudienceKey()
		}
		return err
	})
	run("metadata/fast", func() error { _, err := events.ParseMetadata(mb); return err })
	run("metadata/json", func() error { var m events.Metadata; return json.Unmarshal(mb, &m) })
	run("recorded_at/fast", func() error { _, err := parseTimestamptz(recorded); return err })
	run("recorded_at/layouts", func() error { _, err := parseTimestamptzLayouts(recorded); return err })
}

// BenchmarkDecode decodes one transaction of the events table (begin,
// relation, one insert of a post, commit) with the hand-written decoder
// ("hand", decodeMessage) and with pglogrepl.Parse ("pglogrepl", through
// parseMessage; "pglogrepl/raw" is Parse alone).
//
//	go test -run '^$' -bench Decode -count 5 ./cdc/
func BenchmarkDecode(b *testing.B) {
	commit := time.Date(2026, 11, 30, 9, 41, 12, 345678000, time.UTC)
	cols := []string{"position", "event_id", "stream_id", "stream_version", "type", "payload", "metadata", "recorded_at", "tx_id"}
	payload := `{"postId": "7400000000000000077", "authorId": "1234", "content": "hello world, a post of some length", "createdAt": "2026-11-30T09:41:12.345Z", "authorFollowers": 321}`
	msgs := [][]byte{
		encBegin(0x16B374D848, commit, 7),
		encRelation(16384, "public", "events", cols),
		encInsert(16384, []*string{sp("77"), sp("0193a4b2-7c1e-7d3a-9f00-1234567890ab"),
			sp("post-7400000000000000077"), sp("1"), sp(events.TypePostCreated), sp(payload),
			sp(`{"actor": "1234", "causationId": "", "correlationId": "corr-0193a4b2-7c1e"}`),
			sp("2026-11-30 09:41:12.345678+00"), sp("123456")}),
		encCommit(0x16B374D848, 0x16B374D900, commit),
	}
	names := []string{"begin", "relation", "insert", "commit"}
	for i, m := range msgs {
		for _, d := range []struct {
			name string
			f    func([]byte) (any, error)
		}{
			{"hand", decodeMessage},
			{"pglogrepl", parseMessage},
			{"pglogrepl/raw", func(b []byte) (any, error) { return pglogrepl.Parse(b) }},
		} {
			b.Run(names[i]+"/"+d.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := d.f(m); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
