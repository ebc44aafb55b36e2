package queries

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	for _, k := range []key{
		{ms: 0, id: 1},
		{ms: 1_760_245_800_123, id: 7_253_000_000_000_000_001},
		{ms: maxCursorMs, id: math.MaxInt64},
		{ms: 5, id: 5},
	} {
		s := encodeCursor(k)
		if strings.ContainsAny(s, "+/=") {
			t.Errorf("cursor %q is not URL-safe", s)
		}
		got, err := parseCursor(s)
		if err != nil {
			t.Fatalf("parse(encode(%v)): %v", k, err)
		}
		if got != k {
			t.Errorf("parse(encode(%v)) = %v", k, got)
		}
	}
	if k, err := parseCursor(""); err != nil || k != startKey {
		t.Errorf(`parse("") = %v, %v; want the first page`, k, err)
	}
}

func TestCursorRejectsMalformed(t *testing.T) {
	t.Parallel()
	valid := encodeCursor(key{ms: 1000, id: 3})
	bad := []struct{ name, in string }{
		{"not base64", "!!!"},
		{"padding", valid + "="},
		{"standard alphabet", strings.ReplaceAll(strings.ReplaceAll(encodeCursor(key{ms: 1<<40 - 1, id: 1<<62 - 1}), "-", "+"), "_", "/") + "+"},
		{"truncated", valid[:len(valid)-2]},
		{"too long", valid + valid},
		{"seed format", "1760245800123:7253"},
		{"wrong version", cursorEncoding.EncodeToString(append([]byte{2}, make([]byte, 16)...))},
		{"negative ms", encodeCursor(key{ms: -1, id: 3})},
		{"zero id", encodeCursor(key{ms: 10, id: 0})},
		{"beyond 2^53 ms", encodeCursor(key{ms: maxCursorMs + 1, id: 3})},
		{"non-canonical trailing bits", valid[:len(valid)-1] + string(flipLowBits(valid[len(valid)-1]))},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseCursor(tc.in)
			var bc interface{ BadCursor() bool }
			if err == nil || !errors.As(err, &bc) || !bc.BadCursor() {
				t.Fatalf("parse(%q) = %v; want a BadCursor error", tc.in, err)
			}
		})
	}
}

// flipLowBits returns a base64url character with the same top 4 bits and
// different low bits, so a strict decoder must reject it as the last char.
func flipLowBits(c byte) byte {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, c)
	return alphabet[i^1]
}

// FuzzParseCursor: parsing never panics; whatever parses re-encodes to the
// same string (one spelling per position) and is a valid position.
func FuzzParseCursor(f *testing.F) {
	f.Add("")
	f.Add(encodeCursor(key{ms: 1_760_245_800_123, id: 7253}))
	f.Add("1760245800123:7253")
	f.Add("AQ")
	f.Add("=====")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := parseCursor(s)
		if err != nil {
			var bc interface{ BadCursor() bool }
			if !errors.As(err, &bc) {
				t.Fatalf("parse(%q): error %v is not a BadCursor error", s, err)
			}
			return
		}
		if s == "" {
			return
		}
		if k.ms < 0 || k.ms > maxCursorMs || k.id <= 0 {
			t.Fatalf("parse(%q) = %v: out of range", s, k)
		}
		if again := encodeCursor(k); again != s {
			t.Fatalf("parse(%q) = %v re-encodes as %q", s, k, again)
		}
	})
}

// A resume cursor (version 2) parses back to what was encoded, from the
// first page or from a cursor; author pages refuse it, a refresh reads it
// as its oldest key.
func TestResumeCursor(t *testing.T) {
	t.Parallel()
	for _, at := range []key{startKey, {ms: 1_760_245_800_500, id: 99}} {
		ex := []key{{ms: 1_760_245_800_123, id: 7253}, {ms: 1_760_245_800_123, id: 7000}, {ms: 1_760_000_000_000, id: 8_000_000_000_000_000_000}}
		s := encodeResume(at, ex)
		hc, err := parseHomeCursor(s)
		if err != nil {
			t.Fatalf("parse %q: %v", s, err)
		}
		if hc.at != at || !slices.Equal(hc.exclude, ex) {
			t.Fatalf("parse(encode(%v, %v)) = %+v", at, ex, hc)
		}
		if _, err := parseCursor(s); err == nil {
			t.Fatal("an author page accepted a resume cursor")
		}
		if a, err := parseAfter(s); err != nil || a != ex[2] {
			t.Fatalf("after=%q: %v %v, want %v", s, a, err, ex[2])
		}
	}
	full := make([]key, MaxLimit)
	for i := range full {
		full[i] = key{ms: maxCursorMs - int64(i)*(maxCursorMs/MaxLimit), id: math.MaxInt64 - int64(i)}
	}
	full[MaxLimit-1] = key{ms: 0, id: 1}
	if s := encodeResume(startKey, full); len(s) > MaxCursorLen {
		t.Fatalf("the longest resume cursor has %d characters, more than MaxCursorLen %d", len(s), MaxCursorLen)
	}
	for _, bad := range []func() []byte{
		func() []byte {
			b, _ := cursorEncoding.DecodeString(encodeResume(startKey, full[:1]))
			return b[:len(b)-1]
		}, // cut
		func() []byte {
			b, _ := cursorEncoding.DecodeString(encodeResume(startKey, full[:1]))
			return append(b, 0)
		}, // trailing
		func() []byte {
			b, _ := cursorEncoding.DecodeString(encodeResume(startKey, full[:1]))
			b[17] = 0
			return b
		}, // no exclusions
		func() []byte { // an exclusion not below the one before (id difference of -1 at the same ms)
			b, _ := cursorEncoding.DecodeString(encodeResume(key{ms: 5, id: 5}, []key{{ms: 5, id: 4}}))
			b[len(b)-1] = 1 // zigzag -1
			return b
		},
	} {
		if _, err := parseHomeCursor(cursorEncoding.EncodeToString(bad())); err == nil {
			t.Fatalf("a malformed resume cursor %x parsed", bad())
		}
	}
}

func FuzzParseHomeCursor(f *testing.F) {
	f.Add("")
	f.Add(encodeCursor(key{ms: 1_760_245_800_123, id: 7253}))
	f.Add(encodeResume(startKey, []key{{ms: 1_760_245_800_123, id: 7253}, {ms: 1_760_245_800_100, id: 7}}))
	f.Add(encodeResume(key{ms: 9, id: 9}, []key{{ms: 9, id: 8}}))
	f.Fuzz(func(t *testing.T, s string) {
		hc, err := parseHomeCursor(s)
		if err != nil {
			var bc interface{ BadCursor() bool }
			if !errors.As(err, &bc) {
				t.Fatalf("parse(%q): error %v is not a BadCursor error", s, err)
			}
			return
		}
		if len(hc.exclude) == 0 {
			return
		}
		prev := hc.at
		for _, e := range hc.exclude {
			if !e.less(prev) || e.ms < 0 || e.id <= 0 {
				t.Fatalf("parse(%q): exclusion %v not below %v or out of range", s, e, prev)
			}
			prev = e
		}
		if again := encodeResume(hc.at, hc.exclude); again != s {
			t.Fatalf("parse(%q) = %+v re-encodes as %q", s, hc, again)
		}
	})
}

func TestCursorV1EncLen(t *testing.T) {
	if n := cursorEncoding.EncodedLen(cursorV1Len); n != cursorV1EncLen {
		t.Fatalf("cursorV1EncLen %d, the encoding makes %d", cursorV1EncLen, n)
	}
	if c := encodeCursor(key{ms: -1, id: -1}); len(c) != cursorV1EncLen {
		t.Fatalf("cursor %q of length %d", c, len(c))
	}
}
