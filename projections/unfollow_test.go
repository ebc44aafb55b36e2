package projections_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
)

// An unfollow removes every post of that author from the follower's inbox,
// also posts older than the author's newest ones: here the author posted
// more as a celebrity (never pushed) than the inbox holds entries, so
// "the author's newest ZCARD posts" would miss the two that were pushed.
// Found by the convergence oracle (e2e), where a user who then follows
// nobody had the leftovers shown: without following:{u} the reader trusts
// the inbox.
func TestUnfollowRemovesOlderPushedPosts(t *testing.T) {
	t.Parallel()
	testUnfollowRemovesOlderPushedPosts(t)
}

func testUnfollowRemovesOlderPushedPosts(t *testing.T) {
	w := newWorld(t)
	rd := testenv.NewRedis(t)
	keys := readmodel.Keys{Prefix: rd.Prefix}
	ps := newProjectors(t, w, rd.Client, projections.Config{Keys: keys, CelebrityThreshold: 2})

	// Each step is applied before the next is written, as a projector that
	// keeps up sees them (a backfill reads the posts of that moment).
	done := 0
	apply := func() {
		t.Helper()
		applyAll(t, ps, w.envs[done:])
		done = len(w.envs)
	}
	reader, author, other, friend := w.user(true), w.user(true), w.user(true), w.user(true)
	w.follow(reader, friend)
	w.follow(reader, author) // 1 follower: pushed
	apply()
	p1, p2 := w.post(author), w.post(author)
	kept := w.post(friend)
	apply()
	w.follow(other, author) // 2 followers: a celebrity from now on
	apply()
	for range 6 {
		w.post(author) // pulled, never pushed
	}
	apply()
	ids, _, _ := inboxView(t, rd.Client, keys, reader)
	if !slices.Contains(ids, idstr(p1)) || !slices.Contains(ids, idstr(p2)) {
		t.Fatalf("before the unfollow the inbox holds %v, want the pushed posts %d and %d", ids, p1, p2)
	}

	w.unfollow(reader, author) // back to 1 follower: crosses down too
	apply()
	ids, _, _ = inboxView(t, rd.Client, keys, reader)
	if slices.Contains(ids, idstr(p1)) || slices.Contains(ids, idstr(p2)) {
		t.Errorf("after the unfollow the inbox still holds the author's posts: %v (pushed %d, %d)", ids, p1, p2)
	}
	if !slices.Contains(ids, idstr(kept)) {
		t.Errorf("the unfollow removed another author's post %d: %v", kept, ids)
	}
}

// removeAuthor's query scans the author's posts, not the primary key once
// per inbox member, under the generic plan a prepared statement settles
// on (seq scans off: the test database is small).
func TestAuthorPostsAmongPlan(t *testing.T) {
	w := newWorld(t)
	author := w.user(true)
	var ids []int64
	for range 5 {
		ids = append(ids, w.post(author))
	}
	// Authors with thousands of posts each, as in a real log: the
	// generic plan's estimate for author_id = $1 is then above its
	// guess for the array.
	other := w.user(true)
	w.exec(`INSERT INTO posts (id, author_id, content, created_at)
		SELECT $1::bigint + g, CASE WHEN g % 2 = 0 THEN $2::bigint ELSE $3::bigint END, 'filler', now() FROM generate_series(1, 20000) g`,
		ids[4]+1_000_000, author, other)
	ctx := context.Background()
	conn, err := w.db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, q := range []string{"SET plan_cache_mode = force_generic_plan", "SET enable_seqscan = off", "ANALYZE posts"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	defer conn.Exec(ctx, "RESET ALL")
	var plan string
	if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+homefeed.AuthorPostsAmongSQL, author, ids).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plan, `"posts_pkey"`) || !strings.Contains(plan, `"posts_author_time_idx"`) {
		t.Fatalf("plan does not scan posts_author_time_idx alone:\n%s", plan)
	}
	rows, err := conn.Query(ctx, homefeed.AuthorPostsAmongSQL, author, append(ids[:3:3], ids[4]+1000))
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, ids[:3]) {
		t.Fatalf("posts of %d among the members: %v, want %v", author, got, ids[:3])
	}
}
