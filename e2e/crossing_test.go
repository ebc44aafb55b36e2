package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// A downward celebrity crossing while the inbox projector is down: the
// followers projector takes the star out of the celebrity set (no more
// pull), and the backfill that puts the star's posts into the followers'
// inboxes (they were pulled, never pushed) waits for the inbox group.
// The reader's feed must keep the star's posts all along: pulled while
// the crossing is pending, pushed once the backfill has landed.
func TestCrossingDownWhileInboxDown(t *testing.T) {
	t.Parallel()
	testCrossingDownWhileInboxDown(t)
}

func testCrossingDownWhileInboxDown(t *testing.T) {
	pol := policies{CelebrityThreshold: 3, InboxMax: 20, InboxTrimSlack: 3, TimelineMax: 15, BackfillPosts: 5,
		FanoutBatch: 4, CacheTTL: 300 * time.Millisecond}
	s := startSystem(t, pol)
	a := userAPI{t, s}
	ctx := context.Background()
	reader, rtok := a.newUser("reader")
	star, stok := a.newUser("star")
	a.do(http.MethodPut, fmt.Sprint("/api/following/", star), rtok, nil, http.StatusNoContent)
	var fans []string
	for i := range 3 { // 4 followers: a celebrity
		_, tok := a.newUser(fmt.Sprint("fan", i))
		a.do(http.MethodPut, fmt.Sprint("/api/following/", star), tok, nil, http.StatusNoContent)
		fans = append(fans, tok)
	}
	a.feedMatchesTruth("first read", reader, rtok) // the reader is active
	// The follows' backfills read PostgreSQL when they are handled: let
	// them run before the star posts.
	s.quiesce(t, 2*time.Minute)
	var starPosts []int64
	for i := range 3 {
		starPosts = append(starPosts, mustID(t, a.post(stok, fmt.Sprint("star ", i)).ID))
	}
	s.quiesce(t, 2*time.Minute)
	if feed := a.feedMatchesTruth("a celebrity", reader, rtok); countByAuthor(feed, star) != 3 {
		t.Fatalf("a celebrity: %d posts of the star in the feed, want 3", countByAuthor(feed, star))
	}
	if in := inboxPosts(t, s, reader); slices.ContainsFunc(starPosts, func(p int64) bool { return slices.Contains(in, p) }) {
		t.Fatalf("a celebrity's posts were pushed: inbox %v", in)
	}

	// The inbox projector goes down; two fans leave (4 -> 2 < 3).
	s.StopProjectors()
	s.StartProjectorsExcept(t, projections.NameInbox)
	for _, tok := range fans[:2] {
		a.do(http.MethodDelete, fmt.Sprint("/api/following/", star), tok, nil, http.StatusNoContent)
	}
	celebs := readmodel.NewCelebrities(s.Keys)
	testenv.Eventually(t, time.Minute, "the followers projector took the star out of the celebrity set", func() bool {
		lv, err := celebs.Leaving(ctx, s.Redis)
		return err == nil && lv[fmt.Sprint(star)] != "" && !s.Redis.SIsMember(ctx, s.Keys.Celebrities(), fmt.Sprint(star)).Val()
	})
	time.Sleep(pol.CacheTTL + 100*time.Millisecond) // the query side's celebrity cache
	if feed := a.feedMatchesTruth("crossing pending", reader, rtok); countByAuthor(feed, star) != 3 {
		t.Fatalf("crossing pending: %d posts of the star in the feed, want 3", countByAuthor(feed, star))
	}
	if in := inboxPosts(t, s, reader); slices.ContainsFunc(starPosts, func(p int64) bool { return slices.Contains(in, p) }) {
		t.Fatalf("the star's posts reached the inbox with the inbox projector down: %v", in)
	}
	if got := gaugeValue(t, s.Feed.Metrics().CrossingsPending); got != 1 {
		t.Fatalf("feed_query_celebrity_crossings_pending = %v with the crossing pending, want 1", got)
	}

	// The inbox projector comes back: the backfill lands, the pull stops.
	s.StopProjectors()
	s.StartProjectors(t)
	s.quiesce(t, 2*time.Minute)
	in := inboxPosts(t, s, reader)
	for _, p := range starPosts {
		if !slices.Contains(in, p) {
			t.Fatalf("after the backfill: post %d of the star not in the reader's inbox %v", p, in)
		}
	}
	if feed := a.feedMatchesTruth("backfilled", reader, rtok); countByAuthor(feed, star) != 3 {
		t.Fatalf("backfilled: %d posts of the star in the feed, want 3", countByAuthor(feed, star))
	}
	if got := gaugeValue(t, s.Feed.Metrics().CrossingsPending); got != 0 {
		t.Fatalf("feed_query_celebrity_crossings_pending = %v after the backfill, want 0", got)
	}
}

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}
