package rebuild

import (
	"context"
	"strings"
	"testing"

	"github.com/feedco/feed/commands"
)

// celebrities returns the authors at or over the celebrity threshold by
// PostgreSQL's follower counts.
func (s *system) celebrities(t *testing.T) []int64 {
	t.Helper()
	rows, err := s.DB.Pool.Query(context.Background(), `SELECT id FROM users WHERE follower_count >= $1 ORDER BY id`, policies.CelebrityThreshold)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// makeCelebrities has every user follow the first n users, so that each
// of them is over the celebrity threshold.
func (s *system) makeCelebrities(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	for _, u := range s.users {
		for _, c := range s.users[:n] {
			if u == c {
				continue
			}
			if _, err := s.Commands.Follow.Handle(ctx, commands.Follow{FollowerID: u, FolloweeID: c}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// celebritiesPost has each of the current celebrities post k times, and
// returns them.
func (s *system) celebritiesPost(t *testing.T, k int) []int64 {
	t.Helper()
	ctx := context.Background()
	celebs := s.celebrities(t)
	if len(celebs) == 0 {
		t.Fatal("no celebrity")
	}
	for range k {
		for _, c := range celebs {
			p, err := s.Commands.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: c, Content: "celebrity post"})
			if err != nil {
				t.Fatal(err)
			}
			s.mu.Lock()
			s.live = append(s.live, p.ID)
			s.mu.Unlock()
		}
	}
	return celebs
}

// checkOnlyVersion fails the test when a read-model key of a version other
// than v exists (one the cleanup deleted and a reader wrote back).
func (s *system) checkOnlyVersion(t *testing.T, v int) {
	t.Helper()
	suffix := "/v" + string(rune('0'+v))
	for k, n := range s.keyVersions(t) {
		if !strings.HasSuffix(k, suffix) {
			t.Errorf("%d keys of %s exist after the switch to version %d", n, k, v)
		}
	}
}

// TestRebuildAllLongRunningQuerySide: `rebuild all` while the query side
// that served before it reads nothing (an idle API), then the celebrities
// post (the pull path): that query side's first reads after the switch
// and the cleanup read the new versions, so every feed equals the truth
// and no key of version 1 is written back (a read of the deleted celebrity
// set or timelines would rebuild them there).
func TestRebuildAllLongRunningQuerySide(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	s.seed(t, 24, 4, 60)
	s.makeCelebrities(t, 3)
	s.quiesce(t)
	s.checkConverged(t)

	if _, err := s.rebuilder(t, nil).Run(context.Background(), All); err != nil {
		t.Fatal(err)
	}
	celebs := s.celebritiesPost(t, 3)
	s.quiesce(t)
	t.Logf("celebrities %v posted after the switch", celebs)
	s.checkConverged(t)
	s.checkOnlyVersion(t, 2)
}
