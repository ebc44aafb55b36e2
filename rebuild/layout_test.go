package rebuild

import (
	"context"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/systest"
)

// TestRebuildInboxFromSortedSetsUnderLoad is the upgrade of a deployment
// whose inbox version an earlier release recorded in the removed
// sorted-set layout (its record says so, and its `feed:{u}` keys are
// there): `feed rebuild inbox` builds the next version from the log in
// the packed layout, blue/green, with the supervised projectors running
// and writes and reads going on. Readers whose feeds no write touches
// compare every page they read during the switch with the truth taken
// before it (none may fail or differ); the others' reads must not fail or
// come back empty. After the switch the inbox version records packed,
// the supervisor's inbox projector writes the new version, no sorted-set
// inbox is left (the cleanup deletes them as the old version's keys), and
// once quiet every feed equals the source of truth.
func TestRebuildInboxFromSortedSetsUnderLoad(t *testing.T) {
	t.Parallel()
	s := startSystemWith(t, systest.Config{Name: "rbl", Partitions: 6, Projections: policies}, 11)
	ctx := context.Background()
	s.seed(t, 20, 4, 100)
	// Frozen readers follow frozen authors: nobody writes to them below.
	frozen, frozenAuthors := s.frozenReaders(t)
	for i := range 30 {
		a := frozenAuthors[i%len(frozenAuthors)]
		if _, err := s.Commands.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: a, Content: "frozen post"}); err != nil {
			t.Fatal(err)
		}
	}
	s.quiesce(t)
	s.checkConverged(t)
	want := map[int64][]string{}
	for _, r := range frozen {
		w, err := s.truth(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if len(w) != 30 {
			t.Fatalf("frozen reader %d has %d posts in the truth, want 30", r, len(w))
		}
		want[r] = w
	}
	// What an earlier release left: the record, and sorted-set inboxes.
	if _, err := s.DB.Pool.Exec(ctx, `UPDATE projection_versions SET inbox_layout = 'zset' WHERE projection = 'inbox'`); err != nil {
		t.Fatal(err)
	}
	for _, r := range frozen {
		if err := s.Redis.ZAdd(ctx, s.Prefix+"feed:{"+strconv.FormatInt(r, 10)+"}", redis.Z{Score: math.Inf(1), Member: readmodel.SentinelBuilt}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n := sortedSetInboxes(t, s); n == 0 {
		t.Fatal("no sorted-set inbox before the switch")
	}

	l := s.startLoad(ctx, frozen, want)
	pcfg := policies
	r := s.rebuilderWith(t, pcfg, nil)
	res, err := r.Run(ctx, readmodel.ProjectionInbox)
	if err != nil {
		l.end()
		t.Fatalf("rebuild inbox: %v", err)
	}
	// Keep the load on past the cleanup of the sorted-set version, so the
	// readers cross the switch and the deletion of the old keys.
	goesOn(t, "the load after the cleanup", 100, &l.writes, &l.reads, &l.frozenReads)
	l.end()
	t.Logf("during the switch: %d writes, %d reads, %d whole frozen feeds read, %d read errors, %d empty pages; %+v",
		l.writes.Load(), l.reads.Load(), l.frozenReads.Load(), l.readErrs.Load(), l.empties.Load(), res)
	if e := l.firstErr.Load(); e != nil {
		t.Fatalf("a write or read failed during the switch: %v", e)
	}
	if l.readErrs.Load() > 0 || l.empties.Load() > 0 {
		t.Fatalf("%d reads failed and %d were empty during the switch", l.readErrs.Load(), l.empties.Load())
	}
	if m := l.mismatch.Load(); m != nil {
		v := m.([]any)
		t.Fatalf("frozen reader %d read %v during the switch, want %v", v[0], v[1], want[v[0].(int64)])
	}
	if l.frozenReads.Load() == 0 {
		t.Fatal("no frozen feed was read during the switch")
	}

	recs, err := readmodel.LoadVersionRecords(ctx, s.DB.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if rec.Projection == readmodel.ProjectionInbox && (rec.Version != 2 || rec.InboxLayout != "packed" || homefeed.CheckVersion(rec) != nil || rec.InboxMax != policies.InboxMax) {
			t.Fatalf("inbox record after the switch: %+v, want version 2, packed, %d", rec, policies.InboxMax)
		}
	}
	// The supervisor's inbox projector now pushes into the inboxes of
	// version 2: a new post of a frozen author reaches a frozen reader's
	// buffer or sealed string, and the feed shows it.
	p, err := s.Commands.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: frozenAuthors[0], Content: "after the switch"})
	if err != nil {
		t.Fatal(err)
	}
	s.quiesce(t)
	v2 := readmodel.Keys{Prefix: s.Prefix, Versions: readmodel.Versions{}.With(readmodel.ProjectionInbox, 2)}
	got, err := homefeed.NewInboxes(v2, pcfg.Policy()).Posts(ctx, s.Redis, frozen[0])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got, p.ID) {
		t.Fatalf("the inbox of %d at version 2 lacks the post pushed after the switch (%d posts)", frozen[0], len(got))
	}
	if n := sortedSetInboxes(t, s); n != 0 {
		t.Errorf("%d sorted-set inboxes left after the cleanup", n)
	}
	if kv := s.keyVersions(t); kv["inbox/v1"] != 0 || kv["inbox/v2"] == 0 {
		t.Errorf("after the switch want only version 2 inboxes: %v", kv)
	}
	s.checkConverged(t)
	for _, r := range frozen {
		w, err := s.truth(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		g, err := s.read(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(g, w) {
			t.Errorf("frozen reader %d after the switch:\n got %v\nwant %v", r, g, w)
		}
	}
}

// sortedSetInboxes counts the sorted-set inbox keys (`feed:{u}`, of any
// version) under the system's prefix.
func sortedSetInboxes(t *testing.T, s *system) int {
	t.Helper()
	version := regexp.MustCompile(`^v[0-9]+:`)
	n := 0
	iter := s.Redis.Scan(context.Background(), 0, escapeGlob(s.Prefix)+"*", 1000).Iterator()
	for iter.Next(context.Background()) {
		k := version.ReplaceAllString(strings.TrimPrefix(iter.Val(), s.Prefix), "")
		if strings.HasPrefix(k, "feed:{") {
			n++
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}
