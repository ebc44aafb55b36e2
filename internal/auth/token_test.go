package auth

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSignVerify(t *testing.T) {
	s, err := NewSigner("0123456789abcdef-secret")
	if err != nil {
		t.Fatal(err)
	}
	tok := s.Sign(42, time.Hour)
	id, err := s.Verify(tok)
	if err != nil || id != 42 {
		t.Fatalf("verify: %d %v", id, err)
	}
	other, _ := NewSigner("another-secret-of-16+")
	if _, err := other.Verify(tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("forged (other secret) accepted: %v", err)
	}
	parts := strings.Split(tok, ".")
	tampered := parts[0] + "." + b64.EncodeToString([]byte(`{"sub":"1","exp":9999999999}`)) + "." + parts[2]
	if _, err := s.Verify(tampered); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("tampered claims accepted: %v", err)
	}
	for _, bad := range []string{"", "a.b", "a.b.c", tok + "x"} {
		if _, err := s.Verify(bad); !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("%q accepted", bad)
		}
	}
}

func TestExpired(t *testing.T) {
	s, _ := NewSigner("0123456789abcdef-secret")
	tok := s.Sign(1, time.Minute)
	s.now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	if _, err := s.Verify(tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("expired token accepted: %v", err)
	}
}

func TestShortSecret(t *testing.T) {
	if _, err := NewSigner("short"); err == nil {
		t.Fatal("short secret accepted")
	}
}

// A verified token is remembered, but the memory never outlives exp, never
// answers for another string (tampered, other signer) and stays bounded.
func TestVerifiedCache(t *testing.T) {
	s, _ := NewSigner("0123456789abcdef-secret")
	at := time.Now()
	s.now = func() time.Time { return at }
	tok := s.Sign(7, time.Minute)
	for range 2 { // the second answer comes from the cache
		if id, err := s.Verify(tok); err != nil || id != 7 {
			t.Fatalf("verify: %d %v", id, err)
		}
	}
	if n := s.cache.len(); n != 1 {
		t.Fatalf("%d tokens remembered, want 1", n)
	}
	// Expiry is checked on every hit.
	at = at.Add(time.Minute)
	if _, err := s.Verify(tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("expired cached token accepted: %v", err)
	}
	// Neither a tampered copy nor another signer's check uses the entry.
	at = at.Add(-time.Minute)
	parts := strings.Split(tok, ".")
	for _, bad := range []string{
		parts[0] + "." + b64.EncodeToString([]byte(`{"sub":"1","exp":9999999999}`)) + "." + parts[2],
		tampered(tok),
		tok + ".",
		"." + tok,
	} {
		if _, err := s.Verify(bad); !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("%q accepted", bad)
		}
	}
	other, _ := NewSigner("another-secret-of-16+")
	if _, err := other.Verify(tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("other signer accepted a token cached by the first: %v", err)
	}
	// Bounded: many tokens, at most VerifiedCacheSize remembered, and the
	// newest still answered.
	var last string
	for i := range VerifiedCacheSize + VerifiedCacheSize/2 {
		last = s.Sign(int64(i+1), time.Hour)
		if _, err := s.Verify(last); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.cache.len(); n > VerifiedCacheSize || n < VerifiedCacheSize/4 {
		t.Fatalf("%d tokens remembered, bound %d", n, VerifiedCacheSize)
	}
	if _, ok := s.cache.get(last, at.Unix()); !ok {
		t.Fatal("the newest token was dropped")
	}
}

// tampered changes one character of tok's signature to a different one
// (not its last, which carries only 2 bits of the 32-byte MAC).
func tampered(tok string) string {
	i := len(tok) - 3
	c := byte('A')
	if tok[i] == c {
		c = 'B'
	}
	return tok[:i] + string(c) + tok[i+1:]
}

// A token whose header is not the one Sign writes is still verified by
// decoding it: HS256 accepted, anything else refused.
func TestOtherHeader(t *testing.T) {
	s, _ := NewSigner("0123456789abcdef-secret")
	claims := b64.EncodeToString([]byte(`{"sub":"9","exp":9999999999}`))
	for h, ok := range map[string]bool{`{"typ":"JWT","alg":"HS256"}`: true, `{"alg":"none"}`: false, `{"alg":"HS512"}`: false} {
		signing := b64.EncodeToString([]byte(h)) + "." + claims
		tok := signing + "." + b64.EncodeToString(s.mac(signing))
		id, err := s.Verify(tok)
		if ok != (err == nil) || (ok && id != 9) {
			t.Fatalf("header %s: %d %v", h, id, err)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	s, _ := NewSigner("0123456789abcdef-secret")
	tok := s.Sign(42, time.Hour)
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Verify(tok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("uncached", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := s.verify(tok, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A subject is a canonical decimal id: one spelling per user.
func TestNonCanonicalSubject(t *testing.T) {
	s, _ := NewSigner("0123456789abcdef-secret")
	for _, sub := range []string{"+1", "0001", "01", "0", "-1", " 1", "1 ", "1e3", "9223372036854775808", ""} {
		c := b64.EncodeToString([]byte(`{"sub":"` + sub + `","exp":9999999999}`))
		signing := encodedHeader + "." + c
		tok := signing + "." + b64.EncodeToString(s.mac(signing))
		if id, err := s.Verify(tok); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("sub %q accepted as %d", sub, id)
		}
	}
}

func TestParseUserID(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1", 1, true},
		{"42", 42, true},
		{"9223372036854775807", 9223372036854775807, true},
		{"9223372036854775808", 0, false},
		{"10000000000000000000", 0, false},
		{"0", 0, false},
		{"0001", 0, false},
		{"+1", 0, false},
		{"-1", 0, false},
		{" 1", 0, false},
		{"1 ", 0, false},
		{"1,2", 0, false},
		{"0x1", 0, false},
		{"١", 0, false}, // a non-ASCII digit
		{"", 0, false},
	} {
		if got, ok := ParseUserID(c.in); got != c.want || ok != c.ok {
			t.Errorf("ParseUserID(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}
