package rebuild

import (
	"context"
	"strconv"
	"testing"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/systest"
)

// TestRebuildFollowersIntoCompactUnderLoad moves a deployment whose follow
// graph is in the previous layout (a version per follower in
// followers:{a}, every pair's version in following_v:{u}) to the compact
// one blue/green (`feed rebuild followers`) with the supervised
// projectors running and writes and reads going on. The projector applies
// the load's follow events to the previous layout's keys until the switch
// (the compact scripts read them), no read fails or comes back empty, and
// after the switch version 2 holds the compact layout only (no follower
// field in a followers hash, no implied version stored), version 1 is
// gone, and every feed, following set and count equals the source of
// truth.
func TestRebuildFollowersIntoCompactUnderLoad(t *testing.T) {
	t.Parallel()
	s := startSystemWith(t, systest.Config{Name: "rbf", Partitions: 6, Projections: policies}, 13)
	ctx := context.Background()
	s.seed(t, 20, 5, 60)
	s.quiesce(t)
	v1 := readmodel.Keys{Prefix: s.Prefix}
	pairs := previousFollowLayout(t, s, v1)
	if pairs == 0 {
		t.Fatal("no follow pair to write in the previous layout")
	}
	s.checkConverged(t)

	l := s.startLoad(ctx, nil, nil)
	// The load's events reach the previous layout's keys first.
	goesOn(t, "the load before the rebuild", 50, &l.writes, &l.reads)
	// The followees with a follow event in the log before the rebuild
	// starts: the build writes each one's hash, ~built included. One
	// followed for the first time later (the load follows on) gets its
	// hash from the catch-up or the projector, without ~built.
	hadEvents := map[int64]bool{}
	rows, err := s.DB.Pool.Query(ctx, `SELECT DISTINCT (payload->>'followeeId')::bigint FROM events WHERE type IN ($1, $2)`,
		events.TypeFollowed, events.TypeUnfollowed)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var u int64
		if err := rows.Scan(&u); err != nil {
			t.Fatal(err)
		}
		hadEvents[u] = true
	}
	rows.Close()
	res, err := s.rebuilder(t, nil).Run(ctx, readmodel.ProjectionFollowers)
	if err != nil {
		l.end()
		t.Fatalf("rebuild followers: %v", err)
	}
	// Keep the load on past the cleanup of version 1.
	goesOn(t, "the load after the cleanup", 100, &l.writes, &l.reads)
	l.end()
	t.Logf("during the switch: %d writes, %d reads, %d read errors, %d empty pages; %+v",
		l.writes.Load(), l.reads.Load(), l.readErrs.Load(), l.empties.Load(), res)
	if e := l.firstErr.Load(); e != nil {
		t.Fatalf("a write or read failed during the switch: %v", e)
	}
	if l.readErrs.Load() > 0 || l.empties.Load() > 0 {
		t.Fatalf("%d reads failed and %d were empty during the switch", l.readErrs.Load(), l.empties.Load())
	}
	s.quiesce(t)
	if kv := s.keyVersions(t); kv["followers/v1"] != 0 || kv["followers/v2"] == 0 {
		t.Errorf("after the switch want only version 2 follow graph keys: %v", kv)
	}
	v2 := readmodel.Keys{Prefix: s.Prefix, Versions: readmodel.Versions{}.With(readmodel.ProjectionFollowers, 2)}
	for _, u := range s.users {
		f, err := s.Redis.HKeys(ctx, v2.Followers(u)).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range f {
			if k != "count" && k != readmodel.FollowersPositionField && k != readmodel.SentinelBuilt {
				t.Fatalf("followers:{%d} at version 2 has the field %q: %v", u, k, f)
			}
		}
		members, err := s.Redis.SMembers(ctx, v2.Following(u)).Result()
		if err != nil {
			t.Fatal(err)
		}
		vs, err := s.Redis.HGetAll(ctx, v2.FollowingVersions(u)).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range members {
			if vs[m] == "1" {
				t.Fatalf("following_v:{%d} at version 2 stores the implied version of %s", u, m)
			}
		}
		var want int64
		if err := s.DB.Pool.QueryRow(ctx, `SELECT follower_count FROM users WHERE id = $1`, u).Scan(&want); err != nil {
			t.Fatal(err)
		}
		n, built, err := readmodel.NewFollows(v2).CountOf(ctx, s.Redis, u)
		if err != nil || n != want || (!built && hadEvents[u]) {
			t.Fatalf("count of %d at version 2: %d (built %v, %v), want %d", u, n, built, err, want)
		}
	}
	s.checkConverged(t)
}

// previousFollowLayout rewrites the follow graph of keys into the layout
// before the compact one, as its projector and build left it: each
// followee's hash gets every follower's newest pair version and loses its
// position, each follower's version hash every pair's newest version.
// It returns the pairs written.
func previousFollowLayout(t *testing.T, s *system, keys readmodel.Keys) int {
	t.Helper()
	ctx := context.Background()
	rows, err := s.DB.Pool.Query(ctx, `SELECT (payload->>'followerId')::bigint, (payload->>'followeeId')::bigint, max(stream_version)
		FROM events WHERE type IN ('user.followed.v1', 'user.unfollowed.v1') GROUP BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	pipe := s.Redis.Pipeline()
	n := 0
	for rows.Next() {
		var f, a, v int64
		if err := rows.Scan(&f, &a, &v); err != nil {
			t.Fatal(err)
		}
		pipe.HSet(ctx, keys.Followers(a), strconv.FormatInt(f, 10), v)
		pipe.HDel(ctx, keys.Followers(a), readmodel.FollowersPositionField)
		pipe.HSet(ctx, keys.FollowingVersions(f), strconv.FormatInt(a, 10), v)
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}
