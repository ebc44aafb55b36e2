// Package auth signs and verifies the HS256 bearer tokens that identify a
// caller. It is a minimal JWT: header {"alg":"HS256","typ":"JWT"}, claims
// sub (user id, decimal string), iat and exp.
package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidToken covers every way a token can fail verification; callers
// answer 401 without saying which.
var ErrInvalidToken = errors.New("invalid token")

var b64 = base64.RawURLEncoding

const header = `{"alg":"HS256","typ":"JWT"}`

type claims struct {
	Sub string `json:"sub"`
	Iat int64  `json:"iat"`
	Exp int64  `json:"exp"`
}

// Signer issues and verifies tokens with one secret.
type Signer struct {
	secret []byte
	now    func() time.Time
}

// NewSigner refuses secrets shorter than 16 bytes.
func NewSigner(secret string) (*Signer, error) {
	if len(secret) < 16 {
		return nil, fmt.Errorf("FEED_JWT_SECRET must be at least 16 bytes, got %d", len(secret))
	}
	return &Signer{secret: []byte(secret), now: time.Now}, nil
}

// Sign returns a token for userID valid for ttl.
func (s *Signer) Sign(userID int64, ttl time.Duration) string {
	now := s.now()
	c, _ := json.Marshal(claims{Sub: strconv.FormatInt(userID, 10), Iat: now.Unix(), Exp: now.Add(ttl).Unix()})
	signing := b64.EncodeToString([]byte(header)) + "." + b64.EncodeToString(c)
	return signing + "." + b64.EncodeToString(s.mac(signing))
}

// Verify returns the user id of a valid, unexpired token.
func (s *Signer) Verify(token string) (int64, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return 0, ErrInvalidToken
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil || !hmac.Equal(sig, s.mac(parts[0]+"."+parts[1])) {
		return 0, ErrInvalidToken
	}
	hb, err := b64.DecodeString(parts[0])
	if err != nil {
		return 0, ErrInvalidToken
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if json.Unmarshal(hb, &h) != nil || h.Alg != "HS256" {
		return 0, ErrInvalidToken
	}
	cb, err := b64.DecodeString(parts[1])
	if err != nil {
		return 0, ErrInvalidToken
	}
	var c claims
	if json.Unmarshal(cb, &c) != nil {
		return 0, ErrInvalidToken
	}
	if c.Exp != 0 && s.now().Unix() >= c.Exp {
		return 0, ErrInvalidToken
	}
	id, err := strconv.ParseInt(c.Sub, 10, 64)
	if err != nil || id <= 0 {
		return 0, ErrInvalidToken
	}
	return id, nil
}

func (s *Signer) mac(msg string) []byte {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte(msg))
	return m.Sum(nil)
}
