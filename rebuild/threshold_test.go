package rebuild

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/systest"
	"github.com/feedco/feed/testkit/testenv"
)

// TestRebuildCelebrityThresholdUnderLoad changes the celebrity threshold
// blue/green (`feed rebuild inbox --celebrity-threshold`) twice with the
// supervised projectors running and writes and reads going on: down from
// 8 to 2 (through a rebuild of the inbox), then up to 12 (through a
// rebuild of the followers). Each time the followers and inbox versions
// are built at the new threshold and switched together; no read fails,
// readers of frozen feeds read the truth throughout, the new versions
// record the threshold, the celebrity set of the new followers version is
// PostgreSQL's at the new threshold, the running projectors push (or
// not) by it, and once quiet every feed equals the source of truth (the
// oracle, zero differences).
func TestRebuildCelebrityThresholdUnderLoad(t *testing.T) {
	t.Parallel()
	s := startSystemWith(t, systest.Config{Name: "rbt", Partitions: 6, Projections: policies}, 13)
	ctx := context.Background()
	s.seed(t, 20, 4, 80)
	// Frozen readers follow frozen authors (3 followers each: below 8 and
	// 12, at or over 2): nobody writes to them during the switches.
	frozen, frozenAuthors := s.frozenReaders(t)
	for i := range 12 {
		if _, err := s.Commands.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: frozenAuthors[i%3], Content: "frozen post"}); err != nil {
			t.Fatal(err)
		}
	}
	s.quiesce(t)
	s.checkConverged(t)

	for i, step := range []struct {
		name      string
		threshold int64
		versions  int // the followers and inbox versions after the switch
	}{
		{readmodel.ProjectionInbox, 2, 2},
		{readmodel.ProjectionFollowers, 12, 3},
	} {
		res := s.switchThresholdUnderLoad(t, step.name, step.threshold, frozen)
		if len(res) != 2 || res[0].Projection != readmodel.ProjectionFollowers || res[1].Projection != readmodel.ProjectionInbox ||
			res[0].To != step.versions || res[1].To != step.versions {
			t.Fatalf("step %d: rebuild %s at threshold %d: want followers and inbox to version %d, got %+v", i, step.name, step.threshold, step.versions, res)
		}
		recs, err := readmodel.LoadVersionRecords(ctx, s.DB.Pool)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			switch rec.Projection {
			case readmodel.ProjectionInbox, readmodel.ProjectionFollowers:
				if rec.Version != step.versions || rec.CelebrityThreshold != step.threshold {
					t.Fatalf("step %d: %s record %+v, want version %d, threshold %d", i, rec.Projection, rec, step.versions, step.threshold)
				}
			default:
				if rec.Version != 1 {
					t.Fatalf("step %d: %s moved to version %d", i, rec.Projection, rec.Version)
				}
			}
		}
		keys := readmodel.Keys{Prefix: s.Prefix, Versions: readmodel.Versions{}.
			With(readmodel.ProjectionInbox, step.versions).With(readmodel.ProjectionFollowers, step.versions)}
		pol := policies.Policy()
		pol.CelebrityThreshold = step.threshold

		// The running projectors adopted the threshold: a frozen author
		// (3 followers) is a celebrity at 2, their new post is not pushed
		// and is read from their timeline; at 12 it is pushed.
		p, err := s.Commands.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: frozenAuthors[0], Content: "after the switch"})
		if err != nil {
			t.Fatal(err)
		}
		s.quiesce(t)
		inbox, err := homefeed.NewInboxes(keys, pol).Posts(ctx, s.Redis, frozen[0])
		if err != nil {
			t.Fatal(err)
		}
		if pushed := slices.Contains(inbox, p.ID); pushed != (step.threshold > 3) {
			t.Errorf("step %d: threshold %d: the post of an author with 3 followers pushed: %v, want %v", i, step.threshold, pushed, step.threshold > 3)
		}
		// The new celebrity set is PostgreSQL's at the new threshold.
		members, built, err := readmodel.NewCelebrities(keys).Members(ctx, s.Redis)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, m := range members {
			got = append(got, m.ID)
		}
		slices.Sort(got)
		rows, err := s.DB.Pool.Query(ctx, `SELECT id FROM users WHERE follower_count >= $1 ORDER BY id`, step.threshold)
		if err != nil {
			t.Fatal(err)
		}
		want, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		if !built || !slices.Equal(got, want) {
			t.Errorf("step %d: celebrities of followers version %d (built %v): %v, want %v", i, step.versions, built, got, want)
		}
		if step.threshold == 2 && len(want) < 4 {
			t.Errorf("step %d: only %d celebrities at threshold 2: the test does not reach the pull side", i, len(want))
		}
		s.checkConverged(t)
		if kv := s.keyVersions(t); kv["inbox/v"+itoa(step.versions-1)] != 0 || kv["followers/v"+itoa(step.versions-1)] != 0 {
			t.Errorf("step %d: keys of the old versions left after the cleanup: %v", i, kv)
		}
	}
}

func itoa(n int) string { return string(rune('0' + n)) }

// switchThresholdUnderLoad runs `feed rebuild name --celebrity-threshold
// threshold` under writes and reads, and fails the test on a failed read
// or write, an empty page, or a frozen reader's feed unlike its truth.
func (s *system) switchThresholdUnderLoad(t *testing.T, name string, threshold int64, frozen []int64) []Result {
	t.Helper()
	ctx := context.Background()
	want := map[int64][]string{}
	for _, r := range frozen {
		w, err := s.truth(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		want[r] = w
	}
	l := s.startLoad(ctx, frozen, want)
	pcfg := policies
	pcfg.CelebrityThreshold = threshold
	r := s.rebuilderWith(t, pcfg, nil)
	res, err := r.Run(ctx, name)
	if err != nil {
		l.end()
		t.Fatalf("rebuild %s at celebrity threshold %d: %v", name, threshold, err)
	}
	// Run returns once the old versions are cleaned up: the load goes on
	// until every frozen feed was read whole, and the others read and
	// written, after the deletion of the old keys.
	w0, r0, f0 := l.writes.Load(), l.reads.Load(), l.frozenReads.Load()
	testenv.Eventually(t, 60*time.Second, "reads and writes after the cleanup", func() bool {
		return l.frozenReads.Load() >= f0+int64(len(frozen)) && l.reads.Load() > r0 && l.writes.Load() > w0
	})
	l.end()
	t.Logf("threshold %d: %d writes, %d reads, %d whole frozen feeds read, %d read errors, %d empty pages during the switch",
		threshold, l.writes.Load(), l.reads.Load(), l.frozenReads.Load(), l.readErrs.Load(), l.empties.Load())
	if e := l.firstErr.Load(); e != nil {
		t.Fatalf("a write or read failed during the switch: %v", e)
	}
	if l.readErrs.Load() > 0 || l.empties.Load() > 0 || l.frozenReads.Load() == 0 {
		t.Fatalf("%d reads failed, %d were empty, %d frozen feeds read during the switch", l.readErrs.Load(), l.empties.Load(), l.frozenReads.Load())
	}
	if m := l.mismatch.Load(); m != nil {
		v := m.([]any)
		t.Fatalf("frozen reader %d read %v during the switch, want %v", v[0], v[1], want[v[0].(int64)])
	}
	s.quiesce(t)
	return res
}
