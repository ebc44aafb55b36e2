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
