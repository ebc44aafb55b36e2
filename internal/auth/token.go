// Package auth signs and verifies the HS256 bearer tokens that identify a
// caller. It is a minimal JWT: header {"alg":"HS256","typ":"JWT"}, claims
// sub (user id, canonical decimal string: see ParseUserID), iat and exp.
package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/feedco/feed/internal/genmap"
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

// encodedHeader is the header part of every token Sign issues.
var encodedHeader = b64.EncodeToString([]byte(header))

// Signer issues and verifies tokens with one secret.
type Signer struct {
	secret []byte
	now    func() time.Time
	macs   sync.Pool // keyed HMAC-SHA256 states, reset before use
	cache  verifiedCache
}

// NewSigner refuses secrets shorter than 16 bytes.
func NewSigner(secret string) (*Signer, error) {
	if len(secret) < 16 {
		return nil, fmt.Errorf("FEED_JWT_SECRET must be at least 16 bytes, got %d", len(secret))
	}
	s := &Signer{secret: []byte(secret), now: time.Now}
	s.macs.New = func() any { return hmac.New(sha256.New, s.secret) }
	s.cache.init(VerifiedCacheSize)
	return s, nil
}

// Sign returns a token for userID valid for ttl.
func (s *Signer) Sign(userID int64, ttl time.Duration) string {
	now := s.now()
	c, _ := json.Marshal(claims{Sub: strconv.FormatInt(userID, 10), Iat: now.Unix(), Exp: now.Add(ttl).Unix()})
	signing := b64.EncodeToString([]byte(header)) + "." + b64.EncodeToString(c)
	return signing + "." + b64.EncodeToString(s.mac(signing))
}

// Verify returns the user id of a valid, unexpired token.
//
// A token verified once is remembered (see verifiedCache): every request
// of a client carries the same token, and verifying it (base64, HMAC,
// JSON) is a visible share of the CPU of a feed read. The cache holds
// exact token strings this signer verified, so a forged or altered token
// never matches an entry; an entry is used only before its token's exp.
func (s *Signer) Verify(token string) (int64, error) {
	now := s.now().Unix()
	if id, ok := s.cache.get(token, now); ok {
		return id, nil
	}
	id, exp, err := s.verify(token, now)
	if err != nil {
		return 0, err
	}
	s.cache.put(token, id, exp)
	return id, nil
}

// verify checks token from scratch at now (unix seconds) and returns its
// user id and exp.
func (s *Signer) verify(token string, now int64) (id, exp int64, err error) {
	h, rest, ok1 := strings.Cut(token, ".")
	claimsPart, sigPart, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || strings.Contains(sigPart, ".") {
		return 0, 0, ErrInvalidToken
	}
	sig, err := b64.DecodeString(sigPart)
	if err != nil || !hmac.Equal(sig, s.mac(token[:len(h)+1+len(claimsPart)])) {
		return 0, 0, ErrInvalidToken
	}
	if h != encodedHeader { // the header Sign writes needs no decoding
		hb, err := b64.DecodeString(h)
		if err != nil {
			return 0, 0, ErrInvalidToken
		}
		var hd struct {
			Alg string `json:"alg"`
		}
		if json.Unmarshal(hb, &hd) != nil || hd.Alg != "HS256" {
			return 0, 0, ErrInvalidToken
		}
	}
	cb, err := b64.DecodeString(claimsPart)
	if err != nil {
		return 0, 0, ErrInvalidToken
	}
	var c claims
	if json.Unmarshal(cb, &c) != nil {
		return 0, 0, ErrInvalidToken
	}
	if c.Exp != 0 && now >= c.Exp {
		return 0, 0, ErrInvalidToken
	}
	id, ok := ParseUserID(c.Sub)
	if !ok {
		return 0, 0, ErrInvalidToken
	}
	return id, c.Exp, nil
}

func (s *Signer) mac(msg string) []byte {
	m := s.macs.Get().(hash.Hash)
	m.Reset()
	m.Write([]byte(msg))
	sum := m.Sum(nil)
	s.macs.Put(m)
	return sum
}

// VerifiedCacheSize bounds how many verified tokens a Signer remembers
// (about 250 bytes each with a 150-byte token: 16 MB at most).
const VerifiedCacheSize = 65536

// verifiedCache remembers tokens already verified: token -> user id and
// exp. Bounded like the query side's caches (genmap): per shard, two
// generations of at most half the shard's share each.
type verifiedCache struct {
	shards [16]verifiedShard
}

type verifiedShard struct {
	mu sync.RWMutex
	m  genmap.Map[string, verifiedToken]
	_  [24]byte // keep shards' locks on separate cache lines
}

type verifiedToken struct {
	id, exp int64 // exp 0: none
}

func (c *verifiedCache) init(size int) {
	half := max(size/2/len(c.shards), 1)
	for i := range c.shards {
		c.shards[i] = verifiedShard{m: genmap.New[string, verifiedToken](half)}
	}
}

func (c *verifiedCache) shard(token string) *verifiedShard {
	// FNV-1a of the signature's last bytes (uniformly distributed, but the
	// very last base64 character of 32 bytes carries only 2 bits).
	h := uint32(2166136261)
	for i := max(len(token)-8, 0); i < len(token); i++ {
		h = (h ^ uint32(token[i])) * 16777619
	}
	return &c.shards[h%uint32(len(c.shards))]
}

// get returns the user id of token if it was verified and expires after
// now (unix seconds).
func (c *verifiedCache) get(token string, now int64) (int64, bool) {
	sh := c.shard(token)
	v, ok := sh.m.GetShared(&sh.mu, token)
	if !ok || (v.exp != 0 && now >= v.exp) {
		return 0, false
	}
	return v.id, true
}

func (c *verifiedCache) put(token string, id, exp int64) {
	sh := c.shard(token)
	sh.mu.Lock()
	sh.m.Put(strings.Clone(token), verifiedToken{id: id, exp: exp}) // not the request's header memory
	sh.mu.Unlock()
}

// len is the number of remembered tokens.
func (c *verifiedCache) len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.RLock()
		n += sh.m.Len()
		sh.mu.RUnlock()
	}
	return n
}
