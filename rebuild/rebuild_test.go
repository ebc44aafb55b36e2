package rebuild

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// TestRebuildAllUnderLoad rebuilds every projection while writers and
// readers keep going: no read fails or returns an empty first page (every
// user has a post that is never deleted, so an empty page is a bug), every
// projection ends at version 2 with no key of version 1 left, and once
// quiet every feed equals the source of truth.
func TestRebuildAllUnderLoad(t *testing.T) {
	t.Parallel()
	testRebuildAllUnderLoad(t, false)
}

// TestRebuildAllUnderLoadCluster is TestRebuildAllUnderLoad on the 3-node
// Redis Cluster: the bulk builds' pipelines, the switch and the sweep of
// the old version's keys on every master (none may be left).
func TestRebuildAllUnderLoadCluster(t *testing.T) {
	t.Parallel()
	testRebuildAllUnderLoad(t, true)
}

func testRebuildAllUnderLoad(t *testing.T, cluster bool) {
	s := startSystemOn(t, cluster)
	s.seed(t, 24, 5, 120)
	s.quiesce(t)
	s.checkConverged(t)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var writes, reads, readErrs, empties atomic.Int64
	var firstErr atomic.Value
	wg.Add(1)
	go func() { // writer
		defer wg.Done()
		for ctx.Err() == nil {
			if err := s.step(context.Background()); err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
			writes.Add(1)
			time.Sleep(3 * time.Millisecond) // pacing
		}
	}()
	for range 3 { // readers
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				u := s.pick()
				p, err := s.Feed.Home(context.Background(), u, "", 20)
				reads.Add(1)
				switch {
				case err != nil:
					readErrs.Add(1)
					firstErr.CompareAndSwap(nil, err)
				case len(p.Items) == 0:
					empties.Add(1)
				}
			}
		}()
	}
	var phases []string
	var mu sync.Mutex
	r := s.rebuilder(t, func(p, ph string) {
		mu.Lock()
		phases = append(phases, p+":"+ph)
		mu.Unlock()
	})
	res, err := r.Run(context.Background(), All)
	stop()
	wg.Wait()
	if err != nil {
		t.Fatalf("rebuild all: %v", err)
	}
	t.Logf("during the rebuild: %d writes, %d reads, %d read errors, %d empty pages; results %+v", writes.Load(), reads.Load(), readErrs.Load(), empties.Load(), res)
	if e := firstErr.Load(); e != nil {
		t.Fatalf("a write or read failed during the rebuild: %v", e)
	}
	if readErrs.Load() > 0 || empties.Load() > 0 {
		t.Fatalf("%d reads failed and %d were empty during the rebuild", readErrs.Load(), empties.Load())
	}
	if len(res) != len(projections.Names()) {
		t.Fatalf("want %d results, got %+v", len(projections.Names()), res)
	}
	vs, err := readmodel.LoadVersions(context.Background(), s.DB.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range readmodel.Projections() {
		if vs.Version(p) != 2 {
			t.Errorf("%s is at version %d, want 2", p, vs.Version(p))
		}
	}
	s.quiesce(t)
	s.checkConverged(t)
	kv := s.keyVersions(t)
	for k, n := range kv {
		if k[len(k)-2:] != "v2" {
			t.Errorf("%d keys of %s left after the cleanup", n, k)
		}
	}
	for _, p := range []string{"posts/v2", "followers/v2", "timelines/v2", "inbox/v2"} {
		if kv[p] == 0 {
			t.Errorf("no keys of %s: %v", p, kv)
		}
	}
	st, err := ReadStatus(context.Background(), s.DB.Pool, s.Redis, s.RunnerConfig(), s.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	if st.Running {
		t.Error("status says a rebuild is running after it finished")
	}
	for _, p := range st.Projections {
		if p.Version != 2 || p.Cached != 2 || p.Dirty || p.Group != s.GroupPrefix+projections.GroupFor(p.Name, 2) {
			t.Errorf("status of %s: %+v", p.Name, p)
		}
	}
}

// TestRebuildInterruptedThenRerun cancels a rebuild after it wrote the new
// version's keys and before its switch: the live version stays active and
// serves correct feeds, the registry marks the projection dirty; a second
// run deletes the partial keys, rebuilds and switches.
func TestRebuildInterruptedThenRerun(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	s.seed(t, 12, 4, 60)
	s.quiesce(t)

	for _, name := range []string{readmodel.ProjectionPosts, readmodel.ProjectionInbox} {
		ctx, cancel := context.WithCancel(context.Background())
		r := s.rebuilder(t, func(p, ph string) {
			if ph == "catch-up" {
				cancel() // the build is done: version 2 keys exist
			}
		})
		if _, err := r.Run(ctx, name); !errors.Is(err, context.Canceled) {
			t.Fatalf("interrupted rebuild of %s: got %v, want context.Canceled", name, err)
		}
		cancel()
		vs, err := readmodel.LoadVersions(context.Background(), s.DB.Pool)
		if err != nil {
			t.Fatal(err)
		}
		if vs.Version(name) != 1 {
			t.Fatalf("%s switched to %d by an interrupted rebuild", name, vs.Version(name))
		}
		if kv := s.keyVersions(t); kv[name+"/v2"] == 0 || kv[name+"/v1"] == 0 {
			t.Fatalf("after the interrupted build of %s want keys of v1 and partial v2: %v", name, kv)
		}
		s.checkConverged(t) // the live version is untouched

		// Rerun: it cleans the partial v2 and starts over.
		if _, err := s.rebuilder(t, nil).Run(context.Background(), name); err != nil {
			t.Fatalf("rerun of %s: %v", name, err)
		}
		vs, _ = readmodel.LoadVersions(context.Background(), s.DB.Pool)
		if vs.Version(name) != 2 {
			t.Fatalf("%s at version %d after the rerun", name, vs.Version(name))
		}
		if kv := s.keyVersions(t); kv[name+"/v1"] != 0 || kv[name+"/v2"] == 0 {
			t.Fatalf("after the rerun of %s want only v2 keys: %v", name, kv)
		}
	}
	// Writes after the switch land in version 2.
	for range 20 {
		if err := s.post(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	s.quiesce(t)
	s.checkConverged(t)
}

// TestRebuildRefusesSecond holds one rebuild in its build phase and starts
// another: the second refuses with ErrBusy, status says one is running, and
// the first then completes.
func TestRebuildRefusesSecond(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	s.seed(t, 6, 2, 10)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	first := s.rebuilder(t, func(p, ph string) {
		if ph == "build" {
			once.Do(func() { close(entered); <-release })
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := first.Run(context.Background(), readmodel.ProjectionTimelines)
		done <- err
	}()
	<-entered
	_, err := s.rebuilder(t, nil).Run(context.Background(), All)
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("second rebuild: got %v, want ErrBusy", err)
	}
	t.Logf("second rebuild refused: %v", err)
	st, _ := ReadStatus(context.Background(), s.DB.Pool, s.Redis, s.RunnerConfig(), s.Prefix)
	if !st.Running || st.Info["projection"] != readmodel.ProjectionTimelines || st.Info["phase"] != "build" {
		t.Errorf("status while running: %+v", st)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("first rebuild: %v", err)
	}
	st, _ = ReadStatus(context.Background(), s.DB.Pool, s.Redis, s.RunnerConfig(), s.Prefix)
	if st.Running {
		t.Error("status says running after the rebuild ended")
	}
}

// TestLostRegistryKeepsVersion2 rebuilds the inbox to version 2, then
// deletes every key of the test's namespace (its FLUSHDB): the registry is
// written back from PostgreSQL with version 2, the query side's cold
// rebuilds write version 2 inboxes, the inbox projector stays in the
// version 2 group and pushes new posts into version 2 inboxes, no version
// 1 inbox appears, and the feeds converge. Status shows PostgreSQL's
// versions.
func TestLostRegistryKeepsVersion2(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	s.seed(t, 10, 3, 30)
	s.quiesce(t)
	ctx := context.Background()
	if _, err := s.rebuilder(t, nil).Run(ctx, readmodel.ProjectionInbox); err != nil {
		t.Fatal(err)
	}
	s.quiesce(t)
	// The query side follows a switch on the reads after it (a read uses
	// the versions it holds and refreshes them in the background): read
	// until it is on version 2, so that what follows tests the loss of the
	// registry, not a reader that has not seen the switch yet.
	want := readmodel.Versions{Inbox: 2, Timelines: 1, Followers: 1, Posts: 1, Notifications: 1}
	v2 := readmodel.Keys{Prefix: s.Prefix, Versions: want}
	testenv.Eventually(t, 10*time.Second, "the query side reads version 2", func() bool {
		if _, err := s.Feed.Home(ctx, s.users[0], "", 10); err != nil {
			t.Fatal(err)
		}
		return inboxKeys(ctx, s, v2, s.users[0]) > 0
	})

	testenv.DeletePrefix(ctx, s.Redis, s.Prefix)
	reg := readmodel.NewRegistry(s.Prefix)
	testenv.Eventually(t, 10*time.Second, "the registry is restored from PostgreSQL", func() bool {
		c, err := reg.Cached(ctx, s.Redis)
		return err == nil && c == want
	})
	v1 := readmodel.Keys{Prefix: s.Prefix}
	u := s.users[0]
	testenv.Eventually(t, 10*time.Second, "a read rebuilds the version 2 inbox", func() bool {
		if _, err := s.Feed.Home(ctx, u, "", 10); err != nil {
			t.Fatal(err)
		}
		return inboxKeys(ctx, s, v2, u) > 0
	})
	for _, x := range s.users {
		if _, err := s.Feed.Home(ctx, x, "", 10); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		if err := s.post(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s.quiesce(t)
	if kv := s.keyVersions(t); kv["inbox/v1"] != 0 || kv["inbox/v2"] == 0 {
		t.Errorf("after the loss want only version 2 inboxes: %v", kv)
	}
	if inboxKeys(ctx, s, v1, u) != 0 {
		t.Errorf("a version 1 inbox of %d exists", u)
	}
	s.checkConverged(t)
	st, err := ReadStatus(ctx, s.DB.Pool, s.Redis, s.RunnerConfig(), s.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Projections {
		if p.Version != want.Version(p.Name) || p.Group != s.GroupPrefix+projections.GroupFor(p.Name, p.Version) || p.Lag != 0 {
			t.Errorf("status of %s: %+v", p.Name, p)
		}
		if p.Name == readmodel.ProjectionInbox && (p.CelebrityThreshold != policies.CelebrityThreshold || p.InboxMax != policies.InboxMax) {
			t.Errorf("inbox version 2 policy not recorded: %+v", p)
		}
	}
}

// inboxKeys counts the keys of user's inbox under keys
// (the sorted set; the packed sealed string and buffer).
func inboxKeys(ctx context.Context, s *system, keys readmodel.Keys, user int64) int64 {
	return s.Redis.Exists(ctx, homefeed.Key(keys, user), homefeed.Key(keys, user)+"+").Val()
}

// escapeGlob quotes the glob characters of a SCAN MATCH pattern.
func escapeGlob(s string) string { return strings.TrimSuffix(readmodel.Keys{Prefix: s}.Pattern(), "*") }
