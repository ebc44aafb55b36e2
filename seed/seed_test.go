package seed

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/progress"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/testkit/testenv"
)

var testEnd = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func smallParams(seed uint64) Params {
	return Params{Users: 400, Seed: seed, AvgFollows: 25, Posts: 600, Celebrities: 3, Threshold: 80, Days: 2, End: testEnd}
}

// TestGenerateDeterministic: the same parameters give the same dataset
// (digest over users, edges in order, posts with ids and contents); another
// seed gives another one.
func TestGenerateDeterministic(t *testing.T) {
	t.Parallel()
	gen := func(p Params) *Dataset {
		d, err := Generate(p)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	a, b, c := gen(smallParams(1)), gen(smallParams(1)), gen(smallParams(2))
	if a.Digest() != b.Digest() {
		t.Fatalf("same seed, different digests %s %s", a.Digest(), b.Digest())
	}
	if a.Digest() == c.Digest() {
		t.Fatalf("seeds 1 and 2 give the same digest %s", a.Digest())
	}
	if len(a.Edges) == 0 || len(a.Posts) != 600 {
		t.Fatalf("dataset has %d edges, %d posts", len(a.Edges), len(a.Posts))
	}
	// Determinism must hold for the event ids too.
	ia, ib := &eventIDs{seed: 1}, &eventIDs{seed: 1}
	for range 10 {
		if ia.next() != ib.next() {
			t.Fatal("event ids differ for the same seed")
		}
	}
}

// TestGenerateShape: the follower distribution has the asked mean, is
// heavy-tailed (a few accounts at or over the threshold, the median far
// below the mean's tail), edges are unique and never self-follows, and post
// ids are unique Snowflake ids whose millisecond is created_at, in the past
// window.
func TestGenerateShape(t *testing.T) {
	t.Parallel()
	d, err := Generate(Params{Users: 5000, Seed: 7, AvgFollows: 60, Posts: 20000, Celebrities: 5, Threshold: 1000, Days: 3, End: testEnd})
	if err != nil {
		t.Fatal(err)
	}
	st := d.Stats()
	if st.MeanFollowers < 55 || st.MeanFollowers > 65 {
		t.Errorf("mean followers %.1f, want about 60", st.MeanFollowers)
	}
	if st.OverThreshold != 5 {
		t.Errorf("%d accounts over the threshold, want the 5 celebrities", st.OverThreshold)
	}
	if st.MaxFollowers < 2000 || st.P50 >= 60 {
		t.Errorf("not heavy-tailed: %+v", st)
	}
	seen := map[uint64]bool{}
	for _, e := range d.Edges {
		if seen[e] || e>>32 == e&0xffffffff {
			t.Fatalf("duplicate or self edge %x", e)
		}
		seen[e] = true
	}
	ids := map[int64]bool{}
	from := testEnd.Add(-3 * 24 * time.Hour)
	for i, p := range d.Posts {
		if ids[p.ID] {
			t.Fatalf("duplicate post id %d", p.ID)
		}
		ids[p.ID] = true
		if !snowflake.Time(p.ID).Equal(p.CreatedAt) || p.CreatedAt.Before(from) || !p.CreatedAt.Before(testEnd) {
			t.Fatalf("post %d: created %s, id time %s", p.ID, p.CreatedAt, snowflake.Time(p.ID))
		}
		if i > 0 && p.ID <= d.Posts[i-1].ID {
			t.Fatalf("post ids not increasing at %d", i)
		}
	}
}

// TestWriteConsistent writes a small dataset and checks the log against the
// inline tables: counts in users equal the follows rows, each followee's
// Followed events carry 1..n in commit (= position, one writer) order, each
// PostCreated carries its author's follower count, streams are at version
// 1, and the payloads decode. A second write is refused as non-empty.
func TestWriteConsistent(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	d, err := Generate(smallParams(3))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sum, err := Write(ctx, db.Pool, d, WriteConfig{BatchEvents: 1000, Progress: progress.NewWith(&out, progress.Options{Interval: time.Nanosecond})})
	if err != nil {
		t.Fatal(err)
	}
	want := int64(400 + len(d.Edges) + 600)
	if sum.Events != want || sum.Transactions < int(want/1000) {
		t.Errorf("summary %+v, want %d events", sum, want)
	}
	// Each phase ends with a line of all its events.
	for _, phase := range []string{
		"seed: users 100% 400/400 events ",
		fmt.Sprintf("seed: follows 100%% %d/%d events ", len(d.Edges), len(d.Edges)),
		"seed: posts 100% 600/600 events ",
	} {
		if !strings.Contains(out.String(), phase) {
			t.Errorf("no progress line %q:\n%s", phase, out.String())
		}
	}
	var n int64
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n); err != nil || n != want {
		t.Fatalf("events %d (%v), want %d", n, err, want)
	}
	var bad int64
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM users u WHERE
		follower_count <> (SELECT count(*) FROM follows WHERE followee_id = u.id) OR
		following_count <> (SELECT count(*) FROM follows WHERE follower_id = u.id)`).Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("%d users with counts that disagree with follows (%v)", bad, err)
	}
	rows, err := db.Pool.Query(ctx, `SELECT type, payload, stream_version FROM events ORDER BY position`)
	if err != nil {
		t.Fatal(err)
	}
	running := map[int64]int64{}
	final := map[int64]int64{}
	var posts []events.PostCreated
	for rows.Next() {
		var typ string
		var payload json.RawMessage
		var v int64
		if err := rows.Scan(&typ, &payload, &v); err != nil {
			t.Fatal(err)
		}
		if v != 1 {
			t.Fatalf("%s at version %d", typ, v)
		}
		ev, err := events.DefaultCodec.Decode(typ, payload)
		if err != nil {
			t.Fatal(err)
		}
		switch e := ev.(type) {
		case events.Followed:
			running[e.FolloweeID]++
			if e.FolloweeFollowers != running[e.FolloweeID] {
				t.Fatalf("followed %d: followeeFollowers %d, want %d", e.FolloweeID, e.FolloweeFollowers, running[e.FolloweeID])
			}
		case events.PostCreated:
			posts = append(posts, e)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	r2, err := db.Pool.Query(ctx, `SELECT id, follower_count FROM users`)
	if err != nil {
		t.Fatal(err)
	}
	for r2.Next() {
		var id, c int64
		if err := r2.Scan(&id, &c); err != nil {
			t.Fatal(err)
		}
		final[id] = c
		if running[id] != c {
			t.Fatalf("user %d: %d Followed events, follower_count %d", id, running[id], c)
		}
	}
	if len(posts) != 600 {
		t.Fatalf("%d PostCreated, want 600", len(posts))
	}
	for _, p := range posts {
		if p.AuthorFollowers != final[p.AuthorID] {
			t.Fatalf("post %d: authorFollowers %d, author has %d", p.PostID, p.AuthorFollowers, final[p.AuthorID])
		}
		var at time.Time
		if err := db.Pool.QueryRow(ctx, `SELECT created_at FROM posts WHERE id = $1 AND author_id = $2`, p.PostID, p.AuthorID).Scan(&at); err != nil || !at.Equal(p.CreatedAt) {
			t.Fatalf("post %d row: %v %v", p.PostID, at, err)
		}
	}
	// The identity sequence is past the seeded ids.
	var next int64
	if err := db.Pool.QueryRow(ctx, `INSERT INTO users (name) VALUES ('later') RETURNING id`).Scan(&next); err != nil || next != 401 {
		t.Fatalf("next user id %d (%v), want 401", next, err)
	}
	off, nonEmpty, err := IDOffset(ctx, db.Pool)
	if err != nil || !nonEmpty || off != 401 {
		t.Fatalf("IDOffset = %d, %v, %v", off, nonEmpty, err)
	}
}
