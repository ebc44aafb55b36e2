package projections_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// snapshotXmax is the horizon a rebuild takes: every transaction below it
// has finished (nothing else writes this test's database).
func snapshotXmax(t *testing.T, w *world) uint64 {
	t.Helper()
	var s string
	if err := w.db.Pool.QueryRow(context.Background(), `SELECT pg_snapshot_xmax(pg_current_snapshot())::text`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	h, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestBuildFollowersMatchesProjectorReplay builds the followers projection
// in bulk and compares every key with what the projector's own ApplyBatch
// leaves after every event of the log in position order: random follows,
// unfollows and re-follows (one pair with 6 versions or more), accounts that
// cross the celebrity threshold up and back down, a follower whose last
// account was unfollowed (an empty following set but a versions hash),
// and a followee whose every follower left (count 0). Events committed
// after the horizon are left out of the build, as they are the catch-up's.
func TestBuildFollowersMatchesProjectorReplay(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	rd := testenv.NewRedis(t)
	live := readmodel.Keys{Prefix: rd.Prefix + "live:"}
	built := readmodel.Keys{Prefix: rd.Prefix + "built:"}
	cfg := projections.Config{CelebrityThreshold: 6}

	var users []int64
	for range 14 {
		users = append(users, w.user(true))
	}
	rng := rand.New(rand.NewPCG(7, 11))
	following := map[[2]int64]bool{}
	toggle := func(a, b int64) {
		if following[[2]int64{a, b}] {
			w.unfollow(a, b)
		} else {
			w.follow(a, b)
		}
		following[[2]int64{a, b}] = !following[[2]int64{a, b}]
	}
	// users[0] becomes a celebrity (everyone follows), then drops back
	// under the threshold; users[1] crosses it and stays.
	for _, u := range users[1:] {
		toggle(u, users[0])
	}
	for _, u := range users[2:10] {
		toggle(u, users[1])
	}
	for i := range 300 {
		a, b := users[rng.IntN(len(users))], users[2+rng.IntN(len(users)-2)]
		if a == b {
			continue
		}
		toggle(a, b)
		if i%50 == 0 {
			toggle(users[5], users[4]) // one pair with many versions
		}
	}
	for _, u := range users[1:11] {
		if following[[2]int64{u, users[0]}] {
			toggle(u, users[0])
		}
	}
	// users[12] follows only users[13], then unfollows: an empty set.
	for _, b := range users {
		if following[[2]int64{users[12], b}] {
			toggle(users[12], b)
		}
	}
	toggle(users[12], users[13])
	toggle(users[12], users[13])
	// users[13]'s followers all leave: a count of 0.
	for _, a := range users {
		if following[[2]int64{a, users[13]}] {
			toggle(a, users[13])
		}
	}
	// Mutes: of followed and not followed accounts, muted, unmuted and
	// muted again, and a muter who never follows anyone.
	muting := map[[2]int64]bool{}
	toggleMute := func(a, b int64) {
		muting[[2]int64{a, b}] = !muting[[2]int64{a, b}]
		w.mute(a, b, muting[[2]int64{a, b}])
	}
	for range 40 {
		a, b := users[rng.IntN(len(users))], users[rng.IntN(len(users))]
		if a != b {
			toggleMute(a, b)
		}
	}
	loner := w.user(true)
	toggleMute(loner, users[1])
	horizon := snapshotXmax(t, w)
	before := len(w.envs)
	toggle(users[2], users[3]) // after the horizon: not in the build
	toggleMute(users[2], users[4])
	toggle(users[4], users[0])

	lc := cfg
	lc.Keys = live
	lp, err := projections.NewFollowers(lc, rd.Client)
	if err != nil {
		t.Fatal(err)
	}
	var batch []projections.Decoded
	for _, env := range w.envs[:before] {
		ev, err := events.DefaultCodec.DecodeEnvelope(env)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, projections.Decoded{Env: env, Ev: ev})
	}
	if err := lp.ApplyBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}

	bc := cfg
	bc.Keys = built
	bp, err := projections.NewFollowers(bc, rd.Client)
	if err != nil {
		t.Fatal(err)
	}
	st := &stages{}
	n, err := bp.BuildFollowers(ctx, w.db.Pool, horizon, st)
	if err != nil {
		t.Fatal(err)
	}
	var follows int
	for _, env := range w.envs[:before] {
		if env.Type == "user.followed.v1" || env.Type == "user.unfollowed.v1" {
			follows++
		}
	}
	if n != int64(follows) {
		t.Errorf("build read %d follow events, the log has %d below the horizon", n, follows)
	}
	// The edges are read into one slice sized by a count of the whole
	// log's follow events (after the horizon too), never grown.
	all := 0
	for _, env := range w.envs {
		if env.Type == "user.followed.v1" || env.Type == "user.unfollowed.v1" {
			all++
		}
	}
	if got, capacity, err := projections.FollowEdgesRead(ctx, w.db.Pool, horizon); err != nil || got != follows || capacity != all {
		t.Errorf("read %d follow events into a slice of capacity %d (%v), want %d of the log's %d", got, capacity, err, follows, all)
	}

	// The build marks each hash and the celebrity set built (the replay,
	// which starts on nothing, cannot), and the replay keeps the order of
	// the celebrity decisions (the build's set needs none: every event
	// after it is newer); apart from these they agree.
	want, got := withoutOrder(dump(t, rd.Client, live.Prefix)), withoutBuilt(t, dump(t, rd.Client, built.Prefix))
	if d := diff(want, got); d != "" {
		t.Fatalf("bulk build differs from the projector's replay:\n%s", d)
	}
	// The same with 3 fields per command: hashes, sets and the celebrity
	// set written in several commands and pipelines.
	small := readmodel.Keys{Prefix: rd.Prefix + "small:"}
	sc := cfg
	sc.Keys = small
	sp, err := projections.NewFollowers(sc, rd.Client)
	if err != nil {
		t.Fatal(err)
	}
	old := projections.SetFollowerChunk(3)
	_, err = sp.BuildFollowers(ctx, w.db.Pool, horizon, nil)
	projections.SetFollowerChunk(old)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(want, withoutBuilt(t, dump(t, rd.Client, small.Prefix))); d != "" {
		t.Fatalf("bulk build in chunks of 3 differs from the projector's replay:\n%s", d)
	}
	// The data set exercised what it claims to.
	if in := rd.Client.SMIsMember(ctx, built.Celebrities(), idstr(users[0]), idstr(users[1])).Val(); len(in) != 2 || in[0] || !in[1] {
		t.Errorf("celebrity membership of users[0], users[1]: %v, want false (crossed back down), true", in)
	}
	if rd.Client.Exists(ctx, built.Following(users[12])).Val() != 0 || rd.Client.HLen(ctx, built.FollowingVersions(users[12])).Val() == 0 {
		t.Errorf("users[12]: want no following set and a versions hash")
	}
	if c := rd.Client.HGet(ctx, built.Followers(users[13]), "count").Val(); c != "0" {
		t.Errorf("users[13] follower count %q, want 0", c)
	}
	if v, _ := strconv.Atoi(rd.Client.HGet(ctx, built.FollowingVersions(users[5]), idstr(users[4])).Val()); v < 6 {
		t.Errorf("users[5] -> users[4] version %d, want at least 6", v)
	}
	// A followers hash holds its count, its position and ~built, no
	// follower.
	if f := rd.Client.HKeys(ctx, built.Followers(users[4])).Val(); len(f) != 3 {
		t.Errorf("followers:{users[4]} fields %v, want count, %s, %s", f, readmodel.FollowersPositionField, readmodel.SentinelBuilt)
	}
	// Progress: every event read is counted, each write stage to its total.
	if len(st.names) != 3 || st.added[0] != n || st.added[1] != st.totals[1] || st.added[2] != st.totals[2] || st.totals[1] == 0 {
		t.Errorf("stages %v totals %v added %v", st.names, st.totals, st.added)
	}
}

// withoutBuilt returns a dump of a followers build without its ~built
// markers, after checking that every hash and the celebrity set has one.
func withoutBuilt(t *testing.T, m map[string]string) map[string]string {
	t.Helper()
	out := make(map[string]string, len(m))
	for k, v := range m {
		typ, body, _ := strings.Cut(v, ":")
		var kept []string
		marked := false
		for _, f := range strings.Fields(body) {
			if f == readmodel.SentinelBuilt || f == readmodel.SentinelBuilt+"=1" {
				marked = true
				continue
			}
			kept = append(kept, f)
		}
		if (typ == "hash" || strings.HasSuffix(k, "celebrities")) && !marked {
			t.Errorf("%s (%s) has no %s", k, typ, readmodel.SentinelBuilt)
		}
		out[k] = typ + ":" + strings.Join(kept, " ")
	}
	return out
}
