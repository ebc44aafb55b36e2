package status

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/feedco/feed/testkit/testenv"
	"github.com/feedco/feed/verify"
)

// The Cache gathers once for every caller within its TTL, concurrent ones
// included, and again after it.
func TestCacheGathersOncePerTTL(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	c := NewCache(Config{Pool: db.Pool, RedisErr: errors.New("none in this test"), Topic: "t", Slot: "s"}, time.Hour)
	first := c.Status(context.Background())
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := c.Status(context.Background()); !r.GeneratedAt.Equal(first.GeneratedAt) {
				t.Errorf("gathered again within the TTL: %v then %v", first.GeneratedAt, r.GeneratedAt)
			}
		}()
	}
	wg.Wait()
	c.mu.Lock()
	c.at = c.at.Add(-2 * time.Hour) // the TTL has passed
	c.mu.Unlock()
	if r := c.Status(context.Background()); r.GeneratedAt.Equal(first.GeneratedAt) {
		t.Error("not gathered again after the TTL")
	}
	if got := first.Failed(); strings.Join(got, ",") != "projections,poison,redis" {
		t.Errorf("failed sections %v, want projections, poison and redis (no Redis, no Kafka)", got)
	}
}

// A recorded verification shows in the verify section, the newest first,
// with its first difference; a later run of a source replaces its row.
func TestVerifySectionShowsTheLastResults(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	cfg := Config{Pool: db.Pool}
	var out bytes.Buffer
	if err := GatherVerify(ctx, cfg).WriteText(&out, time.Now()); err != nil || !strings.Contains(out.String(), "none recorded yet") {
		t.Fatalf("no result yet: %v\n%s", err, out.String())
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	rep := verify.Report{Users: 3, Posts: 9, Differences: []verify.Difference{{User: 5, Kind: "missing", Post: 8, Text: "post 8 missing"}}}
	for _, r := range []verify.Result{
		verify.NewResult(verify.SourcePeriodic, verify.Report{Users: 1}, nil, now.Add(-time.Minute), time.Second),
		verify.NewResult(verify.SourceCommand, verify.Report{}, errors.New("boom"), now.Add(-30*time.Second), time.Second),
		verify.NewResult(verify.SourceCommand, rep, nil, now, 2*time.Second),
	} {
		if err := verify.SaveResult(ctx, db.Pool, r); err != nil {
			t.Fatal(err)
		}
	}
	v := GatherVerify(ctx, cfg)
	if v.Error != "" || len(v.Results) != 2 {
		t.Fatalf("%+v, want two results", v)
	}
	c, p := v.Results[0], v.Results[1]
	if c.Source != "command" || c.Result != "differences" || c.Differences != 1 || c.Users != 3 || c.Posts != 9 ||
		!c.FinishedAt.Equal(now) || c.TookSeconds != 2 || !strings.Contains(c.Detail, "post 8 missing") {
		t.Errorf("command result %+v", c)
	}
	if p.Source != "periodic" || p.Result != "ok" || p.Users != 1 {
		t.Errorf("periodic result %+v", p)
	}
	out.Reset()
	_ = v.WriteText(&out, now)
	if !strings.Contains(out.String(), "command   DIFFERENCES") || !strings.Contains(out.String(), "periodic  ok") {
		t.Errorf("text:\n%s", out.String())
	}
}

// The running rebuild's self-description becomes the model, its counts
// shown in the text.
func TestRebuildOf(t *testing.T) {
	t.Parallel()
	b := rebuildOf(map[string]string{"projection": "inbox", "version": "3", "phase": "build", "started": "2026-01-02T03:04:05Z",
		"stage": "inbox v3 build: write inboxes", "unit": "active users", "done": "250", "total": "1000", "lag": "-1"})
	if b.Version != 3 || b.Done != 250 || b.Total != 1000 || b.CatchUpLag != nil || b.Started == nil || b.Started.Year() != 2026 {
		t.Fatalf("%+v", b)
	}
	if got := b.Progress(); got != "inbox v3 build: write inboxes 250/1000 active users (25%)" {
		t.Errorf("progress %q", got)
	}
	c := rebuildOf(map[string]string{"projection": "inbox", "version": "3", "phase": "catch-up", "lag": "42"})
	if c.CatchUpLag == nil || *c.CatchUpLag != 42 {
		t.Errorf("catch-up lag %+v", c)
	}
	var out bytes.Buffer
	_ = Projections{Versions: []Projection{{Name: "inbox", Version: 2, RegistryVersion: 2}}, Rebuild: b}.WriteText(&out, time.Now())
	if !strings.Contains(out.String(), "rebuild running: inbox to v3, phase build") || !strings.Contains(out.String(), "250/1000 active users") {
		t.Errorf("text:\n%s", out.String())
	}
}
