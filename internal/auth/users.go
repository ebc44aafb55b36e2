package auth

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/internal/genmap"
)

// ParseUserID parses a user id as tokens and the trusted header carry it:
// canonical decimal, 1 to 19 digits without sign, leading zero or space,
// within int64. One spelling per user keeps "+1" and "0001" from acting as
// user 1.
func ParseUserID(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 19 || s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return id, true
}

// RowQuerier is the part of a pgx pool (or connection) Users needs.
type RowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// UsersCacheSize bounds how many known user ids a Users remembers (about
// 50 bytes each).
const UsersCacheSize = 1 << 18

// DefaultKnownUserTTL is how long Users remembers that a user exists.
// Users are never deleted, so this only bounds how stale a cache can be
// if one ever is.
const DefaultKnownUserTTL = 10 * time.Minute

// Users answers whether a user id is registered (the users table), so that
// a valid token or trusted header for an id nobody registered is refused.
// It remembers the ids it found for a while (a sharded, bounded map like
// the verified-token cache), so that a caller's requests after the first
// add no query. It never remembers an id it did not find: a user may
// register right after.
type Users struct {
	db     RowQuerier
	ttl    time.Duration
	now    func() time.Time
	shards [16]usersShard
}

type usersShard struct {
	mu sync.RWMutex
	m  genmap.Map[int64, int64] // user id -> unix nanoseconds until which it is known
	_  [24]byte                 // keep shards' locks on separate cache lines
}

// NewUsers returns a Users over db remembering found ids for ttl (0: the
// default).
func NewUsers(db RowQuerier, ttl time.Duration) (*Users, error) {
	if db == nil {
		return nil, errors.New("auth: nil database for Users")
	}
	if ttl < 0 {
		return nil, fmt.Errorf("auth: known-user ttl %v: want positive", ttl)
	}
	if ttl == 0 {
		ttl = DefaultKnownUserTTL
	}
	u := &Users{db: db, ttl: ttl, now: time.Now}
	half := max(UsersCacheSize/2/len(u.shards), 1)
	for i := range u.shards {
		u.shards[i] = usersShard{m: genmap.New[int64, int64](half)}
	}
	return u, nil
}

// UserExists reports whether id is a registered user: from memory when it
// was found within the ttl, else from the users table.
func (u *Users) UserExists(ctx context.Context, id int64) (bool, error) {
	sh := &u.shards[uint64(id)%uint64(len(u.shards))]
	now := u.now().UnixNano()
	if until, ok := sh.m.GetShared(&sh.mu, id); ok && now < until {
		return true, nil
	}
	var found bool
	err := u.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM users WHERE id = $1)`, id).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("look up user %d: %w", id, err)
	}
	if found {
		sh.mu.Lock()
		sh.m.Put(id, now+int64(u.ttl))
		sh.mu.Unlock()
	}
	return found, nil
}
