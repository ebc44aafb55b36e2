package main

import (
	"context"
	"strings"
	"testing"

	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// The inbox policy belongs to the active version: a fresh deployment's
// first process records its own; a process with FEED_INBOX_MAX unset
// adopts what the active version recorded (after a switch, 300 here); one
// with it set to another value refuses to start (`feed project` and `feed
// api`), saying which value differs and the rebuild that changes it; set
// to the recorded value it starts. FEED_CELEBRITY_THRESHOLD and
// FEED_CELEBRITY_BAND set to another value than the recorded one are
// refused the same way. An inbox version an earlier release recorded in
// the sorted-set layout is refused by both roles, the message saying to
// run `feed rebuild inbox`, which itself starts on it.
func TestPolicyAdoptOrRefuse(t *testing.T) {
	db := testenv.NewDB(t)
	ctx := context.Background()
	t.Setenv("DATABASE_URL", db.URL)
	t.Setenv("REDIS_URL", testenv.RedisURL())
	load := func(inboxMax string) Config {
		t.Helper()
		t.Setenv("FEED_INBOX_MAX", inboxMax)
		cfg, err := LoadConfig()
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	log := testenv.Logger()

	fresh, err := resolvePolicy(ctx, load(""), db.Pool, log)
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Policy.InboxMax != 500 {
		t.Fatalf("fresh deployment: %d; want 500", fresh.Policy.InboxMax)
	}
	// A rebuild switched the inbox to version 2, bound 300.
	if err := readmodel.ActivateVersion(ctx, db.Pool, readmodel.ProjectionInbox, 1, 2, readmodel.Policy{InboxMax: 300}); err != nil {
		t.Fatal(err)
	}
	adopted, err := resolvePolicy(ctx, load(""), db.Pool, log)
	if err != nil {
		t.Fatalf("unset variables: %v", err)
	}
	if p := adopted.Policy; p.InboxMax != 300 || p.InboxTrimSlack != 64 || adopted.InboxMax != p.InboxMax {
		t.Fatalf("unset variables adopted %+v (config %d), want 300, slack 64", p, adopted.InboxMax)
	}
	if _, err := resolvePolicy(ctx, load("300"), db.Pool, log); err != nil {
		t.Fatalf("the recorded values set explicitly: %v", err)
	}
	// refused runs both roles with cfg: each must refuse to start, saying
	// every one of want; what names the settings in a failure.
	refused := func(cfg Config, what string, want ...string) {
		t.Helper()
		for _, role := range []string{"project", "api"} {
			code, _, stderr := runCLI(t, cfg, role)
			if code == 0 {
				t.Fatalf("feed %s with %s started", role, what)
			}
			for _, w := range want {
				if !strings.Contains(stderr, w) {
					t.Errorf("feed %s refused with %q, which does not say %q", role, stderr, w)
				}
			}
		}
	}
	// FEED_CELEBRITY_THRESHOLD against the recorded threshold (10000, the
	// fresh deployment's): refused by both roles, naming both values.
	t.Setenv("FEED_CELEBRITY_THRESHOLD", "5")
	thr := load("")
	t.Setenv("FEED_CELEBRITY_THRESHOLD", "")
	refused(thr, "FEED_CELEBRITY_THRESHOLD=5 against a recorded 10000", "FEED_CELEBRITY_THRESHOLD=5", "celebrity threshold 10000",
		"unset FEED_CELEBRITY_THRESHOLD to adopt it", "feed rebuild inbox --celebrity-threshold 5")
	// FEED_CELEBRITY_BAND against the recorded band (0, the fresh
	// deployment's).
	t.Setenv("FEED_CELEBRITY_BAND", "2")
	band := load("")
	t.Setenv("FEED_CELEBRITY_BAND", "")
	if band.Policy.CelebrityBand != 2 {
		t.Fatalf("FEED_CELEBRITY_BAND=2 read as %d", band.Policy.CelebrityBand)
	}
	refused(band, "FEED_CELEBRITY_BAND=2 against a recorded 0", "FEED_CELEBRITY_BAND=2", "celebrity band 0",
		"unset FEED_CELEBRITY_BAND to adopt it", "feed rebuild inbox --celebrity-band 2")
	refused(load("500"), "FEED_INBOX_MAX=500 against a recorded 300", "FEED_INBOX_MAX=500", "inbox bound 300", "feed rebuild inbox --inbox-max 500")

	// An earlier release's sorted-set inbox version.
	if _, err := db.Pool.Exec(ctx, `UPDATE projection_versions SET inbox_layout = 'zset' WHERE projection = 'inbox'`); err != nil {
		t.Fatal(err)
	}
	refused(load(""), "a sorted-set inbox version", `inbox layout "zset"`, "run `feed rebuild inbox`")
	rb := load("")
	rb.rebuildsInbox = true
	if got, err := resolvePolicy(ctx, rb, db.Pool, log); err != nil || got.Policy.InboxMax != 300 {
		t.Fatalf("feed rebuild inbox on a sorted-set inbox version: %v (bound %d), want it to start with the recorded 300", err, got.Policy.InboxMax)
	}
}

// `feed rebuild inbox --inbox-max` builds the new version with the flag's
// bound over the resolved policy, the trim slack derived again for the new
// bound; no flag keeps the policy.
func TestRebuildPolicyFlags(t *testing.T) {
	cfg := Config{Policy: readmodel.Policy{}.WithDefaults()}
	got := rebuildPolicy(cfg, rebuildOptions{inboxMax: 100})
	if p := got.Policy; p.InboxMax != 100 || p.InboxTrimSlack != 25 || got.InboxMax != 100 {
		t.Fatalf("rebuild policy %+v, want 100, slack 25", p)
	}
	if p := rebuildPolicy(cfg, rebuildOptions{}).Policy; p != cfg.Policy {
		t.Fatalf("no flag changed the policy to %+v", p)
	}
	got = rebuildPolicy(cfg, rebuildOptions{celebrityThreshold: 20})
	if p := got.Policy; p.CelebrityThreshold != 20 || got.CelebrityThreshold != 20 || p.InboxMax != 500 {
		t.Fatalf("rebuild policy %+v (config threshold %d), want threshold 20, the rest unchanged", p, got.CelebrityThreshold)
	}
	got = rebuildPolicy(cfg, rebuildOptions{celebrityBand: 3, bandSet: true})
	if p := got.Policy; p.CelebrityBand != 3 || got.CelebrityBand != 3 || p.CelebrityThreshold != cfg.Policy.CelebrityThreshold {
		t.Fatalf("rebuild policy %+v (config band %d), want band 3, the rest unchanged", p, got.CelebrityBand)
	}
	banded := cfg
	banded.Policy.CelebrityBand = 5
	if p := rebuildPolicy(banded, rebuildOptions{celebrityBand: 0, bandSet: true}).Policy; p.CelebrityBand != 0 {
		t.Fatalf("--celebrity-band 0 over band 5: band %d, want 0", p.CelebrityBand)
	}
	// The threshold and the band are the followers and inbox projections':
	// refused for the others before anything is opened.
	code, _, stderr := runCLI(t, cfg, "rebuild", "timelines", "--celebrity-threshold", "20")
	if code == 0 || !strings.Contains(stderr, "--celebrity-threshold is the followers and inbox projections'") {
		t.Fatalf("feed rebuild timelines --celebrity-threshold 20: exit %d, %q", code, stderr)
	}
	code, _, stderr = runCLI(t, cfg, "rebuild", "posts", "--celebrity-band", "0")
	if code == 0 || !strings.Contains(stderr, "--celebrity-band is the followers and inbox projections'") {
		t.Fatalf("feed rebuild posts --celebrity-band 0: exit %d, %q", code, stderr)
	}
	code, _, stderr = runCLI(t, cfg, "rebuild", "all", "--celebrity-band", "-1")
	if code == 0 || !strings.Contains(stderr, "celebrity-band") {
		t.Fatalf("feed rebuild all --celebrity-band -1: exit %d, %q", code, stderr)
	}
}
