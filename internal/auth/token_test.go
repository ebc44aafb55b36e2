package auth

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const testSecret = "0123456789abcdef-secret"

// forge signs claims with method and key, as another issuer (or an
// attacker who knows a secret) would.
func forge(t testing.TB, method jwt.SigningMethod, key any, c jwt.MapClaims) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(method, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// forgeHeader is an HS256 token with header fields of its own.
func forgeHeader(t testing.TB, key []byte, header map[string]any, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustNew(t testing.TB, cfg Config) *Signer {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// in is an exp (or nbf) d from now, in unix seconds.
func in(d time.Duration) int64 { return time.Now().Add(d).Unix() }

func TestSignVerify(t *testing.T) {
	s := mustNew(t, Config{Secret: testSecret})
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
	tamperedClaims := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"1","exp":9999999999}`)) + "." + parts[2]
	for _, bad := range []string{"", "a.b", "a.b.c", tok + "x", tamperedClaims, tampered(tok), tok + "=", parts[0] + "." + parts[1] + "."} {
		if _, err := s.Verify(bad); !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("%q accepted", bad)
		}
	}
}

// Each rule of Verify, on tokens signed as another issuer would sign them.
func TestTokenRules(t *testing.T) {
	key := []byte(testSecret)
	plain := mustNew(t, Config{Secret: testSecret})
	scoped := mustNew(t, Config{Secret: testSecret, Issuer: "https://id.feed.test", Audience: "feed-api"})
	for _, c := range []struct {
		name   string
		tok    string
		plain  bool // accepted by a signer without iss/aud settings
		scoped bool // accepted by one that requires iss and aud
	}{
		{"minimal", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "9", "exp": in(time.Hour)}), true, false},
		{"no exp", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "9"}), false, false},
		{"exp not a number", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "9", "exp": "tomorrow"}), false, false},
		{"expired", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "9", "exp": in(-time.Second)}), false, false},
		{"nbf past", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "9", "exp": in(time.Hour), "nbf": in(-time.Minute)}), true, false},
		{"nbf future", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "9", "exp": in(time.Hour), "nbf": in(time.Minute)}), false, false},
		{"iss and aud", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "9", "exp": in(time.Hour), "iss": "https://id.feed.test", "aud": "feed-api"}), true, true},
		{"aud in a list", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "9", "exp": in(time.Hour), "iss": "https://id.feed.test", "aud": []string{"other", "feed-api"}}), true, true},
		{"other iss", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "9", "exp": in(time.Hour), "iss": "https://evil.test", "aud": "feed-api"}), true, false},
		{"no iss", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "9", "exp": in(time.Hour), "aud": "feed-api"}), true, false},
		{"other aud", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "9", "exp": in(time.Hour), "iss": "https://id.feed.test", "aud": "billing"}), true, false},
		{"no aud", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "9", "exp": in(time.Hour), "iss": "https://id.feed.test"}), true, false},
		{"HS384", forge(t, jwt.SigningMethodHS384, key, jwt.MapClaims{"sub": "9", "exp": in(time.Hour)}), false, false},
		{"HS512", forge(t, jwt.SigningMethodHS512, key, jwt.MapClaims{"sub": "9", "exp": in(time.Hour)}), false, false},
		{"alg none", forge(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "9", "exp": in(time.Hour)}), false, false},
		{"sub a number", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": 9, "exp": in(time.Hour)}), false, false},
		{"no sub", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"exp": in(time.Hour)}), false, false},
		{"exp a numeric string", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "9", "exp": fmt.Sprint(in(time.Hour))}), false, false},
		{"nbf a numeric string", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "9", "exp": in(time.Hour), "nbf": fmt.Sprint(in(-time.Minute))}), false, false},
		{"iat past", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "9", "exp": in(time.Hour), "iat": in(-time.Minute)}), true, false},
		{"iat future", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "9", "exp": in(time.Hour), "iat": in(time.Hour)}), false, false},
		{"iat a numeric string", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "9", "exp": in(time.Hour), "iat": fmt.Sprint(in(-time.Minute))}), false, false},
		{"a claim of its own", forge(t, jwt.SigningMethodHS256, key, jwt.MapClaims{"sub": "9", "exp": in(time.Hour), "name": "ana"}), true, false},
		{"crit header", forgeHeader(t, key, map[string]any{"crit": []string{"exp"}}, jwt.MapClaims{"sub": "9", "exp": in(time.Hour)}), false, false},
		{"empty crit header", forgeHeader(t, key, map[string]any{"crit": []string{}}, jwt.MapClaims{"sub": "9", "exp": in(time.Hour)}), false, false},
	} {
		for _, v := range []struct {
			s    *Signer
			want bool
		}{{plain, c.plain}, {scoped, c.scoped}} {
			id, err := v.s.Verify(c.tok)
			if v.want != (err == nil) || (v.want && id != 9) {
				t.Errorf("%s (issuer %q): %d %v, want accepted %v", c.name, v.s.cfg.Issuer, id, err, v.want)
			}
			if err != nil && !errors.Is(err, ErrInvalidToken) {
				t.Errorf("%s: error %v is not ErrInvalidToken", c.name, err)
			}
		}
	}
	// What a scoped signer issues, it accepts, and a signer of another
	// audience refuses.
	tok := scoped.Sign(5, time.Hour)
	if id, err := scoped.Verify(tok); err != nil || id != 5 {
		t.Fatalf("scoped token: %d %v", id, err)
	}
	other := mustNew(t, Config{Secret: testSecret, Issuer: "https://id.feed.test", Audience: "billing"})
	if _, err := other.Verify(tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("a token for feed-api accepted by billing: %v", err)
	}
}

// nbf is honoured on the signer's clock, and a token refused before its
// nbf is accepted after it.
func TestNotBefore(t *testing.T) {
	s := mustNew(t, Config{Secret: testSecret})
	at := time.Now()
	s.now = func() time.Time { return at }
	tok := forge(t, jwt.SigningMethodHS256, []byte(testSecret), jwt.MapClaims{"sub": "3", "exp": at.Add(time.Hour).Unix(), "nbf": at.Add(time.Minute).Unix()})
	if _, err := s.Verify(tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("accepted before nbf: %v", err)
	}
	at = at.Add(time.Minute + time.Second)
	if id, err := s.Verify(tok); err != nil || id != 3 {
		t.Fatalf("after nbf: %d %v", id, err)
	}
}

// Rotation: the new secret signs; tokens of the previous secret are
// still accepted while it is configured, and refused once it is gone.
func TestRotation(t *testing.T) {
	const oldSecret, newSecret = "the-old-secret-0123456789", "the-new-secret-0123456789"
	before := mustNew(t, Config{Secret: oldSecret})
	during := mustNew(t, Config{Secret: newSecret, PreviousSecret: oldSecret})
	after := mustNew(t, Config{Secret: newSecret})
	oldTok, newTok := before.Sign(1, time.Hour), during.Sign(2, time.Hour)
	for _, c := range []struct {
		name string
		s    *Signer
		tok  string
		want int64 // 0: refused
	}{
		{"old token during", during, oldTok, 1},
		{"new token during", during, newTok, 2},
		{"new token after", after, newTok, 2},
		{"old token after", after, oldTok, 0},
		{"new token before", before, newTok, 0},
		{"third secret during", during, mustNew(t, Config{Secret: "a-third-secret-0123456789"}).Sign(3, time.Hour), 0},
	} {
		id, err := c.s.Verify(c.tok)
		if (c.want == 0) != (err != nil) || id != c.want {
			t.Errorf("%s: %d %v, want %d", c.name, id, err, c.want)
		}
	}
	// The previous secret never signs.
	if _, err := before.Verify(during.Sign(4, time.Hour)); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("during signed with the previous secret: %v", err)
	}
}

func TestExpired(t *testing.T) {
	s, _ := NewSigner(testSecret)
	tok := s.Sign(1, time.Minute)
	s.now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	if _, err := s.Verify(tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("expired token accepted: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string // "" valid
	}{
		{Config{Secret: testSecret}, ""},
		{Config{Secret: testSecret, PreviousSecret: "previous-0123456789", Issuer: "i", Audience: "a"}, ""},
		{Config{Secret: "short"}, "FEED_JWT_SECRET must be at least 16 bytes, got 5"},
		{Config{Secret: testSecret, PreviousSecret: "short"}, "FEED_JWT_PREVIOUS_SECRET must be at least 16 bytes, got 5"},
		{Config{Secret: testSecret, PreviousSecret: testSecret}, "FEED_JWT_PREVIOUS_SECRET is the same as FEED_JWT_SECRET"},
	} {
		_, err := New(c.cfg)
		if got := fmt.Sprint(err); (c.want == "" && err != nil) || (c.want != "" && got != c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

// A verified token is remembered, but the memory never outlives exp, never
// answers for another string (tampered, other signer) and stays bounded.
func TestVerifiedCache(t *testing.T) {
	s, _ := NewSigner(testSecret)
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
		parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"1","exp":9999999999}`)) + "." + parts[2],
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

// BenchmarkVerify measures Verify on a token it has seen (cached: the
// path of every request after a client's first) and the full
// golang-jwt verification (uncached).
func BenchmarkVerify(b *testing.B) {
	s, _ := NewSigner(testSecret)
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
			if _, _, err := s.verify(tok); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A subject is a canonical decimal id: one spelling per user.
func TestNonCanonicalSubject(t *testing.T) {
	s, _ := NewSigner(testSecret)
	for _, sub := range []string{"+1", "0001", "01", "0", "-1", " 1", "1 ", "1e3", "9223372036854775808", ""} {
		tok := forge(t, jwt.SigningMethodHS256, []byte(testSecret), jwt.MapClaims{"sub": sub, "exp": in(time.Hour)})
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
