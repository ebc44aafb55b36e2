package live

import (
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
