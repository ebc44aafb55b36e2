package status

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Cache gathers the Report at most once every TTL however many ask (the
// status page): a caller within TTL of the end of the last gathering gets
// its report,
// and callers that arrive during a gathering wait for it and share it.
type Cache struct {
	cfg Config
	ttl time.Duration
	sf  singleflight.Group

	mu     sync.Mutex
	report Report
	at     time.Time // when report's gathering ended; zero: none yet
}

// NewCache returns a Cache of cfg's status (ttl <= 0: one second).
func NewCache(cfg Config, ttl time.Duration) *Cache {
	if ttl <= 0 {
		ttl = time.Second
	}
	return &Cache{cfg: cfg, ttl: ttl}
}

// TTL is how long a report is served again.
func (c *Cache) TTL() time.Duration { return c.ttl }

// Status returns a report gathered less than TTL ago, gathering one when
// there is none. The gathering is not cancelled with ctx (others may wait
// for it); Config.Timeout bounds it.
func (c *Cache) Status(ctx context.Context) Report {
	c.mu.Lock()
	if !c.at.IsZero() && time.Since(c.at) < c.ttl {
		r := c.report
		c.mu.Unlock()
		return r
	}
	c.mu.Unlock()
	v, _, _ := c.sf.Do("", func() (any, error) {
		c.mu.Lock()
		if !c.at.IsZero() && time.Since(c.at) < c.ttl {
			r := c.report
			c.mu.Unlock()
			return r, nil
		}
		c.mu.Unlock()
		r := Gather(context.WithoutCancel(ctx), c.cfg)
		c.mu.Lock()
		c.report, c.at = r, time.Now()
		c.mu.Unlock()
		return r, nil
	})
	return v.(Report)
}
