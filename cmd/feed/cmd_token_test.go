package main

import (
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/feedco/feed/internal/auth"
)

// `feed token` issues what `feed api` requires: exp from --ttl, and iss and
// aud when they are configured; a signer verifying with the old secret as
// FEED_JWT_PREVIOUS_SECRET accepts the tokens issued before a rotation.
func TestTokenCommand(t *testing.T) {
	t.Parallel()
	cfg := Config{JWTSecret: "token-command-secret-0123", JWTIssuer: "https://id.feed.test", JWTAudience: "feed-api"}
	code, out, stderr := runCLI(t, cfg, "token", "--user", "42", "--ttl", "90m")
	if code != 0 || stderr != "" {
		t.Fatalf("feed token: exit %d, stderr %q", code, stderr)
	}
	tok := strings.TrimSpace(out)
	var c jwt.RegisteredClaims
	if _, _, err := jwt.NewParser().ParseUnverified(tok, &c); err != nil {
		t.Fatalf("%q: %v", tok, err)
	}
	if c.Subject != "42" || c.Issuer != cfg.JWTIssuer || len(c.Audience) != 1 || c.Audience[0] != cfg.JWTAudience ||
		c.ExpiresAt == nil || c.IssuedAt == nil || c.ExpiresAt.Sub(c.IssuedAt.Time) != 90*time.Minute {
		t.Fatalf("claims %+v", c)
	}
	api, err := auth.New(cfg.JWT())
	if err != nil {
		t.Fatal(err)
	}
	if id, err := api.Verify(tok); err != nil || id != 42 {
		t.Fatalf("verify: %d %v", id, err)
	}

	rotated := cfg
	rotated.JWTSecret, rotated.JWTPreviousSecret = "token-command-secret-4567", cfg.JWTSecret
	s, err := auth.New(rotated.JWT())
	if err != nil {
		t.Fatal(err)
	}
	if id, err := s.Verify(tok); err != nil || id != 42 {
		t.Fatalf("after rotation: %d %v", id, err)
	}

	// A bad previous secret is a usage error naming its variable.
	bad := cfg
	bad.JWTPreviousSecret = "short"
	code, _, stderr = runCLI(t, bad, "token", "--user", "1")
	if code != exitUsage || !strings.Contains(stderr, "FEED_JWT_PREVIOUS_SECRET must be at least 16 bytes") {
		t.Fatalf("short previous secret: exit %d, stderr %q", code, stderr)
	}
}
