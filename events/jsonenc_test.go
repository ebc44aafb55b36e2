package events

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// oddStrings are strings encoding/json escapes: HTML characters, U+2028
// and U+2029, control characters, quotes and backslashes, invalid UTF-8.
var oddStrings = []string{"", "plain", "<a&b>", "\u2028x\u2029", "\x00\x1f\"\\", "\xff\xfe", "é€😀", "\t\n\r\b\f"}

// testEnvelopes are one envelope of every event type (the payload as Encode
// prints it), then envelopes with odd strings, payloads and times.
func testEnvelopes(t testing.TB) []Envelope {
	now := time.Date(2026, 1, 2, 3, 4, 5, 600700800, time.UTC)
	evs := []Event{
		UserRegistered{UserID: 11, Name: `a "quoted" <name> & U+2028 ` + "\u2028"},
		PostCreated{PostID: 1 << 62, AuthorID: 12, Content: "<b>x</b> & \xff \u2029", CreatedAt: now, AuthorFollowers: 3},
		PostDeleted{PostID: 5, AuthorID: 13, DeletedAt: now},
		PostEdited{PostID: 6, AuthorID: 18, Content: "<i>y</i> \u2028", Version: 2, EditedAt: now},
		Followed{FollowerID: 99, FolloweeID: 14, FolloweeFollowers: 1},
		Unfollowed{FollowerID: 98, FolloweeID: 15},
		Muted{MuterID: 21, MutedID: 16, Following: true, MutedFollowers: 2},
		Unmuted{MuterID: 21, MutedID: 16, Following: true, MutedFollowers: 2},
		Blocked{BlockerID: 22, BlockedID: 17},
		Unblocked{BlockerID: 22, BlockedID: 17},
	}
	var out []Envelope
	for i, e := range evs {
		p, err := Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Envelope{EventID: "0193a4b2-7c1e-7d3a-9f00-1234567890ab", Position: int64(i + 1), StreamID: e.StreamID(),
			StreamVersion: 1, Type: e.EventType(), Payload: p, Metadata: Metadata{CorrelationID: "corr-1", Actor: "12"},
			RecordedAt: now, CommitLSN: "16/B374D848", AudienceKey: e.AudienceKey()})
	}
	for _, s := range oddStrings {
		out = append(out, Envelope{EventID: s, Position: -1, StreamID: s, StreamVersion: -7, Type: s,
			Payload:  json.RawMessage(`{"a": "<b>", "c": [1, 2.5e3, null], "d": "\u2028 \u003c` + "\u2029" + `"}`),
			Metadata: Metadata{CorrelationID: s, CausationID: s, Actor: s}, RecordedAt: time.Unix(0, 1).UTC(), CommitLSN: s,
			AudienceKey: -1 << 63})
	}
	out = append(out,
		Envelope{}, // empty payload: null
		Envelope{Payload: json.RawMessage(` [ 1 , 2 ] `)}, // whitespace to drop
		Envelope{RecordedAt: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("x", 3600))},
		Envelope{RecordedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, // json.Marshal refuses it
		Envelope{RecordedAt: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)},
	)
	return out
}

// checkAppendJSON holds AppendJSON to json.Marshal: the same bytes, or both
// refuse. With rawPayload, a payload already as json.Marshal prints it
// gives the same bytes too.
func checkAppendJSON(t *testing.T, e Envelope) {
	t.Helper()
	want, werr := json.Marshal(&e)
	got, gerr := e.AppendJSON(nil, false)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("errors differ: json.Marshal %v, AppendJSON %v", werr, gerr)
	}
	if werr != nil {
		return
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("AppendJSON\n%s\njson.Marshal\n%s", got, want)
	}
	var compact bytes.Buffer
	if json.Compact(&compact, e.Payload) == nil && len(e.Payload) > 0 {
		var escaped bytes.Buffer
		json.HTMLEscape(&escaped, compact.Bytes())
		e.Payload = escaped.Bytes()
		if raw, _ := e.AppendJSON(nil, true); !bytes.Equal(raw, want) {
			t.Fatalf("AppendJSON raw\n%s\njson.Marshal\n%s", raw, want)
		}
	}
}

// TestAppendJSONMatchesEncodingJSON: every event type and the odd inputs.
func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	for _, e := range testEnvelopes(t) {
		checkAppendJSON(t, e)
	}
	for _, s := range oddStrings {
		want, _ := json.Marshal(s)
		if got := AppendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("AppendJSONString(%q) = %s, json.Marshal %s", s, got, want)
		}
	}
}

// FuzzAppendJSON: AppendJSON prints exactly what json.Marshal prints, for
// any strings and any valid JSON payload.
func FuzzAppendJSON(f *testing.F) {
	f.Add("id", "post-1", "corr", "<a&b>", "\u2028x\u2029", `{"a": "<b>", "c": [1, 2.5e3, null]}`, int64(1700000000123456789), "0/16")
	f.Add("\x00\x1f\"\\", "\xff\xfe", "", "é€😀", "\t\n\r\b\f", `"\u2028 \u003c"`, int64(0), "")
	f.Fuzz(func(t *testing.T, id, stream, corr, actor, typ, payload string, nanos int64, lsn string) {
		if !json.Valid([]byte(payload)) {
			return
		}
		checkAppendJSON(t, Envelope{EventID: id, Position: nanos % 1e9, StreamID: stream, StreamVersion: nanos % 7, Type: typ,
			Payload: json.RawMessage(payload), Metadata: Metadata{CorrelationID: corr, Actor: actor, CausationID: typ},
			RecordedAt: time.Unix(0, nanos).UTC(), CommitLSN: lsn, AudienceKey: -nanos})
	})
}

// BenchmarkAppendJSON: AppendJSON against json.Marshal, one envelope of
// each event type.
//
//	go test -run '^$' -bench AppendJSON -count 5 ./events/
func BenchmarkAppendJSON(b *testing.B) {
	envs := testEnvelopes(b)[:5]
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			for i := range envs {
				buf, _ = envs[i].AppendJSON(buf[:0], false)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for i := range envs {
				if _, err := json.Marshal(&envs[i]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
