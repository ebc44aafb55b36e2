package commands_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/snowflake"
	"github.com/feedco/feed/testkit/testenv"
)

// answers records what each step of a script answered; keyed gives each
// step an idempotency key of its own (the keyed transaction), else none
// (the batch).
type answers struct {
	t     *testing.T
	keyed bool
	owner int64 // scopes the keys
	n     int
	got   []string
}

func (a *answers) key() string {
	a.n++
	if !a.keyed {
		return ""
	}
	return fmt.Sprintf("k%d-%d", a.owner, a.n)
}

func (a *answers) step(name string, changed bool, err error) {
	a.t.Helper()
	switch {
	case errors.Is(err, commands.ErrBlocked):
		a.got = append(a.got, name+": blocked")
	case errors.Is(err, commands.ErrNotFound):
		a.got = append(a.got, name+": not found")
	case err != nil:
		a.t.Fatalf("%s: %v", name, err)
	default:
		a.got = append(a.got, fmt.Sprintf("%s: %v", name, changed))
	}
}

// followScript runs the same follows, unfollows and a block over three
// users and two unknown ids, through Do with an idempotency key (the
// transaction) or without (the batch), and returns what each step
// answered.
func followScript(t *testing.T, c *commands.Commands, a, y, z int64, keyed bool) []string {
	t.Helper()
	ctx := context.Background()
	const missing = 4_242_424
	ans := &answers{t: t, keyed: keyed, owner: a}
	follow := func(name string, from, to int64) {
		changed, _, err := c.Follow.Do(ctx, commands.Follow{FollowerID: from, FolloweeID: to}, ans.key())
		ans.step(name, changed, err)
	}
	unfollow := func(name string, from, to int64) {
		changed, _, err := c.Unfollow.Do(ctx, commands.Unfollow{FollowerID: from, FolloweeID: to}, ans.key())
		ans.step(name, changed, err)
	}
	unfollow("unfollow a z", a, z)
	follow("follow a z", a, z)
	follow("follow a z again", a, z)
	follow("follow y z", y, z)
	follow("follow z y", z, y)
	unfollow("unfollow a z", a, z)
	if _, err := c.Block.Handle(ctx, commands.Block{BlockerID: z, BlockedID: y}); err != nil {
		t.Fatal(err)
	}
	follow("follow y z, z blocks y", y, z)
	follow("follow z y, z blocks y", z, y)
	unfollow("unfollow y z, z blocks y", y, z)
	follow("follow a unknown", a, missing)
	follow("follow unknown a", missing, a)
	unfollow("unfollow a unknown", a, missing)
	follow("follow a z at last", a, z)
	return ans.got
}

// followRows is what the script left in PostgreSQL, with the users' ids
// replaced by their letters so that two runs on different users compare.
func followRows(t *testing.T, pool *pgxpool.Pool, a, y, z int64) []string {
	t.Helper()
	name := map[int64]string{a: "a", y: "y", z: "z"}
	var rows []string
	for _, pair := range [][2]int64{{a, z}, {y, z}, {z, y}} {
		for _, e := range streamEvents(t, pool, events.FollowStream(pair[0], pair[1])) {
			rows = append(rows, fmt.Sprintf("%s->%s v%d %s followee followers %d actor is follower %v",
				name[pair[0]], name[pair[1]], e.Version, e.Type, followeeFollowers(e.Event), e.Meta.Actor == fmt.Sprint(pair[0])))
		}
	}
	for _, id := range []int64{a, y, z} {
		var followers, following int64
		if err := pool.QueryRow(context.Background(), `SELECT follower_count, following_count FROM users WHERE id = $1`, id).Scan(&followers, &following); err != nil {
			t.Fatal(err)
		}
		var rowsFollowing, rowsFollowers int64
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE follower_id = $1), count(*) FILTER (WHERE followee_id = $1) FROM follows`, id).Scan(&rowsFollowing, &rowsFollowers); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, fmt.Sprintf("%s: %d followers (%d rows), %d following (%d rows)", name[id], followers, rowsFollowers, following, rowsFollowing))
	}
	return rows
}

// A follow or unfollow without an idempotency key runs as one batch
// (pairChange.batch); with a key, in the keyed transaction. Both
// answer the same and leave the same events, counts and rows, blocks and
// unknown users included.
func TestFollowStatementMatchesTransaction(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	var runs [2][]string
	var rows [2][]string
	for i, keyed := range []bool{false, true} {
		a, y, z := register(t, c, "a"), register(t, c, "y"), register(t, c, "z")
		runs[i] = followScript(t, c, a, y, z, keyed)
		rows[i] = followRows(t, b.pool, a, y, z)
	}
	want := []string{
		"unfollow a z: false", "follow a z: true", "follow a z again: false", "follow y z: true", "follow z y: true",
		"unfollow a z: true", "follow y z, z blocks y: blocked", "follow z y, z blocks y: blocked",
		"unfollow y z, z blocks y: false", "follow a unknown: not found", "follow unknown a: not found",
		"unfollow a unknown: not found", "follow a z at last: true",
	}
	if fmt.Sprint(runs[0]) != fmt.Sprint(want) {
		t.Fatalf("batch answered\n%q\nwant\n%q", runs[0], want)
	}
	if fmt.Sprint(runs[1]) != fmt.Sprint(want) {
		t.Fatalf("transaction answered\n%q\nwant\n%q", runs[1], want)
	}
	wantRows := []string{
		"a->z v1 user.followed.v1 followee followers 1 actor is follower true",
		"a->z v2 user.unfollowed.v1 followee followers 1 actor is follower true",
		"a->z v3 user.followed.v1 followee followers 1 actor is follower true",
		"y->z v1 user.followed.v1 followee followers 2 actor is follower true",
		"y->z v2 user.unfollowed.v1 followee followers 0 actor is follower true", // the block's
		"z->y v1 user.followed.v1 followee followers 1 actor is follower true",
		"z->y v2 user.unfollowed.v1 followee followers 0 actor is follower true", // the block's
		"a: 0 followers (0 rows), 1 following (1 rows)",
		"y: 0 followers (0 rows), 0 following (0 rows)",
		"z: 1 followers (1 rows), 0 following (0 rows)",
	}
	for i, r := range rows {
		if fmt.Sprint(r) != fmt.Sprint(wantRows) {
			t.Fatalf("run %d left\n%q\nwant\n%q", i, r, wantRows)
		}
	}
}

// countingDB counts the calls a command makes on the pool.
type countingDB struct {
	pool                       *pgxpool.Pool
	begins, batches, queryRows atomic.Int32
}

func (d *countingDB) Begin(ctx context.Context) (pgx.Tx, error) {
	d.begins.Add(1)
	return d.pool.Begin(ctx)
}

func (d *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	d.queryRows.Add(1)
	return d.pool.QueryRow(ctx, sql, args...)
}

func (d *countingDB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	d.batches.Add(1)
	return d.pool.SendBatch(ctx, b)
}

// Without a key a follow, an unfollow, a mute and an unmute are one batch
// each and begin no transaction; with a key a follow is a transaction.
func TestFollowStatementIsOneBatch(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ids, err := snowflake.New(1)
	if err != nil {
		t.Fatal(err)
	}
	cd := &countingDB{pool: db.Pool}
	c, err := commands.New(cd, ids, commands.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, z := register(t, c, "a"), register(t, c, "z")
	cd.begins.Store(0)
	if changed, err := c.Follow.Handle(ctx, commands.Follow{FollowerID: a, FolloweeID: z}); err != nil || !changed {
		t.Fatalf("follow: %v %v", changed, err)
	}
	if changed, err := c.Unfollow.Handle(ctx, commands.Unfollow{FollowerID: a, FolloweeID: z}); err != nil || !changed {
		t.Fatalf("unfollow: %v %v", changed, err)
	}
	if changed, err := c.Mute.Handle(ctx, commands.Mute{MuterID: a, MutedID: z}); err != nil || !changed {
		t.Fatalf("mute: %v %v", changed, err)
	}
	if changed, err := c.Unmute.Handle(ctx, commands.Unmute{MuterID: a, MutedID: z}); err != nil || !changed {
		t.Fatalf("unmute: %v %v", changed, err)
	}
	if b, n, q := cd.begins.Load(), cd.batches.Load(), cd.queryRows.Load(); b != 0 || n != 4 || q != 0 {
		t.Fatalf("without a key: %d transactions, %d batches, %d single queries; want 0, 4, 0", b, n, q)
	}
	if _, _, err := c.Follow.Do(ctx, commands.Follow{FollowerID: a, FolloweeID: z}, "key-1"); err != nil {
		t.Fatal(err)
	}
	if b := cd.begins.Load(); b != 1 {
		t.Fatalf("with a key: %d transactions, want 1", b)
	}
}

// A follow whose batch is cut off (its backend terminated while it waits
// for a user's lock) is ErrOutcomeUnknown and leaves nothing: the batch
// is one transaction.
func TestFollowStatementTerminatedMidBatch(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	a, z, y := register(t, c, "a"), register(t, c, "z"), register(t, c, "y")
	tx := openFollow(t, c, b.pool, y, z) // holds y's and z's rows
	errc := make(chan error, 1)
	go func() {
		_, err := c.Follow.Handle(ctx, commands.Follow{FollowerID: a, FolloweeID: z})
		errc <- err
	}()
	terminate(t, b.pool, waitingFor(t, b.pool, "FOR NO KEY UPDATE", "follow"))
	if err := <-errc; !errors.Is(err, commands.ErrOutcomeUnknown) {
		t.Fatalf("want ErrOutcomeUnknown, got %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if evs := streamEvents(t, b.pool, events.FollowStream(a, z)); len(evs) != 0 {
		t.Fatalf("%d events of a cut-off follow", len(evs))
	}
	zu, err := c.GetUser(ctx, z)
	if err != nil {
		t.Fatal(err)
	}
	au, err := c.GetUser(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if zu.FollowerCount != 1 || au.FollowingCount != 0 { // y's follow only
		t.Fatalf("counts after a cut-off follow: z has %d followers, a follows %d", zu.FollowerCount, au.FollowingCount)
	}
}

// A mute or unmute without an idempotency key runs as one batch, with a
// key in the keyed transaction; both answer the same and append the same
// events, whose payloads are events.Encode's of the pair's state at that
// point (following, the muted account's followers).
func TestMuteStatementMatchesTransaction(t *testing.T) {
	t.Parallel()
	c, b := setup(t, commands.Config{})
	ctx := context.Background()
	for _, keyed := range []bool{false, true} {
		m, x, f := register(t, c, "m"), register(t, c, "x"), register(t, c, "f")
		ans := &answers{t: t, keyed: keyed, owner: m}
		for _, fl := range [][2]int64{{f, x}, {m, x}} {
			if _, err := c.Follow.Handle(ctx, commands.Follow{FollowerID: fl[0], FolloweeID: fl[1]}); err != nil {
				t.Fatal(err)
			}
		}
		mute := func(name string, muter, muted int64) {
			changed, _, err := c.Mute.Do(ctx, commands.Mute{MuterID: muter, MutedID: muted}, ans.key())
			ans.step(name, changed, err)
		}
		unmute := func(name string, muter, muted int64) {
			changed, _, err := c.Unmute.Do(ctx, commands.Unmute{MuterID: muter, MutedID: muted}, ans.key())
			ans.step(name, changed, err)
		}
		unmute("unmute x", m, x)
		mute("mute x", m, x)
		mute("mute x again", m, x)
		unmute("unmute x", m, x)
		if _, err := c.Unfollow.Handle(ctx, commands.Unfollow{FollowerID: m, FolloweeID: x}); err != nil {
			t.Fatal(err)
		}
		mute("mute x, not followed", m, x)
		mute("mute unknown", m, 4_242_424)
		unmute("unmute by unknown", 4_242_424, x)
		want := []string{"unmute x: false", "mute x: true", "mute x again: false", "unmute x: true",
			"mute x, not followed: true", "mute unknown: not found", "unmute by unknown: not found"}
		if fmt.Sprint(ans.got) != fmt.Sprint(want) {
			t.Fatalf("keyed %v answered\n%q\nwant\n%q", keyed, ans.got, want)
		}
		wantEvents := []events.Event{
			events.Muted{MuterID: m, MutedID: x, Following: true, MutedFollowers: 2},
			events.Unmuted{MuterID: m, MutedID: x, Following: true, MutedFollowers: 2},
			events.Muted{MuterID: m, MutedID: x, Following: false, MutedFollowers: 1},
		}
		evs := streamEvents(t, b.pool, events.MuteStream(m, x))
		if len(evs) != len(wantEvents) {
			t.Fatalf("keyed %v: %d events, want %d", keyed, len(evs), len(wantEvents))
		}
		for i, w := range wantEvents {
			enc, err := events.Encode(w)
			if err != nil {
				t.Fatal(err)
			}
			var same bool
			if err := b.pool.QueryRow(ctx, `SELECT payload = $3::jsonb FROM events WHERE stream_id = $1 AND stream_version = $2`,
				events.MuteStream(m, x), i+1, string(enc)).Scan(&same); err != nil || !same || evs[i].Type != w.EventType() || evs[i].Meta.Actor != fmt.Sprint(m) {
				t.Fatalf("keyed %v: event %d is %s %+v (%v), want %s %s", keyed, i+1, evs[i].Type, evs[i].Event, err, w.EventType(), enc)
			}
		}
		var rows int
		if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM mutes WHERE muter_id = $1`, m).Scan(&rows); err != nil || rows != 1 {
			t.Fatalf("keyed %v: %d mutes rows (%v), want 1", keyed, rows, err)
		}
	}
}
