package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/internal/auth"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/status"
	"github.com/feedco/feed/testkit/systest"
)

// policies are the knobs of the system under test. They are set low so a
// small workload reaches every path: celebrities (pull), trims and floors
// (PostgreSQL continuation), timelines past their bound.
type policies struct {
	CelebrityThreshold int64
	InboxMax           int
	InboxTrimSlack     int
	TimelineMax        int
	BackfillPosts      int
	FanoutBatch        int
	CacheTTL           time.Duration
	RedisCluster       bool          // the read models on the local Redis Cluster
	RefreshSettle      time.Duration // the refresh horizon (0: the query side's default)
	OnlineRefresh      time.Duration // projections.Config.OnlineRefresh (0: its default)
}

func (p policies) String() string {
	return fmt.Sprintf("celebrity threshold %d, inbox max %d (+%d slack), timeline max %d, backfill %d, fan-out batch %d, cache TTL %v, redis cluster %v",
		p.CelebrityThreshold, p.InboxMax, p.InboxTrimSlack, p.TimelineMax, p.BackfillPosts, p.FanoutBatch, p.CacheTTL, p.RedisCluster)
}

// system is the whole pipeline in this process (systest), on a test's own
// database, Redis prefix, broker and topic, with the HTTP API in front.
type system struct {
	*systest.System
	pol     policies
	signer  *auth.Signer
	baseURL string
	http    *http.Client
}

const jwtSecret = "e2e-oracle-secret-0123456789abcdef"

// startSystem starts everything and stops it, in reverse order, when the
// test ends.
func startSystem(t testing.TB, pol policies) *system {
	t.Helper()
	s := &system{pol: pol, System: systest.Start(t, systest.Config{
		Name:       "e2e",
		Partitions: 12,
		Projections: projections.Config{
			CelebrityThreshold: pol.CelebrityThreshold,
			InboxMax:           pol.InboxMax,
			InboxTrimSlack:     pol.InboxTrimSlack,
			TimelineMax:        pol.TimelineMax,
			BackfillPosts:      pol.BackfillPosts,
			FanoutBatch:        pol.FanoutBatch,
			OnlineRefresh:      pol.OnlineRefresh,
		},
		CacheTTL:      pol.CacheTTL,
		RedisCluster:  pol.RedisCluster,
		RefreshSettle: pol.RefreshSettle,
	})}

	// The API over httptest.
	var err error
	s.signer, err = auth.NewSigner(jwtSecret)
	if err != nil {
		t.Fatal(err)
	}
	users, err := auth.NewUsers(s.DB.Pool, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Config{RequestTimeout: 30 * time.Second}, api.Deps{
		Commands: s.Commands, Tokens: s.signer, Users: users, Feed: s.Feed, Logger: s.Log,
		Ready: map[string]func(context.Context) error{"postgres": s.DB.Pool.Ping},
		Status: status.NewCache(status.Config{Pool: s.DB.Pool, Redis: s.Redis, Kafka: s.Broker.Conn(), Topic: s.Topic,
			Slot: s.Slot, GroupPrefix: s.GroupPrefix, Prefix: s.Prefix, LagWarnBytes: 1 << 30}, time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	s.baseURL = hs.URL
	s.http = &http.Client{
		Timeout:   60 * time.Second,
		Transport: &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64},
	}
	return s
}

// quiesce waits until everything written so far has gone all the way
// through: CDC has confirmed (after Kafka acknowledged) a WAL position taken
// after the last write, every consumer group has committed the end of every
// partition (lag 0, as `feed status` reports it), and the query side's
// in-process caches have outlived their TTL.
func (s *system) quiesce(t testing.TB, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	lsn := s.WaitCDC(t, timeout)
	cdcAt := time.Since(start)
	s.WaitConsumed(t, timeout-cdcAt)
	s.LogProjectionStats(t)
	t.Logf("quiescent: CDC confirmed %s after %v, consumer lag 0 after %v; waiting %v for the query caches",
		lsn, cdcAt.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), s.pol.CacheTTL)
	time.Sleep(s.pol.CacheTTL + 100*time.Millisecond) // a TTL passes: the query caches
}
