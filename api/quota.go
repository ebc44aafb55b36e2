package api

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/readmodel"
)

// Quotas: per caller, shared by every API process through Redis
// (go-redis/redis_rate's GCRA, one key per caller and quota, expiring on
// its own): writes per minute and reads per second per user, and
// registrations per hour per client address (the one anonymous write).
// A quota is checked once the caller is known, before the body is read or
// a slot taken (admission.go). Every answer of a route under a quota
// carries the IETF draft's fields (draft-ietf-httpapi-ratelimit-headers):
//
//	RateLimit-Policy: "writes";q=60;w=60
//	RateLimit: "writes";r=59;t=1
//
// (q requests per w seconds; r left, the quota whole again in t seconds).
// Past it the request is 429 `rate-limited` with Retry-After, having done
// nothing. When Redis cannot answer, quotas are not enforced for a second
// (logged): they protect the service, and Redis down must not refuse it.

// quota is one of the server's quotas.
type quota struct {
	name  string // the policy's name in the headers, and the key's kind
	limit redis_rate.Limit
	// policy is the RateLimit-Policy value, made once.
	policy []string
}

func newQuota(name string, rate int, period time.Duration) *quota {
	if rate <= 0 {
		return nil
	}
	return &quota{name: name, limit: redis_rate.Limit{Rate: rate, Burst: rate, Period: period},
		policy: []string{fmt.Sprintf("%q;q=%d;w=%d", name, rate, int(period.Seconds()))}}
}

// quotas are the server's quotas and their store.
type quotas struct {
	limiter               *redis_rate.Limiter // nil: no quotas
	keys                  readmodel.Keys
	writes, reads, signup *quota
	skipUntil             atomic.Int64 // unix nanoseconds: Redis failed, quotas off until then
	refused               *prometheus.CounterVec
	unchecked             prometheus.Counter
}

func (q *quotas) register(reg prometheus.Registerer) error {
	q.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "feed_http_quota_refused_total",
		Help: "Requests answered 429 rate-limited, by quota (writes, reads, registrations).",
	}, []string{"quota"})
	q.unchecked = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "feed_http_quota_unchecked_total",
		Help: "Requests served without their quota checked because Redis could not answer.",
	})
	for _, c := range []prometheus.Collector{q.refused, q.unchecked} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// rateLimitedError is a request past its quota.
type rateLimitedError struct {
	quota      string
	retryAfter time.Duration
}

func (e *rateLimitedError) Error() string {
	return "past the " + e.quota + " quota"
}

// retryAfterHeader is the Retry-After of a rateLimitedError: whole
// seconds, at least 1.
func (e *rateLimitedError) retryAfterHeader() string {
	return strconv.Itoa(max(1, int(math.Ceil(e.retryAfter.Seconds()))))
}

// check spends one request of q for subject, sets the RateLimit fields on
// w, and returns a *rateLimitedError past the quota. It returns nil
// without checking when q is nil or Redis does not answer.
func (s *Server) checkQuota(ctx context.Context, w http.ResponseWriter, q *quota, subject string) error {
	qs := &s.quotas
	if q == nil || qs.limiter == nil || time.Now().UnixNano() < qs.skipUntil.Load() {
		return nil
	}
	res, err := qs.limiter.Allow(ctx, qs.keys.Quota(q.name, subject), q.limit)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		qs.unchecked.Inc()
		if qs.skipUntil.Swap(time.Now().Add(time.Second).UnixNano()) < time.Now().UnixNano() {
			s.log.Warn("api: quotas not enforced for a second: Redis did not answer", "err", err)
		}
		return nil
	}
	h := w.Header()
	h["Ratelimit-Policy"] = q.policy
	reset := max(res.ResetAfter, res.RetryAfter)
	h["Ratelimit"] = []string{fmt.Sprintf("%q;r=%d;t=%d", q.name, max(res.Remaining, 0), int(math.Ceil(reset.Seconds())))}
	if res.Allowed == 0 {
		qs.refused.WithLabelValues(q.name).Inc()
		return &rateLimitedError{quota: q.name, retryAfter: res.RetryAfter}
	}
	return nil
}

// clientAddr is the address a registration quota counts against: the
// connection's, or in trusted-header mode, for a request from the
// gateway, the last address of X-Forwarded-For (the one the gateway
// appended).
func (s *Server) clientAddr(r *http.Request) string {
	if s.cfg.AuthMode == AuthTrustedHeader && s.gateway.allows(r) {
		if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
			last := xff[len(xff)-1]
			if i := strings.LastIndexByte(last, ','); i >= 0 {
				last = last[i+1:]
			}
			if a, err := netip.ParseAddr(strings.TrimSpace(last)); err == nil {
				return a.Unmap().String()
			}
		}
	}
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap().WithZone("").String()
	}
	return r.RemoteAddr
}

// init sets the quotas of cfg on rdb (nil: none).
func (q *quotas) init(cfg Config, rdb redis.UniversalClient, keys readmodel.Keys) {
	q.keys = keys
	q.writes = newQuota("writes", cfg.WritesPerMinute, time.Minute)
	q.reads = newQuota("reads", cfg.ReadsPerSecond, time.Second)
	q.signup = newQuota("registrations", cfg.RegistrationsPerHour, time.Hour)
	if rdb != nil && (q.writes != nil || q.reads != nil || q.signup != nil) {
		q.limiter = redis_rate.NewLimiter(rdb)
	}
}
