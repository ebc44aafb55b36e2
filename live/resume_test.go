package live

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/readmodel"
)

// TestResumeID: an id decodes to the state it was made of; what no stream
// issued is refused; raise keeps only the sent entries above B.
func TestResumeID(t *testing.T) {
	k := func(ms, id int64) events.FeedKey { return events.FeedKey{Ms: ms, ID: id} }
	r := Resume{B: k(2000, 50), B0: k(1000, 7), C: readmodel.ChangePos{Ms: 1_700_000_000_000, Seq: 3}}
	for _, s := range []events.FeedKey{k(2000, 60), k(2001, 1), k(2005, 99)} {
		r.add(s)
	}
	r.add(k(2001, 1)) // twice: once in Sent
	got, err := DecodeResume(r.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if got.B != r.B || got.B0 != r.B0 || got.C != r.C || !slices.Equal(got.Sent, r.Sent) || len(got.Sent) != 3 {
		t.Fatalf("decoded %+v, want %+v", got, r)
	}
	if !got.shown(k(1500, 1)) || got.shown(k(1000, 7)) || !got.shown(k(2001, 1)) || got.shown(k(2003, 1)) {
		t.Fatal("shown: (B0, B] and Sent only")
	}
	got.raise(k(2001, 1))
	if got.B != k(2001, 1) || !slices.Equal(got.Sent, []events.FeedKey{k(2005, 99)}) {
		t.Fatalf("raised: %+v", got)
	}
	got.raise(k(1, 1)) // never down
	if got.B != k(2001, 1) {
		t.Fatalf("B moved down: %+v", got)
	}
	for _, bad := range []string{"", "AQ", "x", r.Encode() + "A", Resume{B: k(1, 1), B0: k(2, 2)}.Encode()} {
		if _, err := DecodeResume(bad); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

// FuzzDecodeResume: whatever a client sends back either fails or is an
// id that encodes to itself.
func FuzzDecodeResume(f *testing.F) {
	f.Add(Resume{B: events.FeedKey{Ms: 5, ID: 6}, Sent: []events.FeedKey{{Ms: 7, ID: 1}}}.Encode())
	f.Fuzz(func(t *testing.T, s string) {
		r, err := DecodeResume(s)
		if err != nil {
			return
		}
		if again, err := DecodeResume(r.Encode()); err != nil || again.B != r.B || !slices.Equal(again.Sent, r.Sent) {
			t.Fatalf("%q: %+v does not round-trip", s, r)
		}
	})
}

// TestNotifResumeID: a notifications stream's id decodes to its state
// (B, B0, C, the sent positions); shown is (B0, B] and the sent ones; an
// id of the version before (no B0, no C) resumes with B0 = B and C zero;
// what no stream issued is refused.
func TestNotifResumeID(t *testing.T) {
	p := func(ms int64, m string) notifPos { return notifPos{ms: ms, member: m} }
	r := notifResume{b: p(2000, "b"), b0: p(1000, "a"), c: readmodel.ChangePos{Ms: 1_700_000_000_000, Seq: 2},
		sent: []notifPos{p(2000, "c"), p(2100, "a")}}
	got, err := decodeNotifResume(r.encode())
	if err != nil {
		t.Fatal(err)
	}
	if got.b != r.b || got.b0 != r.b0 || got.c != r.c || !slices.Equal(got.sent, r.sent) {
		t.Fatalf("decoded %+v, want %+v", got, r)
	}
	if !got.shown(p(1500, "x")) || got.shown(p(1000, "a")) || !got.shown(p(2100, "a")) || got.shown(p(2050, "x")) {
		t.Fatal("shown: (B0, B] and the sent ones only")
	}
	// The version before: B, the count, the sent positions.
	v2 := []byte{notifResumeV2}
	put := func(q notifPos) {
		v2 = binary.BigEndian.AppendUint64(v2, uint64(q.ms))
		v2 = binary.AppendUvarint(v2, uint64(len(q.member)))
		v2 = append(v2, q.member...)
	}
	put(r.b)
	v2 = binary.AppendUvarint(v2, 1)
	put(p(2100, "a"))
	old, err := decodeNotifResume(idEncoding.EncodeToString(v2))
	if err != nil {
		t.Fatal(err)
	}
	if old.b != r.b || old.b0 != r.b || old.c != (readmodel.ChangePos{}) || !slices.Equal(old.sent, []notifPos{p(2100, "a")}) {
		t.Fatalf("decoded v2 %+v", old)
	}
	if old.shown(p(1500, "x")) || !old.shown(p(2100, "a")) {
		t.Fatal("a v2 id shows its sent ones only")
	}
	for _, bad := range []string{"", "Aw", r.encode() + "A", notifResume{b: p(1, "a"), b0: p(2, "a")}.encode()} {
		if _, err := decodeNotifResume(bad); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}
