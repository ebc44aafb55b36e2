package faults

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/queries"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/testkit/testenv"
	"github.com/feedco/feed/verify"
)

var (
	flagFull = flag.Bool("faults.full", false, "run every fault (also FEED_FAULTS=full); the default is the small suite")
	flagRun  = flag.String("faults.run", "", "run only the faults whose names match this regular expression")
)

// fault is one fault the suite injects under the workload. inject returns
// when the fault has ended (the role restarted, Redis back); check, when
// set, runs after the oracle has converged.
type fault struct {
	name string
	// setup, when set, runs before the phase's workload starts.
	setup  func(t *testing.T, s *suite)
	inject func(t *testing.T, c *cluster)
	check  func(t *testing.T, c *cluster) string
}

// restart is a kill -9 (or, graceful, a SIGTERM) of a role, a pause under
// the workload, and the role started again.
func restart(name string, graceful bool) func(t *testing.T, c *cluster) {
	return func(t *testing.T, c *cluster) {
		if graceful {
			c.stop(name)
		} else {
			c.kill(name)
		}
		time.Sleep(2 * time.Second) // the fault: the role stays down this long under the workload
		c.start(name)
	}
}

func faults(full bool) []fault {
	flush := fault{name: "Redis FLUSHDB", inject: func(t *testing.T, c *cluster) {
		if err := c.rdb.FlushDB(context.Background()).Err(); err != nil {
			t.Fatalf("FLUSHDB: %v", err)
		}
		time.Sleep(2 * time.Second) // the workload runs this long on the emptied Redis
	}}
	killProject := fault{name: "kill -9 project", inject: restart(roleProject, false)}
	slot := fault{name: "slot dropped under writes", inject: func(t *testing.T, c *cluster) {
		if err := c.dropSlot(); err != nil {
			t.Fatal(err)
		}
		waitSlot(t, c)
		time.Sleep(2 * time.Second) // the workload runs this long on the new slot
	}, check: topicHasTheLog}
	streams := streamingFault()
	if !full {
		return []fault{killProject, slot, streams, flush}
	}
	// The faults that lose Redis's data come last: differences they leave
	// would be counted again by every later row.
	return []fault{
		{name: "kill -9 cdc", inject: restart(roleCDC, false)},
		killProject,
		{name: "kill -9 api", inject: restart(roleAPI, false)},
		streams,
		{name: "kill -9 kafka", inject: restart(roleKafka, false)},
		{name: "broker restart (SIGTERM)", inject: restart(roleKafka, true)},
		slot,
		{name: "PostgreSQL connections terminated", inject: func(t *testing.T, c *cluster) {
			total := 0
			for range 3 {
				n, err := c.terminateConnections()
				if err != nil {
					t.Fatalf("terminate connections: %v", err)
				}
				total += n
				time.Sleep(time.Second) // pacing: one termination a second
			}
			if total == 0 {
				t.Fatal("no connection of the roles was terminated")
			}
		}},
		{name: "Redis down 20 s, back empty", inject: func(t *testing.T, c *cluster) {
			c.redis.Stop()
			time.Sleep(20 * time.Second) // the fault: the outage lasts this long
			c.redis.Start()
		}},
		flush,
		{name: "Redis restart (empty)", inject: func(t *testing.T, c *cluster) {
			c.redis.Stop()
			c.redis.Start()
			time.Sleep(2 * time.Second) // the workload runs this long on the restarted Redis
		}},
	}
}

// waitSlot waits until CDC holds a slot again.
func waitSlot(t *testing.T, c *cluster) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "CDC holding slot "+c.slot+" again", func() bool {
		var active bool
		err := c.pool.QueryRow(context.Background(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, c.slot).Scan(&active)
		return err == nil && active
	})
}

// row is one line of the suite's table.
type row struct {
	fault    string
	codes    string
	recovery time.Duration
	diffs    int
	note     string
}

// TestFaults injects each fault under the workload, then stops the
// workload and runs the convergence oracle until zero differences; any
// 5xx other than 503 fails.
func TestFaults(t *testing.T) {
	full := *flagFull || os.Getenv("FEED_FAULTS") == "full"
	users, workers, warm, timeout := 30, 4, 3*time.Second, 40*time.Second
	if full {
		users, workers, warm, timeout = 40, 6, 5*time.Second, 90*time.Second
	}
	run := runFilter(t)
	s := newSuite(t, startCluster(t), users, workers, warm, timeout)
	s.phase("none (warm-up)", func() {})
	for _, f := range faults(full) {
		if !run.MatchString(f.name) {
			continue
		}
		if f.setup != nil {
			f.setup(t, s)
		}
		s.phase(f.name, func() { f.inject(t, s.c) })
		if f.check != nil {
			s.rows[len(s.rows)-1].note = f.check(t, s.c)
		}
	}
	s.finish()
}

func runFilter(t *testing.T) *regexp.Regexp {
	t.Helper()
	run, err := regexp.Compile(*flagRun)
	if err != nil {
		t.Fatalf("-faults.run: %v", err)
	}
	return run
}

// suite plays phases on a cluster: the workload for a while, a fault
// injected under it, the workload stopped, the oracle until zero
// differences; one row of the table per phase.
type suite struct {
	t           *testing.T
	c           *cluster
	w           *workload
	o           *convergence
	oracleCodes *codes
	workers     int
	warm        time.Duration
	pause       time.Duration
	timeout     time.Duration
	rows        []row
}

// newSuite registers users through the API.
func newSuite(t *testing.T, c *cluster, users, workers int, warm, timeout time.Duration) *suite {
	w := register(c, users)
	oc := newCodes()
	return &suite{t: t, c: c, w: w, o: &convergence{c: c, w: w, cl: client{c: c, codes: oc}}, oracleCodes: oc,
		workers: workers, warm: warm, pause: 100 * time.Millisecond, timeout: timeout}
}

// phase runs the workload, injects the fault after warm, stops the
// workload and runs the oracle until zero differences or the timeout.
func (s *suite) phase(name string, inject func()) {
	t, c, o := s.t, s.c, s.o
	counts := newCodes()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.w.run(ctx, s.workers, s.pause, counts, uint64(len(s.rows)+1))
	}()
	time.Sleep(s.warm) // the workload warms up this long before the fault
	inject()
	end := time.Now()
	cancel()
	<-done
	diffs, sample := o.converge(s.timeout)
	r := row{fault: name, codes: counts.String(), recovery: time.Since(end), diffs: diffs}
	if diffs > 0 {
		r.note = o.explain()
		t.Errorf("%s: %d differences %v after the fault (%s); the first ones:\n%s", name, diffs, s.timeout, r.note, sample)
	}
	if counts.count("201") == 0 {
		t.Errorf("%s: the workload created nothing during the fault (%s)", name, counts)
	}
	for code, n := range counts.forbidden() {
		t.Errorf("%s: %d answers %s (a fault must never be a 5xx other than 503)", name, n, code)
	}
	if ex := c.exited(); len(ex) > 0 {
		t.Errorf("%s: a role ended by itself: %s", name, strings.Join(ex, "; "))
		r.note = strings.Join(ex, "; ")
	}
	s.rows = append(s.rows, r)
}

// finish checks the oracle's own answers and logs the table.
func (s *suite) finish() {
	for code, n := range s.oracleCodes.forbidden() {
		s.t.Errorf("the oracle's reads got %d answers %s", n, code)
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "| fault\t| status codes seen\t| recovery\t| differences after\t| note")
	for _, r := range s.rows {
		recovery := r.recovery.Round(10 * time.Millisecond).String()
		if r.diffs > 0 {
			recovery = "not within " + s.timeout.String()
		}
		fmt.Fprintf(tw, "| %s\t| %s\t| %s\t| %d\t| %s\n", r.fault, r.codes, recovery, r.diffs, r.note)
	}
	_ = tw.Flush()
	s.t.Logf("fault suite (%d users, %d workers; oracle reads %s):\n%s", len(s.w.users), s.workers, s.oracleCodes, b.String())
}

// convergence is the oracle: every user's home feed and author posts,
// read to the end through the API, against the truth from PostgreSQL.
type convergence struct {
	c  *cluster
	w  *workload
	cl client
	// followers also compares the followers read model (every count,
	// following set and the celebrity set) with PostgreSQL.
	followers bool
}

// converge runs the oracle until it finds zero differences or timeout
// passes; it returns the differences of the last run and a sample.
func (o *convergence) converge(timeout time.Duration) (int, string) {
	deadline := time.Now().Add(timeout)
	for {
		n, lists, _ := o.differences()
		if n == 0 || time.Now().After(deadline) {
			return n, strings.Join(lists[:min(8, len(lists))], "\n")
		}
		time.Sleep(200 * time.Millisecond) // polling the oracle; the last run's differences are the answer
	}
}

// missingRe finds the author of a post a list lacks, in a difference.
var missingRe = regexp.MustCompile(`missing: post \d+ \(author (\d+),`)

// explain says, after a run that did not converge, which read models
// disagree with PostgreSQL: the celebrity set, the following sets, and
// whether the missing posts are celebrities' (pulled at read time) or
// others' (pushed into inboxes).
func (o *convergence) explain() string {
	ctx := context.Background()
	truth, err := verify.LoadTruth(ctx, o.c.pool)
	if err != nil {
		return err.Error()
	}
	k := readmodel.Keys{}
	celebs, err := o.c.rdb.SCard(ctx, k.Celebrities()).Result()
	if err != nil {
		return err.Error()
	}
	var sqlCelebs int64
	for _, n := range truth.Followers {
		if n >= celebrityThreshold {
			sqlCelebs++
		}
	}
	wrongSets, absentSets := 0, 0
	for _, u := range o.w.all() {
		n, err := o.c.rdb.SCard(ctx, k.Following(u)).Result()
		if err != nil {
			return err.Error()
		}
		if n == 0 && len(truth.Shown(u)) > 0 {
			absentSets++
		} else if n != int64(len(truth.Shown(u))) {
			wrongSets++
		}
	}
	byCeleb, byOther := 0, 0
	_, _, missing := o.differences()
	for _, a := range missing {
		if truth.Followers[a] >= celebrityThreshold {
			byCeleb++
		} else {
			byOther++
		}
	}
	return fmt.Sprintf("Redis celebrity set %d members, SQL %d; following sets: %d absent, %d of another size; posts missing from feeds: %d by celebrities, %d by others",
		celebs, sqlCelebs, absentSets, wrongSets, byCeleb, byOther)
}

// differences compares every feed and every author's posts once; it
// returns how many differences it found and, per list that differs, a
// line with the first three, and the author of each post missing from a
// feed.
func (o *convergence) differences() (int, []string, []int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	truth, err := verify.LoadTruth(ctx, o.c.pool)
	if err != nil {
		return 1, []string{err.Error()}, nil
	}
	var mu sync.Mutex
	var missing []int64
	var bad []string
	total := 0
	users := o.w.all()
	work := make(chan int64)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range work {
				want, err := verify.TruthFeed(ctx, o.c.pool, u)
				var d []string
				if err != nil {
					d = append(d, "error: "+err.Error())
				} else {
					got, err := o.cl.readAll(ctx, "/api/feed", u, len(want)/50+10)
					d = truth.Diff(u, got, want)
					if err != nil {
						d = append(d, "error: "+err.Error())
					}
				}
				mine := truth.AuthorPage(users[0], u)
				got, err := o.cl.readAll(ctx, "/api/users/"+itoa(u)+"/posts", users[0], len(mine)/50+10)
				da := truth.Diff(users[0], got, mine)
				if err != nil {
					da = append(da, "error: "+err.Error())
				}
				dn := o.notificationDiffs(ctx, u)
				mu.Lock()
				total += len(d) + len(da) + len(dn)
				if len(dn) > 0 {
					bad = append(bad, fmt.Sprintf("notifications of %d: %s", u, strings.Join(dn, "; ")))
				}
				for _, m := range missingRe.FindAllStringSubmatch(strings.Join(d, "\n"), -1) {
					a, _ := strconv.ParseInt(m[1], 10, 64)
					missing = append(missing, a)
				}
				if len(d) > 0 {
					bad = append(bad, fmt.Sprintf("feed of %d (follows %d): %d differences: %s", u, len(truth.Following[u]), len(d), strings.Join(d[:min(3, len(d))], "; ")))
				}
				if len(da) > 0 {
					bad = append(bad, fmt.Sprintf("posts of %d: %d differences: %s", u, len(da), strings.Join(da[:min(3, len(da))], "; ")))
				}
				mu.Unlock()
			}
		}()
	}
	for _, u := range users {
		work <- u
	}
	close(work)
	wg.Wait()
	if o.followers {
		fd := o.followerDiffs(ctx, truth)
		bad = append(bad, fd...)
		total += len(fd)
	}
	slices.Sort(bad)
	return total, bad, missing
}

// notificationDiffs reads u's notifications through the API to the end
// and compares them and the unread count with the truth (no marker is
// set by the workload: every shown notification is unread, up to
// queries.UnreadMax).
func (o *convergence) notificationDiffs(ctx context.Context, u int64) []string {
	want, err := verify.TruthNotifications(ctx, o.c.pool, u)
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	var got []string
	unread, cursor := -1, ""
	for page := 0; page < len(want)/50+10; page++ {
		var p verify.APINotificationPage
		path := "/api/notifications?limit=50"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		if _, err := o.cl.do(ctx, http.MethodGet, path, u, "", nil, &p); err != nil {
			return []string{"error: " + err.Error()}
		}
		if unread < 0 {
			unread = p.Unread
		}
		for _, it := range p.Items {
			got = append(got, it.ID)
		}
		if p.NextCursor == nil {
			break
		}
		cursor = *p.NextCursor
	}
	return verify.DiffNotifications(got, unread, want, min(len(want), queries.UnreadMax))
}

// followerDiffs compares the followers read model with the truth: each
// user's follower count (a count over or under SQL's is an event counted
// twice or lost), their following set, and the celebrity set.
func (o *convergence) followerDiffs(ctx context.Context, truth *verify.Truth) []string {
	k := readmodel.Keys{}
	fm := readmodel.NewFollows(k)
	var out []string
	for _, u := range o.w.all() {
		n, _, err := fm.CountOf(ctx, o.c.rdb, u)
		if err != nil {
			out = append(out, fmt.Sprintf("followers of %d: %v", u, err))
			continue
		}
		if n != truth.Followers[u] {
			out = append(out, fmt.Sprintf("followers of %d: count %d in Redis, %d in SQL", u, n, truth.Followers[u]))
		}
		got, err := o.c.rdb.SMembers(ctx, k.Following(u)).Result()
		if err != nil {
			out = append(out, fmt.Sprintf("following of %d: %v", u, err))
			continue
		}
		want := make([]string, 0, len(truth.Following[u]))
		for _, v := range truth.Following[u] {
			want = append(want, itoa(v))
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			out = append(out, fmt.Sprintf("following of %d: %v in Redis, %v in SQL", u, got, want))
		}
	}
	members, err := o.c.rdb.SMembers(ctx, k.Celebrities()).Result()
	if err != nil {
		return append(out, "celebrities: "+err.Error())
	}
	var got, want []string
	for _, m := range members {
		if !strings.HasPrefix(m, "~") {
			got = append(got, m)
		}
	}
	for a, n := range truth.Followers {
		if n >= celebrityThreshold {
			want = append(want, itoa(a))
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		out = append(out, fmt.Sprintf("celebrities: %v in Redis, %v in SQL", got, want))
	}
	return out
}

// topicHasTheLog reads the topic from its start with a standard Kafka
// client (franz-go) until every event of the log is in it, and says how
// many (and how many posts) it found; it fails the test after 60 s.
func topicHasTheLog(t *testing.T, c *cluster) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rows, err := c.pool.Query(ctx, `SELECT event_id::text, type FROM events`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for rows.Next() {
		var id, typ string
		if err := rows.Scan(&id, &typ); err != nil {
			t.Fatal(err)
		}
		want[id] = typ
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	rows.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.kafka), kgo.ConsumeTopics(c.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]bool{}
	records, perPartition := 0, map[int32]int{}
	missing := func() int {
		n := 0
		for id := range want {
			if !seen[id] {
				n++
			}
		}
		return n
	}
	for missing() > 0 {
		if ctx.Err() != nil {
			byType := map[string]int{}
			var ids []string
			for id, typ := range want {
				if !seen[id] {
					byType[typ]++
					ids = append(ids, "'"+id+"'")
				}
			}
			var detail string
			_ = c.pool.QueryRow(context.Background(), `SELECT string_agg(position || ' ' || type || ' ' || to_char(recorded_at, 'HH24:MI:SS.MS') || ' xid ' || xmin::text, ', ' ORDER BY position)
				FROM events WHERE event_id::text IN (`+strings.Join(ids[:min(10, len(ids))], ",")+`)`).Scan(&detail)
			t.Errorf("the topic lacks %d of the log's %d events (by type %v) after 60 s (%d records read, by partition %v); the first: %s",
				missing(), len(want), byType, records, perPartition, detail)
			return fmt.Sprintf("topic lacks %d events", missing())
		}
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			records++
			perPartition[r.Partition]++
			var env events.Envelope
			if err := json.Unmarshal(r.Value, &env); err != nil {
				t.Errorf("record %d/%d: not an envelope: %v", r.Partition, r.Offset, err)
				return
			}
			seen[env.EventID] = true
		})
	}
	posts := 0
	for _, typ := range want {
		if typ == events.TypePostCreated {
			posts++
		}
	}
	return fmt.Sprintf("all %d events of the log (%d posts) in the topic (%d records, read with kgo); cdc logged \"slot loss healed\" %d times",
		len(want), posts, records, c.countLines(roleCDC, "slot loss healed"))
}
