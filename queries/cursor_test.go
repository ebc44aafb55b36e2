package queries

import (
	"errors"
	"math"
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
