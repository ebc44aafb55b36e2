package readmodel

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/feedco/feed/internal/service"
	"github.com/feedco/feed/testkit/testenv"
)

// TestVersionedNamesClassify checks that every builder's name, at versions
// 1, 2 and 12, classifies back to its projection and version, that hash
// tags are kept, and that version 1 names never share a prefix pattern with
// later ones (the cleanup's `feed:{*` must not match `v2:feed:{*`).
func TestVersionedNamesClassify(t *testing.T) {
	RegisterFamily(ProjectionInbox, "xinbox:") // as the home feed's owner registers its inboxes
	for _, prefix := range []string{"", "t9:"} {
		for _, v := range []int{1, 2, 12} {
			k := Keys{Prefix: prefix, Versions: Versions{Inbox: v, Timelines: v, Followers: v, Posts: v}}
			cases := map[string]string{
				k.Tagged(ProjectionInbox, "xinbox:", 7, ""): ProjectionInbox, k.Tagged(ProjectionInbox, "xinbox:", 7, "+"): ProjectionInbox,
				k.Timeline(7): ProjectionTimelines, k.Post(7): ProjectionPosts,
				k.Followers(7): ProjectionFollowers, k.Following(7): ProjectionFollowers,
				k.FollowingVersions(7): ProjectionFollowers, k.Celebrities(): ProjectionFollowers,
				k.CelebritiesOrder(): ProjectionFollowers, k.CelebritiesLeaving(): ProjectionFollowers,
				k.InboxBackfilled(): ProjectionInbox,
				k.Counts(7):         ProjectionPosts, k.Liked(7, 20430): ProjectionPosts, k.Reposted(7, 20430): ProjectionPosts,
				k.Reposts(7): ProjectionPosts, k.Name(7): ProjectionPosts,
			}
			for name, want := range cases {
				p, got, ok := Keys{Prefix: prefix}.Classify(name)
				if !ok || p != want || got != v {
					t.Errorf("Classify(%q) = %s, %d, %v; want %s, %d", name, p, got, ok, want, v)
				}
			}
			if v == 2 && k.Tagged(ProjectionInbox, "xinbox:", 7, "") != prefix+"v2:xinbox:{7}" {
				t.Errorf("v2 inbox name %q", k.Tagged(ProjectionInbox, "xinbox:", 7, ""))
			}
		}
	}
	if got := (Keys{}).Tagged(ProjectionInbox, "xinbox:", 7, ""); got != "xinbox:{7}" {
		t.Errorf("version 1 inbox name changed: %q", got)
	}
	for _, k := range []string{"projection:versions", "v2:", "vx:feed:{1}", "v01:feed:{1}", "other"} {
		if p, _, ok := (Keys{}).Classify(k); ok {
			t.Errorf("Classify(%q) = %s, want not a read-model key", k, p)
		}
	}
}

// TestLiveVersionsFollowRegistry switches a version (PostgreSQL, then its
// Redis mirror) and waits for a LiveVersions to build the new names.
func TestLiveVersionsFollowRegistry(t *testing.T) {
	t.Parallel()
	db, r := testenv.NewDB(t), testenv.NewRedis(t)
	ctx := context.Background()
	lv, err := NewLiveVersions(ctx, LiveVersionsConfig{Prefix: r.Prefix, Interval: 50 * time.Millisecond}, r.Client, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	k := Keys{Prefix: r.Prefix, Versions: lv}
	if got := k.InboxBackfilled(); got != r.Prefix+"inbox:backfilled" {
		t.Fatalf("before the switch: %q", got)
	}
	switchTo(t, db.Pool, r, ProjectionInbox, 1, 2)
	switchTo(t, db.Pool, r, ProjectionInbox, 2, 3)
	testenv.Eventually(t, 5*time.Second, "the switch is seen", func() bool {
		return k.InboxBackfilled() == r.Prefix+"v3:inbox:backfilled"
	})
	if got := k.Post(1); got != r.Prefix+"post:{1}" {
		t.Errorf("another projection moved: %q", got)
	}
	if f := k.Fixed(); f.Version(ProjectionInbox) != 3 {
		t.Errorf("Fixed lost the version: %+v", f)
	}
}

// switchTo is a rebuild's switch: PostgreSQL, then the Redis mirror.
func switchTo(t *testing.T, db *pgxpool.Pool, r *testenv.Redis, projection string, from, to int) {
	t.Helper()
	ctx := context.Background()
	if err := ActivateVersion(ctx, db, projection, from, to, Policy{CelebrityThreshold: 77, InboxMax: 40}); err != nil {
		t.Fatal(err)
	}
	if err := NewRegistry(r.Prefix).Activate(ctx, r.Client, projection, to); err != nil {
		t.Fatal(err)
	}
}

// TestLiveVersionsRestoreLostRegistry: with inbox at version 2 in
// PostgreSQL, a Redis registry that is missing (never written, or deleted
// with every key of the namespace) or rolled back to version 1 never puts a
// reader on version 1: a new reader and a running one use version 2 and
// write the registry back from PostgreSQL.
func TestLiveVersionsRestoreLostRegistry(t *testing.T) {
	t.Parallel()
	db, r := testenv.NewDB(t), testenv.NewRedis(t)
	ctx := context.Background()
	reg := NewRegistry(r.Prefix)
	if err := ActivateVersion(ctx, db.Pool, ProjectionInbox, 1, 2, Policy{}); err != nil {
		t.Fatal(err)
	}
	want := Versions{Inbox: 2, Timelines: 1, Followers: 1, Posts: 1, Notifications: 1}
	restored := func() bool {
		c, err := reg.Cached(ctx, r.Client)
		return err == nil && c == want
	}
	// No registry at all: the start-up reads PostgreSQL and writes it.
	lv, err := NewLiveVersions(ctx, LiveVersionsConfig{Prefix: r.Prefix, Interval: 20 * time.Millisecond}, r.Client, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	runLive(t, lv)
	if got := lv.Current(); got != want {
		t.Fatalf("start-up without a registry: %+v, want %+v", got, want)
	}
	if !restored() {
		t.Fatalf("registry not restored at start-up: %v", r.Client.HGetAll(ctx, Keys{Prefix: r.Prefix}.VersionsKey()).Val())
	}
	k := Keys{Prefix: r.Prefix, Versions: lv}
	for _, lose := range []func(){
		func() { testenv.DeletePrefix(ctx, r.Client, r.Prefix) },
		func() { r.Client.HSet(ctx, Keys{Prefix: r.Prefix}.VersionsKey(), ProjectionInbox, 1) },
		func() { r.Client.HDel(ctx, Keys{Prefix: r.Prefix}.VersionsKey(), ProjectionInbox) },
	} {
		lose()
		testenv.Eventually(t, 5*time.Second, "the running reader restores the registry", func() bool {
			if got := k.InboxBackfilled(); got != r.Prefix+"v2:inbox:backfilled" {
				t.Fatalf("the running reader went to %q", got)
			}
			return restored()
		})
		if err := lv.Refresh(ctx); err != nil || lv.Current() != want {
			t.Fatalf("refresh after the restore: %+v, %v", lv.Current(), err)
		}
	}
}

// TestMissingVersionRowIsAnError: a projection without a row in
// projection_versions is an error that names it, for the loader, a new
// reader and a running one (which keeps its versions), never version 1.
func TestMissingVersionRowIsAnError(t *testing.T) {
	t.Parallel()
	db, r := testenv.NewDB(t), testenv.NewRedis(t)
	ctx := context.Background()
	lv, err := NewLiveVersions(ctx, LiveVersionsConfig{Prefix: r.Prefix}, r.Client, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `DELETE FROM projection_versions WHERE projection = 'timelines'`); err != nil {
		t.Fatal(err)
	}
	r.Client.Del(ctx, Keys{Prefix: r.Prefix}.VersionsKey())
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrNoVersion) || !strings.Contains(err.Error(), "timelines") {
			t.Errorf("%s: %v, want ErrNoVersion naming timelines", what, err)
		}
	}
	_, err = LoadVersions(ctx, db.Pool)
	check("LoadVersions", err)
	_, err = NewLiveVersions(ctx, LiveVersionsConfig{Prefix: r.Prefix}, r.Client, db.Pool)
	check("NewLiveVersions", err)
	check("Refresh", lv.Refresh(ctx))
	if got := lv.Current(); got != (Versions{Inbox: 1, Timelines: 1, Followers: 1, Posts: 1, Notifications: 1}) {
		t.Errorf("the running reader's versions changed: %+v", got)
	}
	check("ActivateVersion", ActivateVersion(ctx, db.Pool, ProjectionTimelines, 1, 2, Policy{}))
}

// TestActivateVersion records the switch and the policy it was built with,
// and refuses a switch from a version that is not the active one.
func TestActivateVersion(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	if err := ActivateVersion(ctx, db.Pool, ProjectionPosts, 1, 2, Policy{CelebrityThreshold: 77, InboxMax: 40}); err != nil {
		t.Fatal(err)
	}
	if err := ActivateVersion(ctx, db.Pool, ProjectionPosts, 1, 2, Policy{}); !errors.Is(err, ErrVersionMoved) {
		t.Fatalf("second switch from 1: %v, want ErrVersionMoved", err)
	}
	recs, err := LoadVersionRecords(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		switch {
		case rec.Projection == ProjectionPosts && (rec.Version != 2 || rec.CelebrityThreshold != 77 || rec.InboxMax != 40):
			t.Errorf("switched row: %+v", rec)
		case rec.Projection != ProjectionPosts && (rec.Version != 1 || rec.CelebrityThreshold != 0 || rec.InboxMax != 0):
			t.Errorf("untouched row: %+v", rec)
		}
	}
}

// TestLiveVersionsAdoptPreUpgradeRegistry: on the first start after the
// upgrade that moved the registry into PostgreSQL, the seeded rows take
// the later versions the Redis hash already holds (rebuilds that ran
// before), instead of sending everyone back to version 1; once a switch
// has written a row, the hash never overrides it.
func TestLiveVersionsAdoptPreUpgradeRegistry(t *testing.T) {
	t.Parallel()
	db, r := testenv.NewDB(t), testenv.NewRedis(t)
	ctx := context.Background()
	reg := NewRegistry(r.Prefix)
	key := Keys{Prefix: r.Prefix}.VersionsKey()
	// The Redis-only registry of before the upgrade: inbox at 3, posts at 2.
	if err := r.Client.HSet(ctx, key, ProjectionInbox, 3, ProjectionPosts, 2).Err(); err != nil {
		t.Fatal(err)
	}
	lv, err := NewLiveVersions(ctx, LiveVersionsConfig{Prefix: r.Prefix}, r.Client, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	want := Versions{Inbox: 3, Timelines: 1, Followers: 1, Posts: 2, Notifications: 1}
	if got := lv.Current(); got != want {
		t.Fatalf("after the upgrade: %+v, want %+v", got, want)
	}
	if got, err := LoadVersions(ctx, db.Pool); err != nil || got != want {
		t.Fatalf("PostgreSQL after the adoption: %+v, %v; want %+v", got, err, want)
	}
	var seeded int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM projection_versions WHERE seeded`).Scan(&seeded); err != nil || seeded != 2 {
		t.Fatalf("%d rows still seeded (%v), want the 2 the registry did not raise", seeded, err)
	}

	// A switch writes PostgreSQL; a registry that later says more (a
	// stale or foreign value) is not adopted: PostgreSQL decides and the
	// registry is restored from it.
	if err := ActivateVersion(ctx, db.Pool, ProjectionTimelines, 1, 2, Policy{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Client.HSet(ctx, key, ProjectionTimelines, 5, ProjectionInbox, 7).Err(); err != nil {
		t.Fatal(err)
	}
	lv2, err := NewLiveVersions(ctx, LiveVersionsConfig{Prefix: r.Prefix}, r.Client, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	want = Versions{Inbox: 3, Timelines: 2, Followers: 1, Posts: 2, Notifications: 1}
	if got := lv2.Current(); got != want {
		t.Fatalf("after a switch: %+v, want %+v (the registry's 5 and 7 are not adopted)", got, want)
	}
	if c, err := reg.Cached(ctx, r.Client); err != nil || c != want {
		t.Fatalf("registry %+v (%v), want it restored to %+v", c, err, want)
	}
}

// TestLiveVersionsIdleReaderFollowsSwitch: a reader that read nothing
// while a switch happened (an idle query side) gets the new version from
// its first read after it, not the version it held before: it waits for
// the refresh its stale versions call for. A reader that reads often
// keeps answering from memory.
func TestLiveVersionsIdleReaderFollowsSwitch(t *testing.T) {
	t.Parallel()
	db, r := testenv.NewDB(t), testenv.NewRedis(t)
	ctx := context.Background()
	lv, err := NewLiveVersions(ctx, LiveVersionsConfig{Prefix: r.Prefix, Interval: 50 * time.Millisecond, MaxStale: 100 * time.Millisecond}, r.Client, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	runLive(t, lv)
	if v := lv.Version(ProjectionFollowers); v != 1 {
		t.Fatalf("before the switch: followers at %d", v)
	}
	switchTo(t, db.Pool, r, ProjectionFollowers, 1, 2)
	time.Sleep(300 * time.Millisecond) // the scenario: no read while MaxStale passes, the versions in memory go stale
	if v := lv.Version(ProjectionFollowers); v != 2 {
		t.Fatalf("the first read after an idle switch used followers version %d, want 2", v)
	}
	if rec := lv.Active().Record(ProjectionFollowers); rec.Version != 2 || rec.CelebrityThreshold != 77 {
		t.Errorf("record after the switch: %+v", rec)
	}
	// Reading every 10 ms keeps the versions fresh: the next switch is seen
	// by a background refresh, within about an Interval.
	switchTo(t, db.Pool, r, ProjectionFollowers, 2, 3)
	testenv.Eventually(t, 5*time.Second, "a busy reader follows the switch", func() bool {
		time.Sleep(10 * time.Millisecond) // the scenario: a reader that reads every 10 ms
		return lv.Version(ProjectionFollowers) == 3
	})
}

// TestActivateVersionsTogether switches the followers and inbox versions
// in one transaction with one threshold, and mirrors them in one HSET; a
// switch of the two where one has moved switches neither.
func TestActivateVersionsTogether(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	r := testenv.NewRedis(t)
	ctx := context.Background()
	// The inbox moved on (another rebuild): the pair from 1 is refused as
	// a whole, the followers row untouched.
	if err := ActivateVersion(ctx, db.Pool, ProjectionInbox, 1, 2, Policy{CelebrityThreshold: 10}); err != nil {
		t.Fatal(err)
	}
	err := ActivateVersions(ctx, db.Pool, Policy{CelebrityThreshold: 30},
		Switch{Projection: ProjectionFollowers, From: 1, To: 2}, Switch{Projection: ProjectionInbox, From: 1, To: 2})
	if !errors.Is(err, ErrVersionMoved) {
		t.Fatalf("pair switch with the inbox moved: %v, want ErrVersionMoved", err)
	}
	recs, err := LoadVersionRecords(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if rec.Projection == ProjectionFollowers && (rec.Version != 1 || rec.CelebrityThreshold != 0) {
			t.Fatalf("a refused pair switch wrote the followers row: %+v", rec)
		}
	}
	sw := []Switch{{Projection: ProjectionFollowers, From: 1, To: 2}, {Projection: ProjectionInbox, From: 2, To: 3}}
	if err := ActivateVersions(ctx, db.Pool, Policy{CelebrityThreshold: 30}, sw...); err != nil {
		t.Fatal(err)
	}
	if recs, err = LoadVersionRecords(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		switch rec.Projection {
		case ProjectionFollowers, ProjectionInbox:
			want := map[string]int{ProjectionFollowers: 2, ProjectionInbox: 3}[rec.Projection]
			if rec.Version != want || rec.CelebrityThreshold != 30 {
				t.Errorf("%s after the pair switch: %+v, want version %d, threshold 30", rec.Projection, rec, want)
			}
		default:
			if rec.Version != 1 {
				t.Errorf("untouched row: %+v", rec)
			}
		}
	}
	reg := NewRegistry(r.Prefix)
	if err := reg.ActivateAll(ctx, r.Client, sw...); err != nil {
		t.Fatal(err)
	}
	cached, err := reg.cached(ctx, r.Client)
	if err != nil {
		t.Fatal(err)
	}
	if cached.Get(ProjectionFollowers) != 2 || cached.Get(ProjectionInbox) != 3 {
		t.Errorf("registry after ActivateAll: %+v", cached)
	}
}

// runLive runs lv's background refreshes (Run) as a service until the test
// ends.
func runLive(t *testing.T, lv *LiveVersions) {
	t.Helper()
	s := service.New("live versions", lv.Run)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
}

// TestLiveVersionsWithoutRun: a LiveVersions whose Run does not run starts
// no goroutine: a read that finds the versions due for a refresh only asks
// for one, and the request waits for Run; once the versions are stale the
// read refreshes them itself.
func TestLiveVersionsWithoutRun(t *testing.T) {
	t.Parallel()
	db, r := testenv.NewDB(t), testenv.NewRedis(t)
	ctx := context.Background()
	lv, err := NewLiveVersions(ctx, LiveVersionsConfig{Prefix: r.Prefix, Interval: time.Millisecond, MaxStale: time.Hour}, r.Client, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	switchTo(t, db.Pool, r, ProjectionFollowers, 1, 2)
	testenv.Eventually(t, 5*time.Second, "a read asks for a background refresh", func() bool {
		lv.Version(ProjectionFollowers)
		return len(lv.wake) == 1
	})
	if v := lv.Version(ProjectionFollowers); v != 1 {
		t.Fatalf("without Run: followers at %d, want 1 (nothing refreshed them)", v)
	}
	runLive(t, lv)
	testenv.Eventually(t, 5*time.Second, "Run serves the pending request", func() bool {
		return lv.Version(ProjectionFollowers) == 2
	})

	stale, err := NewLiveVersions(ctx, LiveVersionsConfig{Prefix: r.Prefix, Interval: time.Millisecond, MaxStale: time.Millisecond}, r.Client, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	switchTo(t, db.Pool, r, ProjectionFollowers, 2, 3)
	testenv.Eventually(t, 5*time.Second, "a read refreshes stale versions itself", func() bool {
		return stale.Version(ProjectionFollowers) == 3
	})
}

// TestLostReadModelsMarked: a registry gone while the event log has
// events (Redis emptied under a running system) marks the active posts
// version's keys lost, so the query side asks PostgreSQL for what those
// keys cannot tell (EngagementLost); a registry written before any event
// (a new deployment) marks nothing, and a rebuild's new version is
// trusted again.
func TestLostReadModelsMarked(t *testing.T) {
	t.Parallel()
	db, r := testenv.NewDB(t), testenv.NewRedis(t)
	ctx := context.Background()
	lv, err := NewLiveVersions(ctx, LiveVersionsConfig{Prefix: r.Prefix, Interval: 20 * time.Millisecond}, r.Client, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	runLive(t, lv)
	if lv.EngagementLost() {
		t.Fatal("a new deployment's registry marked its read models lost")
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO events (event_id, stream_id, stream_version, type, payload)
		VALUES (gen_random_uuid(), 'user-1', 1, 'user.registered.v1', '{"userId":"1","name":"a"}')`); err != nil {
		t.Fatal(err)
	}
	testenv.DeletePrefix(ctx, r.Client, r.Prefix)
	testenv.Eventually(t, 5*time.Second, "the emptied Redis is noticed", lv.EngagementLost)
	if got := r.Client.HGet(ctx, Keys{Prefix: r.Prefix}.VersionsKey(), LostField(ProjectionPosts)).Val(); got != "1" {
		t.Fatalf("registry's %s = %q, want 1", LostField(ProjectionPosts), got)
	}
	if err := ActivateVersion(ctx, db.Pool, ProjectionPosts, 1, 2, Policy{}); err != nil {
		t.Fatal(err)
	}
	if err := NewRegistry(r.Prefix).Activate(ctx, r.Client, ProjectionPosts, 2); err != nil { // as a switch does
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the rebuilt version is trusted", func() bool {
		return lv.Current().Posts == 2 && !lv.EngagementLost()
	})
}
