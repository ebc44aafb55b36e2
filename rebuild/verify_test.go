package rebuild

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/verify"
)

// verifying returns a Rebuilder that verifies every active user on the new
// version before switching (force: switch anyway).
func (s *system) verifying(t *testing.T, onPhase func(projection, phase string), force bool) *Rebuilder {
	t.Helper()
	r := s.rebuilder(t, onPhase)
	r.cfg.Verify = &verify.Config{Slot: s.Slot, Users: 100, Seed: 1, Logger: s.Log}
	r.cfg.Force = force
	return r
}

// corruptInbox removes, from the inbox of version v, a post of a
// non-celebrity followee that the inbox holds, and returns the reader and
// the post.
func (s *system) corruptInbox(t *testing.T, v int) (user, post int64) {
	t.Helper()
	ctx := context.Background()
	keys := readmodel.Keys{Prefix: s.Prefix, Versions: readmodel.DefaultVersions().With(readmodel.ProjectionInbox, v)}
	pol := policies.Policy().WithDefaults()
	for _, u := range s.users {
		var p int64
		err := s.DB.Pool.QueryRow(ctx, `SELECT p.id FROM posts p JOIN follows f ON f.followee_id = p.author_id JOIN users a ON a.id = p.author_id
			WHERE f.follower_id = $1 AND NOT p.deleted AND a.follower_count < $2 ORDER BY p.created_at DESC, p.id DESC LIMIT 1`, u, pol.CelebrityThreshold).Scan(&p)
		if err != nil {
			continue
		}
		h, err := homefeed.Inspect(ctx, s.Redis, homefeed.NewInboxes(keys, pol), u, p)
		if err != nil {
			t.Fatal(err)
		}
		if h.Built && h.Holds {
			if err := homefeed.NewInboxes(keys, pol).Remove(ctx, s.Redis, u, []int64{p}); err != nil {
				t.Fatal(err)
			}
			return u, p
		}
	}
	t.Fatalf("no inbox of version %d holds a pushed post", v)
	return 0, 0
}

// TestRebuildRefusesACorruptBuild: a rebuild of the inbox whose new version
// is wrong (a post removed from a reader's new inbox after the build) is
// verified before the switch and refused: ErrVerify names the reader and
// the post, version 1 stays active and the live feeds still equal the
// truth. The next, clean rebuild verifies with no difference and switches;
// a corrupt one with Force switches despite the difference it reports.
func TestRebuildRefusesACorruptBuild(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	s.seed(t, 14, 4, 70)
	s.quiesce(t)
	ctx := context.Background()

	var user, post int64
	r := s.verifying(t, func(p, ph string) {
		if p == readmodel.ProjectionInbox && ph == "verify" {
			user, post = s.corruptInbox(t, 2)
		}
	}, false)
	res, err := r.Run(ctx, readmodel.ProjectionInbox)
	if !errors.Is(err, ErrVerify) {
		var rep string
		if len(res) > 0 && res[0].Verify != nil {
			rep = fmt.Sprintf("%s; %s", res[0].Verify.Summary(), res[0].Verify.Lag)
		}
		t.Fatalf("rebuild of a corrupt inbox version (user %d, post %d removed): got %v, want ErrVerify; the verification: %s", user, post, err, rep)
	}
	if want := fmt.Sprintf("user %d: missing: post %d", user, post); !strings.Contains(err.Error(), want) {
		t.Errorf("the refusal %q does not name %q", err, want)
	}
	if len(res) != 0 {
		t.Errorf("results of a refused rebuild: %+v", res)
	}
	vs, err := readmodel.LoadVersions(ctx, s.DB.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if vs.Version(readmodel.ProjectionInbox) != 1 {
		t.Fatalf("a refused rebuild switched the inbox to version %d", vs.Version(readmodel.ProjectionInbox))
	}
	s.checkConverged(t)

	// Clean: verified, switched.
	res, err = s.verifying(t, nil, false).Run(ctx, readmodel.ProjectionInbox)
	if err != nil {
		t.Fatalf("clean rebuild: %v", err)
	}
	if len(res) != 1 || res[0].To != 2 || res[0].Verify == nil || !res[0].Verify.OK() || res[0].Verify.Users < 10 || res[0].Verify.Cold > 0 {
		// (seed warmed every reader: a cold one would be served from
		// PostgreSQL, and a difference in its inbox go unseen)
		t.Fatalf("clean rebuild: want version 2 verified on every active user, all of them warm: %+v (verify %+v)", res, res[0].Verify)
	}
	if !strings.Contains(res[0].Verify.Summary(), "inbox v2") {
		t.Errorf("the verification did not read version 2: %s", res[0].Verify.Summary())
	}

	// Forced: the difference is reported, the switch happens.
	res, err = s.verifying(t, func(p, ph string) {
		if p == readmodel.ProjectionInbox && ph == "verify" {
			user, post = s.corruptInbox(t, 3)
		}
	}, true).Run(ctx, readmodel.ProjectionInbox)
	if err != nil {
		t.Fatalf("forced rebuild: %v", err)
	}
	if len(res) != 1 || res[0].To != 3 || res[0].Verify == nil || res[0].Verify.OK() {
		t.Fatalf("forced rebuild: want version 3 with the difference reported: %+v", res)
	}
	if d := res[0].Verify.Differences[0]; d.User != user || d.Post != post || d.Kind != "missing" {
		t.Errorf("forced rebuild reported %s, want user %d missing post %d", d, user, post)
	}
}
