package cdc

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/feedco/feed/events"
)

func sampleEnvelope() events.Envelope {
	return events.Envelope{
		EventID: "0193a4b2-7c1e-7d3a-9f00-1234567890ab", Position: 12345, StreamID: "follow-1-2", StreamVersion: 3,
		Type: events.TypeFollowed, Payload: json.RawMessage(`{"followerId": "1", "followeeId": "2", "followeeFollowers": 7}`),
		Metadata:   events.Metadata{CorrelationID: "req-<1>&\"x\"", Actor: "1"},
		RecordedAt: time.Date(2026, 11, 30, 9, 41, 12, 345678000, time.UTC), CommitLSN: "16/B374D848", AudienceKey: 2,
	}
}

// The hand-written envelope encoding decodes to the same envelope as
// encoding/json's, and is byte-equal once the payload is compact.
func TestAppendEnvelope(t *testing.T) {
	envs := []events.Envelope{sampleEnvelope(), {Payload: json.RawMessage(`{}`)}}
	e := sampleEnvelope()
	e.Metadata = events.Metadata{CausationID: "c\u2028\x01\tü\xff"}
	e.CommitLSN = ""
	envs = append(envs, e)
	for _, env := range envs {
		checkEnvelope(t, env)
	}
}

func checkEnvelope(t *testing.T, env events.Envelope) {
	t.Helper()
	got := appendEnvelope(nil, &env)
	var back events.Envelope
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatalf("hand-encoded envelope is not JSON: %v\n%s", err, got)
	}
	want, err := json.Marshal(env)
	if err != nil {
		t.Skip("encoding/json refuses it too")
	}
	var compact, escaped bytes.Buffer
	if err := json.Compact(&compact, got); err != nil {
		t.Fatal(err)
	}
	// encoding/json compacts and HTML-escapes a RawMessage; the rest is
	// already escaped the same way, so this is byte equality of everything
	// but the payload's whitespace and escaping.
	json.HTMLEscape(&escaped, compact.Bytes())
	if !bytes.Equal(escaped.Bytes(), want) {
		t.Fatalf("hand-encoded\n%s\nencoding/json\n%s", escaped.Bytes(), want)
	}
}

func FuzzAppendEnvelope(f *testing.F) {
	f.Add("id", "stream-1", "type", `{"a": 1}`, "corr", "actor", int64(1), int64(2), int64(3))
	f.Add("<&>", "\u2028", "\x00\x1f", `["<&>\u2028"]`, "\xff", "ü", int64(-1), int64(0), int64(1<<62))
	f.Fuzz(func(t *testing.T, id, stream, typ, payload, corr, actor string, pos, ver, key int64) {
		if !json.Valid([]byte(payload)) {
			return
		}
		env := events.Envelope{EventID: id, Position: pos, StreamID: stream, StreamVersion: ver, Type: typ,
			Payload: json.RawMessage(payload), Metadata: events.Metadata{CorrelationID: corr, Actor: actor},
			RecordedAt: time.Unix(pos%1e10, ver%1e9).UTC(), CommitLSN: stream, AudienceKey: key}
		checkEnvelope(t, env)
	})
}
