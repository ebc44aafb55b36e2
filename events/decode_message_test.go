package events

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// sampleEnvelopes are one envelope per current type, as CDC writes them
// (AppendJSON with the payload as jsonb prints it).
func sampleEnvelopes(t testing.TB) map[string][]byte {
	t.Helper()
	at := time.Date(2026, 11, 30, 9, 41, 12, 345_000_000, time.UTC)
	out := map[string][]byte{}
	for _, ev := range []Event{
		UserRegistered{UserID: 7, Name: "ana"},
		PostCreated{PostID: 915184806927532032, AuthorID: 7, Content: "bench post 12 from the mixed workload, olá <b>", CreatedAt: at, AuthorFollowers: 312},
		PostDeleted{PostID: 915184806927532032, AuthorID: 7, DeletedAt: at},
		PostEdited{PostID: 915184806927532032, AuthorID: 7, Content: "edited <b>", Version: 2, EditedAt: at},
		Followed{FollowerID: 1, FolloweeID: 7, FolloweeFollowers: 4},
		Unfollowed{FollowerID: 1, FolloweeID: 7, FolloweeFollowers: 3},
	} {
		p, err := Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		env := Envelope{EventID: "0b6c8f2e-5d0a-4c1e-9a57-3f1c2d4e5f60", Position: 123456, StreamID: ev.StreamID(), StreamVersion: 1,
			Type: ev.EventType(), Payload: p, Metadata: Metadata{CorrelationID: "c-1", Actor: "7"}, RecordedAt: at,
			CommitLSN: "16/B374D848", AudienceKey: ev.AudienceKey()}
		b, err := env.AppendJSON(nil, true)
		if err != nil {
			t.Fatal(err)
		}
		out[ev.EventType()] = b
	}
	return out
}

// sameDecode fails unless DecodeEnvelopeJSON and the plain way agree on
// (typ, b): both fail, or both give the same envelope (but the payload,
// which the one-pass way leaves out) and the same event.
func sameDecode(t *testing.T, c *Codec, typ string, b []byte) (onePass bool) {
	t.Helper()
	env, ev, err := c.DecodeEnvelopeJSON(typ, b)
	penv, pev, perr := c.decodeEnvelopeJSONPlain(b)
	if (err == nil) != (perr == nil) {
		t.Fatalf("%s %q: one pass err %v, plain err %v", typ, b, err, perr)
	}
	if err != nil {
		return false
	}
	onePass = env.Payload == nil && penv.Payload != nil
	env.Payload, penv.Payload = nil, nil
	if !reflect.DeepEqual(env, penv) || !reflect.DeepEqual(ev, pev) {
		t.Fatalf("%s %q:\none pass %#v %#v\nplain    %#v %#v", typ, b, env, ev, penv, pev)
	}
	return onePass
}

func TestDecodeEnvelopeJSON(t *testing.T) {
	samples := sampleEnvelopes(t)
	for typ, b := range samples {
		t.Run(typ, func(t *testing.T) {
			if !sameDecode(t, DefaultCodec, typ, b) {
				t.Fatalf("a CDC envelope of a current type did not take the one-pass way")
			}
			_, ev, err := DefaultCodec.DecodeEnvelopeJSON(typ, b)
			if err != nil || ev.EventType() != typ {
				t.Fatalf("decoded %#v, %v", ev, err)
			}
		})
	}
	pc := string(samples[TypePostCreated])
	payload := pc[strings.Index(pc, `"payload":`)+len(`"payload":`) : strings.Index(pc, `,"metadata"`)]
	for _, c := range []struct {
		name, typ, json string
		onePass         bool
	}{
		{"type differs from the message's", TypeFollowed, pc, false},
		{"type with no event", "post.created.v0", pc, false},
		{"no payload", TypePostCreated, strings.Replace(pc, `"payload":`+payload+`,`, ``, 1), false},
		{"null payload", TypePostCreated, strings.Replace(pc, payload, `null`, 1), false},
		{"payload twice", TypePostCreated, strings.Replace(pc, `"metadata"`, `"payload":{"content":"x"},"metadata"`, 1), false},
		{"payload in another case", TypePostCreated, strings.Replace(pc, `"payload"`, `"Payload"`, 1), false},
		{"payload key escaped", TypePostCreated, strings.Replace(pc, `"payload"`, `"p\u0061yload"`, 1), false},
		{"payload of another type", TypePostCreated, strings.Replace(pc, payload, `[1,2]`, 1), false},
		{"bad id in the payload", TypePostCreated, strings.Replace(pc, `"postId":"915184806927532032"`, `"postId":"x"`, 1), false},
		{"not an object", TypePostCreated, `[]`, false},
		{"truncated", TypePostCreated, pc[:len(pc)-3], false},
		{"whitespace", TypePostCreated, strings.ReplaceAll(pc, `,"`, " ,\n \""), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := sameDecode(t, DefaultCodec, c.typ, []byte(c.json)); got != c.onePass {
				t.Fatalf("one pass %v, want %v", got, c.onePass)
			}
		})
	}
	t.Run("upcaster", func(t *testing.T) {
		c := NewCodec(map[string]Upcaster{TypePostCreated: func(p json.RawMessage) (string, json.RawMessage, error) {
			return TypePostDeleted, json.RawMessage(`{"postId":"1","authorId":"2","deletedAt":"2026-01-01T00:00:00Z"}`), nil
		}})
		if sameDecode(t, c, TypePostCreated, samples[TypePostCreated]) {
			t.Fatal("a type with an upcaster took the one-pass way")
		}
		if _, ev, _ := c.DecodeEnvelopeJSON(TypePostCreated, samples[TypePostCreated]); ev.EventType() != TypePostDeleted {
			t.Fatalf("not upcast: %#v", ev)
		}
	})
}

func FuzzDecodeEnvelopeJSON(f *testing.F) {
	for typ, b := range sampleEnvelopes(f) {
		f.Add(typ, b)
		f.Add(typ, []byte(strings.Replace(string(b), `"payload"`, `"payload":{},"payload"`, 1)))
	}
	f.Fuzz(func(t *testing.T, typ string, b []byte) {
		sameDecode(t, DefaultCodec, typ, b)
	})
}

// BenchmarkDecodeEnvelopeJSON measures a consumer's decoding of one
// message: one-pass (DecodeEnvelopeJSON) against plain (the envelope with
// a raw payload, then the codec).
func BenchmarkDecodeEnvelopeJSON(b *testing.B) {
	msg := sampleEnvelopes(b)[TypePostCreated]
	b.Run("one-pass", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := DefaultCodec.DecodeEnvelopeJSON(TypePostCreated, msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := DefaultCodec.decodeEnvelopeJSONPlain(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
}
