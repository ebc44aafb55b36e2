package replay

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/feedco/feed/events"
)

// FuzzAppendEnvelope: the hand-written encoder prints exactly what
// json.Marshal prints, for any strings and any valid JSON payload.
func FuzzAppendEnvelope(f *testing.F) {
	f.Add("id", "post-1", "corr", "<a&b>", "\u2028x\u2029", `{"a": "<b>", "c": [1, 2.5e3, null]}`, int64(1700000000123456789), "0/16")
	f.Add("\x00\x1f\"\\", "\xff\xfe", "", "é€😀", "\t\n\r\b\f", `"\u2028 \u003c"`, int64(0), "")
	f.Fuzz(func(t *testing.T, id, stream, corr, actor, typ, payload string, nanos int64, lsn string) {
		if !json.Valid([]byte(payload)) {
			return
		}
		e := events.Envelope{EventID: id, Position: nanos % 1e9, StreamID: stream, StreamVersion: nanos % 7, Type: typ,
			Payload: json.RawMessage(payload), Metadata: events.Metadata{CorrelationID: corr, Actor: actor, CausationID: typ},
			RecordedAt: time.Unix(0, nanos).UTC(), CommitLSN: lsn, AudienceKey: -nanos}
		want, werr := json.Marshal(&e)
		got, gerr := appendEnvelope(nil, &e)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("errors differ: json %v, ours %v", werr, gerr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("encoding differs\n got %s\nwant %s", got, want)
		}
	})
}
