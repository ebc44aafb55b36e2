// Package auth signs and verifies the HS256 bearer tokens that identify a
// caller: JWTs (RFC 7519) through github.com/golang-jwt/jwt/v5, with claims
// sub (user id, canonical decimal string: see ParseUserID), iat, exp
// (required) and, when configured, iss and aud.
package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/feedco/feed/internal/genmap"
)

// ErrInvalidToken covers every way a token can fail verification; callers
// answer 401 without saying which.
var ErrInvalidToken = errors.New("invalid token")

// MinSecretBytes is the shortest secret accepted (current or previous).
const MinSecretBytes = 16

// DevSecret is the development secret: the binaries' FEED_JWT_SECRET when
// it is unset, which `feed api` refuses unless told to accept it.
const DevSecret = "feed-development-secret-do-not-use-in-production"

// Config is what a Signer signs and verifies with.
type Config struct {
	// Secret signs every token and verifies them. At least 16 bytes.
	Secret string
	// PreviousSecret, if set, also verifies tokens (it never signs): the
	// secret being rotated out, so that tokens issued before a rotation
	// stay valid until they expire. At least 16 bytes, not Secret.
	PreviousSecret string
	// Issuer, if set, is written as iss by Sign, and Verify accepts only
	// tokens whose iss is exactly this.
	Issuer string
	// Audience, if set, is written as aud by Sign, and Verify accepts only
	// tokens whose aud (a string or a list) contains it.
	Audience string
}

// Validate reports the first setting that cannot work. The messages name
// the environment variables cmd/feed reads the settings from.
func (c Config) Validate() error {
	switch {
	case len(c.Secret) < MinSecretBytes:
		return fmt.Errorf("FEED_JWT_SECRET must be at least %d bytes, got %d", MinSecretBytes, len(c.Secret))
	case c.PreviousSecret != "" && len(c.PreviousSecret) < MinSecretBytes:
		return fmt.Errorf("FEED_JWT_PREVIOUS_SECRET must be at least %d bytes, got %d", MinSecretBytes, len(c.PreviousSecret))
	case c.PreviousSecret != "" && c.PreviousSecret == c.Secret:
		return errors.New("FEED_JWT_PREVIOUS_SECRET is the same as FEED_JWT_SECRET")
	}
	return nil
}

// claims are a token's claims: the registered ones, sub holding the user id.
type claims = jwt.RegisteredClaims

// strictClaims are claims whose dates (exp, iat, nbf) must be JSON
// numbers, as RFC 7519 §2 has them: golang-jwt also takes a numeric
// string ("exp":"1700000000"), which another verifier of the same token
// may read otherwise.
type strictClaims struct{ claims }

func (c *strictClaims) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	for _, k := range []string{"exp", "iat", "nbf"} {
		if v, ok := raw[k]; ok && (len(v) == 0 || v[0] < '0' || v[0] > '9') {
			return fmt.Errorf("claim %s is not a number", k)
		}
	}
	return json.Unmarshal(b, &c.claims)
}

// Signer issues and verifies tokens.
type Signer struct {
	cfg    Config
	now    func() time.Time
	keys   any // jwt.Keyfunc's answer: the secret, or both secrets
	parser *jwt.Parser
	cache  verifiedCache
}

// NewSigner is New with a secret and nothing else.
func NewSigner(secret string) (*Signer, error) { return New(Config{Secret: secret}) }

// New validates cfg and returns its Signer.
func New(cfg Config) (*Signer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Signer{cfg: cfg, now: time.Now}
	s.keys = []byte(cfg.Secret)
	if cfg.PreviousSecret != "" {
		s.keys = jwt.VerificationKeySet{Keys: []jwt.VerificationKey{[]byte(cfg.Secret), []byte(cfg.PreviousSecret)}}
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(), // an iat in the future is refused
		jwt.WithStrictDecoding(),
		jwt.WithTimeFunc(func() time.Time { return s.now() }),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	s.parser = jwt.NewParser(opts...)
	s.cache.init(VerifiedCacheSize)
	return s, nil
}

// Sign returns a token for userID valid for ttl (positive), signed with
// Config.Secret.
func (s *Signer) Sign(userID int64, ttl time.Duration) string {
	now := s.now()
	c := claims{
		Subject:   strconv.FormatInt(userID, 10),
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		Issuer:    s.cfg.Issuer,
	}
	if s.cfg.Audience != "" {
		c.Audience = jwt.ClaimStrings{s.cfg.Audience}
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(s.cfg.Secret))
	if err != nil { // HMAC with a []byte key does not fail
		panic(fmt.Sprintf("auth: sign: %v", err))
	}
	return tok
}

// Verify returns the user id of a valid token: signed HS256 with the
// secret or the previous secret, exp present and in the future, nbf (if
// present) not in the future, iss and aud as configured, sub a canonical
// user id.
//
// A token verified once is remembered (see verifiedCache): every request
// of a client carries the same token, and verifying it (base64, HMAC,
// JSON) is a visible share of the CPU of a feed read (BenchmarkVerify
// measures both paths). The cache holds exact token strings this signer
// verified, so a forged or altered token never matches an entry; an entry
// is used only before its token's exp.
func (s *Signer) Verify(token string) (int64, error) {
	now := s.now().Unix()
	if id, ok := s.cache.get(token, now); ok {
		return id, nil
	}
	id, exp, err := s.verify(token)
	if err != nil {
		return 0, err
	}
	s.cache.put(token, id, exp)
	return id, nil
}

// verify checks token from scratch and returns its user id and exp (unix
// seconds).
func (s *Signer) verify(token string) (id, exp int64, err error) {
	var c strictClaims
	tok, err := s.parser.ParseWithClaims(token, &c, s.keyfunc)
	if err != nil {
		return 0, 0, ErrInvalidToken
	}
	if _, ok := tok.Header["crit"]; ok {
		// RFC 7515 §4.1.11: a header parameter the token says must be
		// understood; this verifier understands no extension.
		return 0, 0, ErrInvalidToken
	}
	id, ok := ParseUserID(c.Subject)
	if !ok || c.ExpiresAt == nil {
		return 0, 0, ErrInvalidToken
	}
	return id, c.ExpiresAt.Unix(), nil
}

func (s *Signer) keyfunc(*jwt.Token) (any, error) { return s.keys, nil }

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
	id, exp int64 // exp in unix seconds
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
	if !ok || now >= v.exp {
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
