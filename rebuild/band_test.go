package rebuild

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/events"
	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/systest"
	"github.com/feedco/feed/testkit/testenv"
)

// bandPolicies are policies with a celebrity band: an author becomes a
// celebrity at 8 followers and stops being one below 5.
var bandPolicies = func() projections.Config {
	c := policies
	c.CelebrityBand = 3
	return c
}()

// hoverer is an author whose follower count the test moves one follow at
// a time among fans, keeping the state the band rule gives (celeb).
type hoverer struct {
	s         *system
	star      int64
	fans      []int64 // the seeded users, in order
	following []int64 // the fans who follow star now, in the order they followed
	pol       readmodel.Policy
	celeb     bool
	flips     int  // changes of celeb
	celebB0   bool // the state without a band
	flipsB0   int  // its changes
}

func newHoverer(t *testing.T, s *system, pol readmodel.Policy) *hoverer {
	t.Helper()
	u, err := s.Commands.RegisterUser.Handle(context.Background(), commands.RegisterUser{Name: "star"})
	if err != nil {
		t.Fatal(err)
	}
	h := &hoverer{s: s, star: u.ID, fans: slices.Clone(s.users), pol: pol.WithDefaults()}
	s.users = append(s.users, u.ID)
	return h
}

func (h *hoverer) count() int64 { return int64(len(h.following)) }

// move follows (up) or unfollows star by one fan, then star posts, and
// returns the post and whether star is a celebrity by the band rule.
func (h *hoverer) move(t *testing.T, up bool) (int64, bool) {
	t.Helper()
	ctx := context.Background()
	if up {
		for _, f := range h.fans {
			if !slices.Contains(h.following, f) {
				if _, err := h.s.Commands.Follow.Handle(ctx, commands.Follow{FollowerID: f, FolloweeID: h.star}); err != nil {
					t.Fatal(err)
				}
				h.following = append(h.following, f)
				break
			}
		}
	} else {
		f := h.following[len(h.following)-1]
		if _, err := h.s.Commands.Unfollow.Handle(ctx, commands.Unfollow{FollowerID: f, FolloweeID: h.star}); err != nil {
			t.Fatal(err)
		}
		h.following = h.following[:len(h.following)-1]
	}
	n := h.count()
	before := h.celeb
	if c, ok := h.pol.Decided(n); ok {
		h.celeb = c
	}
	if h.celeb != before {
		h.flips++
	}
	if b0 := h.pol.IsCelebrity(n); b0 != h.celebB0 {
		h.celebB0 = b0
		h.flipsB0++
	}
	p, err := h.s.Commands.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: h.star, Content: "hover post"})
	if err != nil {
		t.Fatal(err)
	}
	return p.ID, h.celeb
}

// inSet reports whether star is in the celebrity set of the followers
// version of keys.
func (h *hoverer) inSet(t *testing.T, keys readmodel.Keys) bool {
	t.Helper()
	members, _, err := readmodel.NewCelebrities(keys).Members(context.Background(), h.s.Redis)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(members, func(c readmodel.Celebrity) bool { return c.ID == h.star })
}

// check waits for the pipeline, then checks that the celebrity set holds
// star as the band rule says, that post was pushed to a following fan's
// inbox iff star is not a celebrity, and that every feed equals the
// source of truth (the oracle).
func (h *hoverer) check(t *testing.T, step string, post int64) {
	t.Helper()
	h.s.quiesce(t)
	keys := h.s.activeKeys(t)
	if got := h.inSet(t, keys); got != h.celeb {
		t.Fatalf("%s: %d followers: star in the celebrity set %v, want %v", step, h.count(), got, h.celeb)
	}
	if post != 0 && len(h.following) > 0 {
		fan := h.following[0]
		inbox, err := homefeed.NewInboxes(keys, h.pol).Posts(context.Background(), h.s.Redis, fan)
		if err != nil {
			t.Fatal(err)
		}
		if pushed := slices.Contains(inbox, post); pushed == h.celeb {
			t.Fatalf("%s: %d followers, celebrity %v: the post pushed to fan %d: %v", step, h.count(), h.celeb, fan, pushed)
		}
	}
	h.s.checkConverged(t)
	if t.Failed() {
		t.FailNow()
	}
}

// activeKeys names the read models at the active versions.
func (s *system) activeKeys(t *testing.T) readmodel.Keys {
	t.Helper()
	vs, err := readmodel.LoadVersions(context.Background(), s.DB.Pool)
	if err != nil {
		t.Fatal(err)
	}
	return readmodel.Keys{Prefix: s.Prefix, Versions: vs}
}

// logEvents reads the events of the given types from the log, in position
// order, decoded as the projectors get them (no commit LSN: applied
// unguarded, in this order).
func (s *system) logEvents(t *testing.T, types ...string) []projections.Decoded {
	t.Helper()
	rows, err := s.DB.Pool.Query(context.Background(), `SELECT position, event_id::text, stream_id, stream_version, type, payload, recorded_at
		FROM events WHERE type = ANY($1) ORDER BY position`, types)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	codec := events.NewCodec(nil)
	var out []projections.Decoded
	for rows.Next() {
		var env events.Envelope
		if err := rows.Scan(&env.Position, &env.EventID, &env.StreamID, &env.StreamVersion, &env.Type, &env.Payload, &env.RecordedAt); err != nil {
			t.Fatal(err)
		}
		ev, err := codec.DecodeEnvelope(env)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, projections.Decoded{Env: env, Ev: ev})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCelebrityBandHovering moves an author's follower count around the
// celebrity threshold (8) with a band of 3, one follow or unfollow at a
// time, the author posting after each: star becomes a celebrity at 8 and
// stops only below 5 (at 4), never at the 7 <-> 8 steps that flip it
// without a band. After each step the celebrity set says what the rule
// says, the new post is pushed iff star is not a celebrity, and every
// feed equals the source of truth; the inbox projector handled exactly
// one downward crossing (one backfill of the followers), not one per
// hover. Then: a redelivery of every follow event (unguarded, in log
// order) through the followers projector and of every event through the
// inbox projector leaves the set and the feeds as they were; `feed
// rebuild followers` builds from the log the same set (star's count, 8
// then 5, inside and outside the band); and a crash between the set's
// update and the backfill of a downward crossing (the followers
// projector applied it, the inbox projector had not) converges after the
// restart.
func TestCelebrityBandHovering(t *testing.T) {
	t.Parallel()
	s := startSystemWith(t, systest.Config{Name: "rbb", Partitions: 4, Projections: bandPolicies}, 17)
	ctx := context.Background()
	s.seed(t, 10, 2, 20)
	h := newHoverer(t, s, bandPolicies.Policy())
	m := s.ProjectorMetrics()

	for h.count() < 7 {
		h.move(t, true)
	}
	// The follows so far are applied before the 8th: a follow applied
	// after a later post of star (it lies in another partition) backfills
	// star's present posts, a celebrity's post included, which the read's
	// merge drops as a duplicate of the pull; the check below is about
	// the push decision alone.
	s.quiesce(t)
	post, _ := h.move(t, true)
	h.check(t, "up to 8", post)
	if !h.celeb {
		t.Fatal("8 followers: not a celebrity")
	}
	downs := m.CrossDowns()
	// Around the threshold: 7 8 7 6 7 6 5 6 5 4 (out) 5 4 (no crossing:
	// already out) 5 6 7 6 7 8 (in) 7 8.
	for i, up := range []bool{false, true, false, false, true, false, false, true, false, false,
		true, false, true, true, true, false, true, true, false, true} {
		post, _ := h.move(t, up)
		h.check(t, "hover step "+itoa(i), post)
	}
	if h.flips != 3 || h.flipsB0 <= h.flips {
		t.Fatalf("star flipped %d times (%d without the band), want 3 (in at 8, out at 4, in at 8)", h.flips, h.flipsB0)
	}
	if d := m.CrossDowns() - downs; d != 1 {
		t.Fatalf("the inbox projector handled %d downward crossings while star hovered, want 1 (at 4)", d)
	}
	t.Logf("hover: %d flips with band 3, %d without", h.flips, h.flipsB0)

	// Redelivery, in log order, unguarded: the same set and feeds.
	s.StopProjectors()
	cfg := bandPolicies
	cfg.Keys = readmodel.Keys{Prefix: s.Prefix}
	fol, err := projections.NewFollowers(cfg, s.Redis)
	if err != nil {
		t.Fatal(err)
	}
	follows := s.logEvents(t, events.TypeFollowed, events.TypeUnfollowed)
	if err := fol.ApplyBatch(ctx, follows); err != nil {
		t.Fatal(err)
	}
	inbox, err := projections.NewInbox(cfg, s.DB.Pool, s.Redis, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range s.logEvents(t, events.TypeFollowed, events.TypeUnfollowed, events.TypePostCreated) {
		if err := inbox.Apply(ctx, d.Env, d.Ev); err != nil {
			t.Fatal(err)
		}
	}
	s.StartProjectors(t)
	h.check(t, "after the redelivery", 0)

	// A rebuild from the log: the same set, at 8 (in) and at 5 (in, inside
	// the band, from a history that was at 8).
	for _, step := range []struct {
		name  string
		moves []bool
		to    int
	}{
		{"rebuild at 8", nil, 2},
		{"rebuild at 5", []bool{false, false, false}, 3},
	} {
		var post int64
		for _, up := range step.moves {
			post, _ = h.move(t, up)
		}
		h.check(t, step.name+" (live)", post)
		r := s.rebuilderWith(t, cfg, nil)
		res, err := r.Run(ctx, readmodel.ProjectionFollowers)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 1 || res[0].To != step.to {
			t.Fatalf("%s: %+v, want followers to version %d", step.name, res, step.to)
		}
		keys := readmodel.Keys{Prefix: s.Prefix, Versions: readmodel.Versions{}.With(readmodel.ProjectionFollowers, step.to)}
		if got := h.inSet(t, keys); got != h.celeb || !h.celeb {
			t.Fatalf("%s: %d followers: star in the rebuilt set %v, want %v", step.name, h.count(), got, h.celeb)
		}
		h.check(t, step.name, 0)
	}

	// The set lost (a Redis flush of it): the query side rebuilds it from
	// PostgreSQL, and star, at 5 followers after 8, is in it by the log.
	keys := s.activeKeys(t)
	if err := s.Redis.Del(ctx, keys.Celebrities(), keys.CelebritiesOrder()).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "a read rebuilds the celebrity set", func() bool {
		if _, err := s.read(ctx, h.following[0]); err != nil { // past the cache's TTL, finds the set without ~built
			t.Fatal(err)
		}
		_, built, err := readmodel.NewCelebrities(keys).Members(ctx, s.Redis)
		return err == nil && built
	})
	h.check(t, "the set rebuilt from PostgreSQL", 0)
	if members, built, err := readmodel.NewCelebrities(keys).Members(ctx, s.Redis); err != nil || !built ||
		!slices.ContainsFunc(members, func(c readmodel.Celebrity) bool { return c.ID == h.star }) {
		t.Fatalf("the set rebuilt from PostgreSQL (built %v, %v): %v, want star %d in it", built, err, members, h.star)
	}

	// A crash between the set's update and the backfill: star at 5, a
	// celebrity, loses a follower with the projectors stopped; the
	// followers projector's part of it is applied (the set says not a
	// celebrity), the inbox projector's is not; then the projectors start
	// again.
	s.StopProjectors()
	_, _ = h.move(t, false)
	if h.celeb {
		t.Fatalf("%d followers: still a celebrity", h.count())
	}
	s.WaitCDC(t, 60*time.Second)
	follows = s.logEvents(t, events.TypeUnfollowed)
	cfg.Keys = s.activeKeys(t)
	if cfg.Keys.Version(readmodel.ProjectionFollowers) != 3 {
		t.Fatalf("followers at version %d, want 3", cfg.Keys.Version(readmodel.ProjectionFollowers))
	}
	if fol, err = projections.NewFollowers(cfg, s.Redis); err != nil {
		t.Fatal(err)
	}
	if err := fol.ApplyBatch(ctx, follows[len(follows)-1:]); err != nil {
		t.Fatal(err)
	}
	if h.inSet(t, cfg.Keys) {
		t.Fatal("the crossing applied to the set: star still in it")
	}
	downs = m.CrossDowns()
	s.StartProjectors(t)
	h.check(t, "after the crash", 0)
	if d := m.CrossDowns() - downs; d != 1 {
		t.Fatalf("the inbox projector handled %d downward crossings after the restart, want 1", d)
	}
}

// TestCelebrityBandByRebuild moves a deployment from no band to a band
// of 3 with `feed rebuild all --celebrity-band 3`: an author who was at 8
// and fell to 6 is not a celebrity without the band, and is one with it
// (the new followers version's set, built from the log, holds them); the
// followers and inbox versions switch together and record the band; the
// running projectors adopt it (star's next post, at 6, is not pushed),
// and every feed equals the source of truth. A projector started with
// the old band, explicitly, refuses and says why.
func TestCelebrityBandByRebuild(t *testing.T) {
	t.Parallel()
	s := startSystemWith(t, systest.Config{Name: "rbc", Partitions: 4, Projections: policies}, 19)
	ctx := context.Background()
	s.seed(t, 10, 2, 20)
	h := newHoverer(t, s, policies.Policy())
	for h.count() < 8 {
		h.move(t, true)
	}
	h.move(t, false)
	post, _ := h.move(t, false)
	h.check(t, "6 followers without a band", post)
	if h.celeb {
		t.Fatal("6 followers without a band: a celebrity")
	}

	r := s.rebuilderWith(t, bandPolicies, nil)
	res, err := r.Run(ctx, All)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(projections.Names()) {
		t.Fatalf("rebuild all --celebrity-band 3: %+v, want every projection", res)
	}
	for _, x := range res {
		if x.To != 2 {
			t.Fatalf("rebuild all --celebrity-band 3: %+v, want every projection to version 2", res)
		}
	}
	recs, err := readmodel.LoadVersionRecords(ctx, s.DB.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if (rec.Projection == readmodel.ProjectionFollowers || rec.Projection == readmodel.ProjectionInbox) &&
			(rec.Version != 2 || !rec.BandRecorded || rec.CelebrityBand != 3 || rec.CelebrityThreshold != 8) {
			t.Fatalf("%s record %+v, want version 2, band 3, threshold 8", rec.Projection, rec)
		}
	}
	// With the band, star (8, then 6) is a celebrity.
	h.pol, h.celeb = bandPolicies.Policy().WithDefaults(), true
	v2 := readmodel.Keys{Prefix: s.Prefix, Versions: readmodel.Versions{}.With(readmodel.ProjectionFollowers, 2).With(readmodel.ProjectionInbox, 2)}
	if !h.inSet(t, v2) {
		t.Fatal("the followers version built with band 3: star (8, then 6 followers) not in the set")
	}
	s.quiesce(t)
	s.checkConverged(t)
	post, _ = h.move(t, true) // 7: inside the band, still a celebrity
	s.quiesce(t)
	fan := h.following[0]
	inbox, err := homefeed.NewInboxes(v2, h.pol).Posts(ctx, s.Redis, fan)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(inbox, post) {
		t.Fatal("star's post at 7 followers, a celebrity by the band, pushed")
	}
	s.checkConverged(t)

	// A projector with the old band set explicitly refuses.
	err = readmodel.CheckPolicy(ctx, s.DB.Pool, policies.Policy())
	if !errors.Is(err, readmodel.ErrPolicyMismatch) || !strings.Contains(err.Error(), "FEED_CELEBRITY_BAND=0") ||
		!strings.Contains(err.Error(), "celebrity band 3") || !strings.Contains(err.Error(), "feed rebuild inbox --celebrity-band 0") {
		t.Fatalf("a projector with band 0 against a recorded 3: %v", err)
	}
}
