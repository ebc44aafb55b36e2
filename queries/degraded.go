package queries

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"golang.org/x/sync/semaphore"

	"github.com/feedco/feed/internal/transient"
)

// What the read side does while Redis is down: reads are answered from
// PostgreSQL (the source of truth), a bounded number at a time, and marked
// degraded; the Redis writes of the post commands (a new post's
// newest-post marker, an edit's body) are skipped at once. Two circuit
// breakers (sony/gobreaker), one for reads and one for those writes,
// open after a few consecutive Redis connection failures, so that neither
// a read nor a post waits on a Redis that is not there; after
// RedisBreakerOpen one probe is let through (half-open) and its outcome
// closes or reopens the circuit.

// ErrRedisUnavailable is matched (errors.Is) by the errors of reads and
// writes that failed because Redis could not be used (transient.RedisDown)
// or because its circuit is open.
var ErrRedisUnavailable = errors.New("redis unavailable")

// ErrCircuitOpen is what PostCreated and PostEdited return when they
// skipped their Redis write because the write circuit is open: the post
// is committed, and the projectors make it visible when Redis is back. It matches
// ErrRedisUnavailable.
var ErrCircuitOpen = fmt.Errorf("%w: circuit open", ErrRedisUnavailable)

// ErrFallbackBusy is returned by a read that needed the PostgreSQL
// fallback (Redis unavailable) when FallbackReads reads already use it and
// none ended within fallbackWait: the api answers 503.
var ErrFallbackBusy = errors.New("the PostgreSQL fallback of the read side is at capacity")

// fallbackWait is how long a degraded read waits for a fallback slot.
const fallbackWait = 100 * time.Millisecond

// redisErr marks err as Redis being unavailable when it is one
// (transient.RedisDown), so Home and AuthorPosts fall back to PostgreSQL
// on it and on nothing else (a PostgreSQL failure of the same page is not
// answered by asking PostgreSQL again).
func redisErr(err error) error {
	if err != nil && !errors.Is(err, ErrRedisUnavailable) && transient.RedisDown(err) {
		return fmt.Errorf("%w: %w", ErrRedisUnavailable, err)
	}
	return err
}

// breaker is a circuit in front of one kind of Redis call.
type breaker = gobreaker.TwoStepCircuitBreaker[struct{}]

// newBreaker returns the circuit called name ("reads" or "writes"): it
// opens after failures consecutive failures (as failed says), for open,
// then lets one probe through.
func newBreaker(name string, failures int, open time.Duration, failed func(error) bool, log *slog.Logger, state *prometheus.GaugeVec) *breaker {
	g := state.WithLabelValues(name)
	return gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        name,
		MaxRequests: 1,
		Timeout:     open,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= uint32(failures) },
		IsSuccessful: func(err error) bool {
			return !failed(err)
		},
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
		OnStateChange: func(name string, from, to gobreaker.State) {
			g.Set(float64(to))
			if to == gobreaker.StateOpen {
				log.Warn("queries: Redis circuit open", "calls", name, "for", open)
			} else if to == gobreaker.StateClosed {
				log.Info("queries: Redis circuit closed", "calls", name)
			}
		},
	})
}

// readFailed counts a read as failed for its circuit when Redis was
// unavailable to it (not when PostgreSQL failed, nor for a bad cursor).
func readFailed(err error) bool { return errors.Is(err, ErrRedisUnavailable) }

// writeFailed counts a post command's Redis write as failed when Redis was unavailable
// or did not answer within writeThroughTimeout.
func writeFailed(err error) bool {
	return transient.RedisDown(err) || errors.Is(err, context.DeadlineExceeded)
}

// CircuitStates are the states of the read side's two Redis circuits:
// "closed" (Redis in use), "open" (skipped) or "half-open" (probing).
type CircuitStates struct {
	Reads, Writes string
}

// Circuits returns the Redis circuits' states, so tests and operators can
// tell a skipped Redis from a slow one (the metric
// feed_query_redis_circuit_state says the same).
func (f *Feed) Circuits() CircuitStates {
	return CircuitStates{Reads: f.readCircuit.State().String(), Writes: f.writeCircuit.State().String()}
}

// guarded runs read through the read circuit; when Redis is unavailable
// (the circuit is open, or read failed on it) the page comes from
// PostgreSQL instead (fallback), marked Degraded.
func (f *Feed) guarded(ctx context.Context, query string, limit int, read func() (Page, error), fallback func(ctx context.Context, n int) ([]item, error)) (Page, error) {
	return f.guardedPage(ctx, query, read, func(ctx context.Context) (Page, error) {
		items, err := fallback(ctx, limit+1)
		if err != nil {
			return Page{}, err
		}
		return makePage(items, limit), nil
	})
}

// guardedPage is guarded with a fallback that makes its page itself.
func (f *Feed) guardedPage(ctx context.Context, query string, read func() (Page, error), fallback func(ctx context.Context) (Page, error)) (Page, error) {
	done, err := f.readCircuit.Allow()
	if err == nil {
		p, err := read()
		done(err)
		if !errors.Is(err, ErrRedisUnavailable) {
			return p, err
		}
		f.log.Debug("queries: Redis unavailable: page from PostgreSQL", "query", query, "err", err)
	}
	return f.degraded(ctx, query, fallback)
}

// degraded reads a page from PostgreSQL alone, at most FallbackReads at a
// time in the process (ErrFallbackBusy beyond, after fallbackWait).
func (f *Feed) degraded(ctx context.Context, query string, fallback func(ctx context.Context) (Page, error)) (Page, error) {
	wctx, cancel := context.WithTimeout(ctx, fallbackWait)
	err := f.fallback.Acquire(wctx, 1)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return Page{}, ctx.Err()
		}
		f.metrics.Sources.WithLabelValues(query, "refused").Inc()
		return Page{}, ErrFallbackBusy
	}
	defer f.fallback.Release(1)
	p, err := fallback(ctx)
	if err != nil {
		return Page{}, err
	}
	f.metrics.Sources.WithLabelValues(query, "degraded").Inc()
	p.Degraded = true
	return p, nil
}

// newFallback bounds the concurrent PostgreSQL fallbacks.
func newFallback(n int) *semaphore.Weighted { return semaphore.NewWeighted(int64(n)) }
