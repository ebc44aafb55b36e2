// Package verify is the convergence oracle against a live system (`feed
// verify`, docs/rebuild.md "Verifying a live system"): it samples users,
// reads the newest posts of their home feeds through the query side, and
// compares them with the truth computed from PostgreSQL (truth.go, the one
// definition the test oracles share), naming for each difference what the
// read models hold. `feed rebuild` runs it on the version it built before
// switching to it; FEED_VERIFY_EVERY runs it periodically (Every).
package verify

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/readmodel"
)

// Config says what to verify and against which system. Zero values take
// the defaults.
type Config struct {
	// Prefix is the read models' namespace (readmodel.Keys.Prefix).
	Prefix string
	// Versions are the projection versions to read. Zero: the active ones,
	// read from PostgreSQL at the start of each run, with the policy each
	// was built with applied to Policy (readmodel.VersionRecord.Apply).
	// `feed rebuild` passes the active versions with the new one.
	Versions readmodel.Versions
	// Policy is the feed policy of the versions read (the inbox layout and
	// bound, the celebrity threshold): readmodel.ResolvePolicy's result.
	Policy readmodel.Policy
	// Users is how many users to sample (default 20); User, when set,
	// verifies that user alone.
	Users int
	User  int64
	// Depth is how many of each user's newest feed posts are compared
	// (default 50): the work per user is bounded by it.
	Depth int
	// PageSize is the query side's page size while reading them (default
	// 20, so a default run pages through cursors).
	PageSize int
	// Slot is CDC's replication slot; Kafka, Topic and GroupPrefix are the
	// projectors' broker, topic and consumer-group prefix: the barrier
	// (docs/rebuild.md) waits on them.
	Slot        string
	Kafka       kafka.Conn
	Topic       string
	GroupPrefix string
	// SettleTimeout bounds each barrier's wait (default 1 min).
	SettleTimeout time.Duration
	// Seed picks the sample (0: from the clock).
	Seed uint64
	// Logger receives the query side's warnings (nil: slog.Default()).
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.Users = cmp.Or(c.Users, 20)
	c.Depth = cmp.Or(c.Depth, 50)
	c.PageSize = cmp.Or(c.PageSize, 20)
	c.SettleTimeout = cmp.Or(c.SettleTimeout, time.Minute)
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate rejects a configuration that cannot run.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Users < 1 || c.User < 0:
		return fmt.Errorf("verify: users %d and user %d", c.Users, c.User)
	case c.Depth < 1 || c.Depth > 10_000:
		return fmt.Errorf("verify: depth %d must be in 1..10000", c.Depth)
	case c.PageSize < 1 || c.PageSize > queries.MaxLimit:
		return fmt.Errorf("verify: page size %d must be in 1..%d", c.PageSize, queries.MaxLimit)
	case c.Slot == "" || len(c.Kafka.Brokers) == 0 || c.Topic == "":
		return errors.New("verify: the CDC slot, the Kafka brokers and the topic are required (the barrier waits on them)")
	}
	return nil
}

// Difference is one way a user's feed, as the query side serves it,
// differs from the truth, with what the read models hold.
type Difference struct {
	User int64
	// Kind is duplicate, missing, foreign, order, fields (Diff), following
	// (following:{u} against SQL) or error.
	Kind string
	// Post is the post concerned (0: none), Author its author (0: unknown).
	Post, Author int64
	// Text says what differs; Where what the read models hold (the
	// reader's inbox, the author's timeline, the reader's following set,
	// the celebrity set).
	Text, Where string
}

// id says which difference d is, across two comparisons of one user.
func (d Difference) id() string {
	return d.Kind + "/" + strconv.FormatInt(d.Post, 10) + "/" + strconv.FormatInt(d.Author, 10)
}

func (d Difference) String() string {
	s := fmt.Sprintf("user %d: %s", d.User, d.Text)
	if d.Where != "" {
		s += "\n    where: " + d.Where
	}
	return s
}

// Report is one run's result.
type Report struct {
	// Lag says how the run accounted for the pipeline's lag: the barriers
	// it waited for and the re-check.
	Lag string
	// Versions are the projection versions read, with the policy.
	Versions readmodel.Versions
	Policy   readmodel.Policy
	// Users were compared; Cold of them had a read model not built (their
	// feed came from PostgreSQL, a comparison of the query side's
	// fallback, not of the read models); Posts is the posts compared.
	Users, Cold, Posts int
	// ColdUsers are the cold ones.
	ColdUsers []int64
	// Differences persisted across the second barrier.
	Differences []Difference
	Took        time.Duration
}

// OK reports whether the run found no difference.
func (r Report) OK() bool { return len(r.Differences) == 0 }

// Summary is the report's one-line account.
func (r Report) Summary() string {
	return fmt.Sprintf("%d users (%d cold), %d posts compared, %d differences in %v; versions %s; %s",
		r.Users, r.Cold, r.Posts, len(r.Differences), r.Took.Round(time.Millisecond), describeVersions(r.Versions, r.Policy), r.Lag)
}

func describeVersions(v readmodel.Versions, p readmodel.Policy) string {
	var parts []string
	for _, n := range readmodel.Projections() {
		parts = append(parts, fmt.Sprintf("%s v%d", n, v.Version(n)))
	}
	return fmt.Sprintf("%s (inbox max %d, celebrity threshold %d, band %d)", strings.Join(parts, ", "), p.InboxMax,
		p.CelebrityThreshold, p.CelebrityBand)
}

// Run verifies a sample of users once. An error is a failure to verify
// (a store unavailable, a barrier not reached), not a difference.
func Run(ctx context.Context, cfg Config, pool *pgxpool.Pool, rdb redis.UniversalClient) (Report, error) {
	start := time.Now()
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	cfg = cfg.withDefaults()
	var rep Report
	vs, pol, err := versions(ctx, cfg, pool)
	if err != nil {
		return rep, err
	}
	rep.Versions, rep.Policy = vs, pol
	keys := readmodel.Keys{Prefix: cfg.Prefix, Versions: vs}
	feed, err := queries.New(queries.Config{Keys: keys, ReadOnly: true, ReadCacheKeys: -1, Logger: cfg.Logger}.WithPolicy(pol), pool, rdb)
	if err != nil {
		return rep, err
	}
	// Its background work (the deletion feed; read-only, it writes
	// nothing) runs while the verification does.
	fsvc := feed.Service()
	if err := fsvc.Start(ctx); err != nil {
		return rep, err
	}
	defer func() {
		if err := fsvc.Stop(); err != nil {
			cfg.Logger.Warn("verify: stop the query side", "err", err)
		}
	}()
	v := &verifier{cfg: cfg, pool: pool, rdb: rdb, keys: keys, pol: pol, feed: feed, vs: vs}

	users, err := v.sample(ctx)
	if err != nil {
		return rep, err
	}
	b1, err := v.barrier(ctx)
	if err != nil {
		return rep, err
	}
	first := map[int64][]Difference{}
	for _, u := range users {
		res, err := v.user(ctx, u)
		if err != nil {
			return rep, err
		}
		rep.Users++
		rep.Posts += res.posts
		if res.cold {
			rep.Cold++
			rep.ColdUsers = append(rep.ColdUsers, u)
		}
		if len(res.diffs) > 0 {
			first[u] = res.diffs
		}
	}
	rep.Lag = "compared after a barrier: " + b1
	if len(first) > 0 {
		// A difference may be an event still on its way: wait until what
		// was written up to now has been consumed, and keep only what is
		// still there.
		b2, err := v.barrier(ctx)
		if err != nil {
			return rep, err
		}
		persisted := 0
		for _, u := range users {
			if first[u] == nil {
				continue
			}
			res, err := v.user(ctx, u)
			if err != nil {
				return rep, err
			}
			before := map[string]bool{}
			for _, d := range first[u] {
				before[d.id()] = true
			}
			kept := false
			for _, d := range res.diffs {
				if before[d.id()] {
					rep.Differences = append(rep.Differences, d)
					kept = true
				}
			}
			if kept {
				persisted++
			}
		}
		rep.Lag += fmt.Sprintf("; %d users with differences re-checked after a second barrier (%s), %d still differ", len(first), b2, persisted)
	}
	rep.Took = time.Since(start)
	return rep, nil
}

// versions returns the versions to read and their policy.
func versions(ctx context.Context, cfg Config, pool *pgxpool.Pool) (readmodel.Versions, readmodel.Policy, error) {
	pol := cfg.Policy
	if cfg.Versions != (readmodel.Versions{}) {
		return cfg.Versions, pol.WithDefaults(), nil
	}
	recs, err := readmodel.LoadVersionRecords(ctx, pool)
	if err != nil {
		return readmodel.Versions{}, pol, err
	}
	vs := readmodel.DefaultVersions()
	for _, r := range recs {
		vs = vs.With(r.Projection, r.Version)
		if r.Projection == readmodel.ProjectionInbox {
			pol = r.Apply(pol)
		}
		if r.Projection == readmodel.ProjectionNotifications && r.NotificationsMax > 0 {
			pol.NotificationsMax = r.NotificationsMax
		}
	}
	return vs, pol.WithDefaults(), nil
}

type verifier struct {
	cfg  Config
	pool *pgxpool.Pool
	rdb  redis.UniversalClient
	keys readmodel.Keys
	pol  readmodel.Policy
	vs   readmodel.Versions
	feed *queries.Feed
}

// sample picks the users: cfg.User, or up to cfg.Users distinct active
// users (seen within the policy's InactiveAfter: the users whose inboxes
// fan-out maintains): all of them when there are no more, else each found
// by one primary-key probe at a random id between the lowest and the
// highest, so the cost does not grow with the number of users. With no
// active user it samples registered users.
func (v *verifier) sample(ctx context.Context) ([]int64, error) {
	if v.cfg.User > 0 {
		return []int64{v.cfg.User}, nil
	}
	since := time.Now().Add(-v.pol.InactiveAfter)
	probes := []struct{ all, bounds, probe string }{
		{`SELECT user_id FROM user_activity WHERE last_seen_at > $2 ORDER BY user_id LIMIT $1`,
			`SELECT min(user_id), max(user_id) FROM user_activity`,
			`SELECT user_id FROM user_activity WHERE user_id >= $1 AND last_seen_at > $2 ORDER BY user_id LIMIT 1`},
		{`SELECT id FROM users WHERE $2::timestamptz IS NOT NULL ORDER BY id LIMIT $1`,
			`SELECT min(id), max(id) FROM users`,
			`SELECT id FROM users WHERE id >= $1 AND $2::timestamptz IS NOT NULL ORDER BY id LIMIT 1`},
	}
	rng := rand.New(rand.NewPCG(v.cfg.Seed, 19))
	for _, p := range probes {
		// A population no larger than the sample is taken whole.
		rows, err := v.pool.Query(ctx, p.all, v.cfg.Users+1, since)
		if err != nil {
			return nil, fmt.Errorf("sample users: %w", err)
		}
		all, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return nil, fmt.Errorf("sample users: %w", err)
		}
		if len(all) > 0 && len(all) <= v.cfg.Users {
			return all, nil
		}
		var lo, hi *int64
		if err := v.pool.QueryRow(ctx, p.bounds).Scan(&lo, &hi); err != nil {
			return nil, fmt.Errorf("sample users: %w", err)
		}
		if lo == nil {
			continue
		}
		seen := map[int64]bool{}
		var out []int64
		for try := 0; try < 4*v.cfg.Users && len(out) < v.cfg.Users; try++ {
			at := *lo
			if *hi > *lo {
				at += rng.Int64N(*hi - *lo + 1)
			}
			var u int64
			err := v.pool.QueryRow(ctx, p.probe, at, since).Scan(&u)
			if errors.Is(err, pgx.ErrNoRows) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("sample users: %w", err)
			}
			if !seen[u] {
				seen[u] = true
				out = append(out, u)
			}
		}
		if len(out) > 0 {
			slices.Sort(out)
			return out, nil
		}
	}
	return nil, nil
}

// barrier waits until the pipeline has consumed everything committed
// before it was called: CDC has confirmed a WAL position read first (so
// Kafka acknowledged every event up to it), then every group of the
// versions read has committed the topic's end offsets read after that. It
// describes what it waited for.
func (v *verifier) barrier(ctx context.Context) (string, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, v.cfg.SettleTimeout)
	defer cancel()
	var lsn string
	if err := v.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		return "", fmt.Errorf("verify: read the WAL position: %w", err)
	}
	for {
		var done, exists bool
		err := v.pool.QueryRow(ctx, `SELECT true, coalesce(confirmed_flush_lsn >= $1::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $2`,
			lsn, v.cfg.Slot).Scan(&exists, &done)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return "", fmt.Errorf("verify: read slot %s: %w", v.cfg.Slot, err)
		}
		if errors.Is(err, pgx.ErrNoRows) {
			return "", fmt.Errorf("verify: no replication slot %s: is CDC running?", v.cfg.Slot)
		}
		if done {
			break
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return "", fmt.Errorf("verify: CDC did not confirm WAL %s within %v (is it running?)", lsn, v.cfg.SettleTimeout)
		}
	}
	cl, err := v.cfg.Kafka.NewClient()
	if err != nil {
		return "", err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, v.cfg.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return "", fmt.Errorf("verify: list end offsets of %s: %w", v.cfg.Topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, v.cfg.Topic)
	if err != nil {
		return "", fmt.Errorf("verify: list start offsets of %s: %w", v.cfg.Topic, err)
	}
	var groups []string
	for _, n := range readmodel.Projections() {
		groups = append(groups, v.cfg.GroupPrefix+projections.GroupFor(n, v.vs.Version(n)))
	}
	behind := map[string]int64{}
	for {
		clear(behind)
		for _, g := range groups {
			committed, err := adm.FetchOffsets(ctx, g)
			if errors.Is(err, kerr.GroupIDNotFound) {
				committed, err = kadm.OffsetResponses{}, nil
			}
			if err != nil {
				return "", fmt.Errorf("verify: fetch offsets of group %s: %w", g, err)
			}
			ends.Each(func(o kadm.ListedOffset) {
				at := int64(0)
				if s, ok := starts.Lookup(o.Topic, o.Partition); ok {
					at = s.Offset
				}
				if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.Err == nil && c.At >= 0 {
					at = c.At
				}
				if d := o.Offset - at; d > 0 {
					behind[g] += d
				}
			})
		}
		if len(behind) == 0 {
			break
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return "", fmt.Errorf("verify: the consumer groups did not reach the end offsets read at WAL %s within %v: still behind %v",
				lsn, v.cfg.SettleTimeout, behind)
		}
	}
	return fmt.Sprintf("CDC confirmed WAL %s and groups %s committed the end offsets read after it (waited %v)",
		lsn, strings.Join(groups, ", "), time.Since(start).Round(time.Millisecond)), nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// userResult is one user's comparison.
type userResult struct {
	diffs []Difference
	cold  bool
	posts int
}

// headSQL is user $1's newest $2 feed posts by the feed's definition:
// the non-deleted posts of the accounts $1 follows and of $1, newest
// first. One index range scan of posts_author_time_idx per followed
// account, each stopped at $2 rows: followees x depth index entries.
// user compares u's newest cfg.Depth posts as the query side serves them
// with the truth, and u's following set with SQL.
func (v *verifier) user(ctx context.Context, u int64) (userResult, error) {
	var res userResult
	t := newTruth()
	want, err := truthHead(ctx, v.pool, u, &v.cfg.Depth)
	if err != nil {
		return res, err
	}
	if err := t.loadFor(ctx, v.pool, u, want); err != nil {
		return res, err
	}
	following, err := v.followees(ctx, u)
	if err != nil {
		return res, err
	}
	t.Following[u] = following

	// The window compared: everything at or above the truth's last post
	// when the truth was cut at the depth, else the whole feed.
	cutoff := key{ms: -1 << 62}
	if len(want) == v.cfg.Depth {
		last := want[len(want)-1]
		cutoff = key{ms: t.ms(last), id: last}
	}
	got, cold, readErr := v.read(ctx, u, cutoff)
	res.cold = cold
	res.posts = len(want)
	var window []APIPost
	var unknown []int64
	for _, p := range got {
		k, ok := keyOf(p)
		if ok && k.less(cutoff) {
			continue
		}
		window = append(window, p)
		if id, err := strconv.ParseInt(p.ID, 10, 64); err == nil {
			if t.ms(id) == 0 {
				unknown = append(unknown, id)
			}
		}
	}
	if err := t.loadFor(ctx, v.pool, u, unknown); err != nil {
		return res, err
	}
	for _, d := range t.DiffItems(u, window, want) {
		d.User = u
		res.diffs = append(res.diffs, d)
	}
	if readErr != nil {
		res.diffs = append(res.diffs, Difference{User: u, Kind: "error", Text: "error: reading the feed through the query side: " + readErr.Error()})
	}
	fd, err := v.following(ctx, u, following)
	if err != nil {
		return res, err
	}
	res.diffs = append(res.diffs, fd...)
	for i := range res.diffs {
		if err := v.where(ctx, t, &res.diffs[i]); err != nil {
			return res, err
		}
	}
	// Notifications and their unread count (notifications.go).
	nd, err := v.notifications(ctx, u)
	if err != nil {
		return res, err
	}
	res.diffs = append(res.diffs, nd...)
	return res, nil
}

// key is a feed position: creation ms, then post id.
type key struct{ ms, id int64 }

func (a key) less(b key) bool { return a.ms < b.ms || a.ms == b.ms && a.id < b.id }

func keyOf(p APIPost) (key, bool) {
	at, err := time.Parse(events.CreatedAtLayout, p.CreatedAt)
	id, ierr := strconv.ParseInt(p.ID, 10, 64)
	if err != nil || ierr != nil {
		return key{}, false
	}
	return key{ms: at.UnixMilli(), id: id}, true
}

// read pages through u's feed on the query side until a page goes below
// cutoff or the feed ends, at most twice the depth in posts (a feed full
// of foreign posts cannot make it read without end). cold says a page was
// served from PostgreSQL because a read model of u's was not built.
func (v *verifier) read(ctx context.Context, u int64, cutoff key) ([]APIPost, bool, error) {
	var out []APIPost
	cursor, cold := "", false
	for len(out) < 2*v.cfg.Depth+v.cfg.PageSize {
		p, err := v.feed.Home(ctx, u, cursor, v.cfg.PageSize)
		if err != nil {
			return out, cold, err
		}
		if p.Degraded {
			return out, cold, errors.New("Redis unavailable: the page came from PostgreSQL alone (degraded), the read models were not read")
		}
		cold = cold || p.Cold
		// The items as a client sees them: through the page's JSON.
		var page APIPage
		if err := json.Unmarshal(p.AppendJSON(nil), &page); err != nil {
			return out, cold, fmt.Errorf("decode the page's JSON: %w", err)
		}
		out = append(out, page.Items...)
		if p.NextCursor == nil {
			return out, cold, nil
		}
		if len(p.Items) == 0 {
			return out, cold, errors.New("an empty page with a next cursor")
		}
		if k, ok := keyOf(out[len(out)-1]); ok && k.less(cutoff) {
			return out, cold, nil
		}
		cursor = *p.NextCursor
	}
	return out, cold, nil
}

func (v *verifier) followees(ctx context.Context, u int64) ([]int64, error) {
	rows, err := v.pool.Query(ctx, `SELECT followee_id FROM follows WHERE follower_id = $1 ORDER BY 1`, u)
	if err != nil {
		return nil, fmt.Errorf("follows of %d: %w", u, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("follows of %d: %w", u, err)
	}
	return ids, nil
}

// following compares following:{u} with SQL, when u's following state is
// built (a state not built is read from PostgreSQL by the query side).
func (v *verifier) following(ctx context.Context, u int64, want []int64) ([]Difference, error) {
	fol := readmodel.NewFollows(v.keys)
	set, _ := fol.FollowingKeys(u)
	pipe := v.rdb.Pipeline()
	built := fol.QueueFollowingBuilt(ctx, pipe, u)
	members := pipe.SMembers(ctx, set)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read the following state of %d: %w", u, err)
	}
	if !built.Val() {
		return nil, nil
	}
	got := map[int64]bool{}
	for _, m := range members.Val() {
		if id, err := strconv.ParseInt(m, 10, 64); err == nil {
			got[id] = true
		}
	}
	var out []Difference
	for _, a := range want {
		if !got[a] {
			out = append(out, Difference{User: u, Kind: "following", Author: a,
				Text: fmt.Sprintf("following: user %d follows %d in SQL, the built following set does not hold it", u, a)})
		}
		delete(got, a)
	}
	extra := make([]int64, 0, len(got))
	for a := range got {
		extra = append(extra, a)
	}
	slices.Sort(extra)
	for _, a := range extra {
		out = append(out, Difference{User: u, Kind: "following", Author: a,
			Text: fmt.Sprintf("following: the built following set of user %d holds %d, which it does not follow in SQL", u, a)})
	}
	return out, nil
}

// where fills d.Where: what the read models of d's user and author hold.
func (v *verifier) where(ctx context.Context, t *Truth, d *Difference) error {
	u := d.User
	var parts []string
	if d.Post != 0 {
		p, known := t.Posts[d.Post]
		if known {
			d.Author = p.Author
		}
		h, err := homefeed.Inspect(ctx, v.rdb, homefeed.NewInboxes(v.keys, v.pol), u, d.Post)
		if err != nil {
			return err
		}
		parts = append(parts, fmt.Sprintf("inbox of %d (v%d): %s", u, v.vs.Version(readmodel.ProjectionInbox), h))
		if known {
			h, err := readmodel.InspectTimeline(ctx, v.rdb, v.keys, p.Author, d.Post)
			if err != nil {
				return err
			}
			parts = append(parts, fmt.Sprintf("timeline of %d: %s", p.Author, h))
			state := "live"
			if p.Deleted {
				state = "deleted"
			}
			parts = append(parts, fmt.Sprintf("SQL: post by %d, %s, %s", p.Author, FormatMillis(p.Ms), state))
		} else {
			parts = append(parts, "SQL: no such post")
		}
	}
	if a := d.Author; a != 0 && a != u {
		h, err := readmodel.InspectFollowing(ctx, v.rdb, v.keys, u, a)
		if err != nil {
			return err
		}
		parts = append(parts, fmt.Sprintf("following set of %d, author %d: %s", u, a, h))
		c, err := readmodel.InspectCelebrity(ctx, v.rdb, v.keys, a)
		if err != nil {
			return err
		}
		parts = append(parts, fmt.Sprintf("celebrity set, author %d: %s", a, c))
		var n int64
		if err := v.pool.QueryRow(ctx, `SELECT follower_count FROM users WHERE id = $1`, a).Scan(&n); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		parts = append(parts, fmt.Sprintf("SQL: %d follows %d: %v; %d has %d followers (threshold %d, band %d)", u, a, slices.Contains(t.Following[u], a), a, n,
			v.pol.CelebrityThreshold, v.pol.CelebrityBand))
	}
	d.Where = strings.Join(parts, "; ")
	return nil
}

// Write prints the report: each difference with where the read models
// hold the post, then the summary.
func (r Report) Write(w io.Writer) {
	for _, d := range r.Differences {
		fmt.Fprintln(w, d)
	}
	verdict := "no difference"
	if !r.OK() {
		verdict = fmt.Sprintf("%d DIFFERENCES", len(r.Differences))
	}
	fmt.Fprintf(w, "verify: %s: %s\n", verdict, r.Summary())
}
