package faults

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/testkit/testenv"
)

// The roles the suite runs, each a process of the feed binary.
const (
	roleKafka   = "kafka"
	roleCDC     = "cdc"
	roleProject = "project"
	roleAPI     = "api"
)

// appName tags the suite's own PostgreSQL connections, so the fault that
// terminates the database's connections spares the oracle's.
const appName = "faults-oracle"

// celebrityThreshold is low, so that the workload makes celebrities
// (whose posts are pulled at read time) as well as pushed authors.
const celebrityThreshold = 10

// cluster is the system under test: the roles as processes of one binary
// on the test's own database, redis-server, broker, ports, topic and slot.
type cluster struct {
	t     *testing.T
	bin   string
	db    *testenv.DB
	pool  *pgxpool.Pool        // the oracle's, application_name appName
	redis *testenv.RedisServer // nil on a Redis Cluster
	rdb   redis.UniversalClient
	slot  string
	topic string
	kafka string // the broker's address
	env   []string
	http  *http.Client

	mu    sync.Mutex
	roles map[string]*proc
	apis  map[string]string // API instance -> its base URL
	// anyNode names the API instances started without FEED_NODE_ID (they
	// lease a free node id: a replacement need not wait for its killed
	// predecessor's lease to run out).
	anyNode map[string]bool
	next    atomic.Uint64 // the balancer's round robin over the APIs
}

// topology is how many instances of the API and of the projectors a
// cluster runs, and on which Redis.
type topology struct {
	apis, projects int
	// redisCluster runs the read models on a 3-node Redis Cluster of the
	// test's own (startRedisCluster) instead of one redis-server.
	redisCluster bool
}

// instance names the i-th instance (from 1) of a role: "api", "api2", ...
func instance(role string, i int) string {
	if i <= 1 {
		return role
	}
	return role + strconv.Itoa(i)
}

// roleOf is the role (the feed command) of an instance name.
func roleOf(name string) string { return strings.TrimRight(name, "0123456789") }

// proc is one running (or stopped) role.
type proc struct {
	name    string
	cmd     *exec.Cmd
	log     string // its stdout and stderr, appended across restarts
	done    chan struct{}
	killed  bool  // stopped by the suite
	exitErr error // how it ended
}

// The feed binary, built once for every test of the package (TestMain
// removes it).
var (
	feedOnce sync.Once
	feedBin  string
	feedErr  error
	feedDir  string
)

// buildFeed builds ./cmd/feed, once per run of the package.
func buildFeed(t *testing.T) string {
	t.Helper()
	feedOnce.Do(func() {
		if feedDir, feedErr = os.MkdirTemp("", "feed-faults-"); feedErr != nil {
			return
		}
		feedBin = filepath.Join(feedDir, "feed")
		out, err := exec.Command("go", "build", "-o", feedBin, "github.com/feedco/feed/cmd/feed").CombinedOutput()
		if err != nil {
			feedErr = fmt.Errorf("go build ./cmd/feed: %v\n%s", err, out)
		}
	})
	if feedErr != nil {
		t.Fatal(feedErr)
	}
	return feedBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if feedDir != "" {
		_ = os.RemoveAll(feedDir)
	}
	os.Exit(code)
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startCluster starts every role, one instance each, on a redis-server of
// the test's own, and waits until each is up.
func startCluster(t *testing.T) *cluster {
	return startTopology(t, topology{apis: 1, projects: 1})
}

// startTopology starts the roles of top (the broker and CDC once, the API
// and the projectors as often as it says) and waits until each is up.
func startTopology(t *testing.T, top topology) *cluster {
	t.Helper()
	dir := t.TempDir()
	c := &cluster{t: t, bin: buildFeed(t), db: testenv.NewDB(t),
		roles: map[string]*proc{}, apis: map[string]string{}, kafka: freePort(t), topic: testenv.RandomName("faults.")}
	c.slot = "feed_faults_" + c.db.Name
	for i := 1; i <= max(top.apis, 1); i++ {
		c.apis[instance(roleAPI, i)] = "http://" + freePort(t)
	}
	pc, err := pgxpool.ParseConfig(c.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.RuntimeParams["application_name"] = appName
	pc.MaxConns = 8
	if c.pool, err = pgxpool.NewWithConfig(context.Background(), pc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.pool.Close)
	redisURL := ""
	if top.redisCluster {
		var addrs []string
		redisURL, addrs = startRedisCluster(t)
		c.rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1})
	} else {
		c.redis = testenv.StartRedisServer(t)
		redisURL = "redis://" + c.redis.Addr() + "/0"
		c.rdb = redis.NewClient(&redis.Options{Addr: c.redis.Addr(), MaxRetries: -1})
	}
	t.Cleanup(func() { _ = c.rdb.Close() })
	c.http = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConns: 32, MaxIdleConnsPerHost: 32}}
	t.Cleanup(c.http.CloseIdleConnections)
	c.env = append(os.Environ(),
		"DATABASE_URL="+c.db.URL,
		"REDIS_URL="+redisURL,
		"KAFKA_BROKERS="+c.kafka,
		"FEED_KAFKA_ADDR="+c.kafka,
		"FEED_STATE_DIR="+filepath.Join(dir, "state"),
		"FEED_TOPIC="+c.topic,
		"FEED_PARTITIONS=4",
		"FEED_SLOT="+c.slot,
		"FEED_AUTH=trusted-header",
		// The workload registers every user from one address and posts
		// faster than a person: the quotas are the abuse suite's.
		"FEED_QUOTA_WRITES_PER_MINUTE=0", "FEED_QUOTA_READS_PER_SECOND=0", "FEED_QUOTA_REGISTRATIONS_PER_HOUR=0",
		// Several roles on one machine: each admin listener on a port of
		// its own (cdc and project take --metrics-addr's).
		"FEED_ADMIN_ADDR=127.0.0.1:0",
		"FEED_CELEBRITY_THRESHOLD="+itoa(celebrityThreshold),
		"FEED_INBOX_MAX=20",
		"FEED_CELEBRITY_CACHE_TTL=500ms",
		"FEED_LOG_LEVEL=info",
	)
	// Every role still running at the end is killed; registered before the
	// database's and Redis's cleanups, so it runs first.
	t.Cleanup(func() {
		names := c.names()
		for i := len(names) - 1; i >= 0; i-- {
			c.kill(names[i])
		}
		if t.Failed() {
			for _, name := range names {
				t.Logf("last lines of %s's log:\n%s", name, tail(c.roles[name].log, 30))
			}
		}
	})
	// As a deployment does: `feed migrate` first, which also creates CDC's
	// slot, so no write of a role started before CDC is left unstreamed.
	mig := exec.Command(c.bin, "migrate")
	mig.Env = c.env
	if out, err := mig.CombinedOutput(); err != nil || !strings.Contains(string(out), "replication slot "+c.slot+" ready") {
		t.Fatalf("feed migrate: %v\n%s", err, out)
	}
	c.start(roleKafka)
	c.start(roleCDC)
	for i := 1; i <= max(top.projects, 1); i++ {
		c.start(instance(roleProject, i))
	}
	for i := 1; i <= max(top.apis, 1); i++ {
		c.start(instance(roleAPI, i))
	}
	return c
}

// names lists the instances started so far, the broker first, then CDC,
// the projectors and the APIs (each by name).
func (c *cluster) names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	order := map[string]int{roleKafka: 0, roleCDC: 1, roleProject: 2, roleAPI: 3}
	out := make([]string, 0, len(c.roles))
	for name := range c.roles {
		out = append(out, name)
	}
	slices.SortFunc(out, func(a, b string) int {
		return cmp.Or(cmp.Compare(order[roleOf(a)], order[roleOf(b)]), cmp.Compare(len(a), len(b)), cmp.Compare(a, b))
	})
	return out
}

// api is the base URL of the API instance the next request goes to: a
// round robin over the APIs that are running, as a balancer in front of
// them does (all of them when none is).
func (c *cluster) api() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.apis))
	for name := range c.apis {
		names = append(names, name)
	}
	slices.Sort(names)
	up := names[:0:0]
	for _, name := range names {
		if p := c.roles[name]; p != nil && !p.isDone() {
			up = append(up, name)
		}
	}
	if len(up) == 0 {
		up = names
	}
	return c.apis[up[c.next.Add(1)%uint64(len(up))]]
}

// apiURL is the base URL of one API instance.
func (c *cluster) apiURL(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.apis[name]
}

func (p *proc) isDone() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// start runs the role and waits until it is up. A role whose metrics
// port was taken meanwhile (freePort closes the port it found) is started
// again on another.
func (c *cluster) start(name string) {
	c.t.Helper()
	for attempt := 0; ; attempt++ {
		if c.tryStart(name, attempt < 3) {
			return
		}
	}
}

// tryStart is one attempt of start: false when the role could not listen
// on its metrics port and retry is set.
func (c *cluster) tryStart(name string, retry bool) bool {
	c.t.Helper()
	c.mu.Lock()
	old := c.roles[name]
	c.mu.Unlock()
	logPath := filepath.Join(c.t.TempDir(), name+".log")
	if old != nil {
		logPath = old.log
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	role := roleOf(name)
	args := []string{role}
	var metrics string
	if role == roleCDC || role == roleProject {
		metrics = freePort(c.t)
		args = append(args, "--metrics-addr", metrics)
	}
	env := c.env
	if role == roleAPI {
		// Each API instance its own Snowflake node id, as a deployment
		// must give them (two with one id can mint the same post id).
		node := strings.TrimPrefix(name, roleAPI)
		if node == "" {
			node = "1"
		}
		env = append(slices.Clip(env), "HTTP_ADDR="+strings.TrimPrefix(c.apiURL(name), "http://"), "FEED_READ_CACHE_BARRIER=1")
		c.mu.Lock()
		anyNode := c.anyNode[name]
		c.mu.Unlock()
		if !anyNode {
			env = append(env, "FEED_NODE_ID="+node)
		}
	}
	cmd := exec.Command(c.bin, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, f, f
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start feed %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.exitErr = cmd.Wait()
		close(p.done)
	}()
	c.mu.Lock()
	c.roles[name] = p
	c.mu.Unlock()

	deadline := time.Now().Add(60 * time.Second)
	for !c.up(name, metrics) {
		select {
		case <-p.done:
			if retry && metrics != "" && strings.Contains(tail(logPath, 3), "address already in use") {
				return false
			}
			c.t.Fatalf("feed %s exited while starting (%v):\n%s", name, p.exitErr, tail(logPath, 20))
		default:
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("feed %s not up within 60 s:\n%s", name, tail(logPath, 20))
		}
		time.Sleep(50 * time.Millisecond) // polling c.up, watching for an exit
	}
	return true
}

// up reports whether the role serves: the broker's port accepts, the
// API's /readyz answers 200, CDC streams from its slot, the projectors
// serve their metrics.
func (c *cluster) up(name, metrics string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	get := func(u string) bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := c.http.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	switch roleOf(name) {
	case roleKafka:
		conn, err := net.DialTimeout("tcp", c.kafka, time.Second)
		if err == nil {
			conn.Close()
		}
		return err == nil
	case roleAPI:
		return get(c.apiURL(name) + "/readyz")
	case roleCDC:
		// `feed migrate` created the slot (consistent before it
		// returned): CDC is up once it streams from it.
		var active bool
		err := c.pool.QueryRow(ctx, `SELECT active AND confirmed_flush_lsn IS NOT NULL FROM pg_replication_slots WHERE slot_name = $1`, c.slot).Scan(&active)
		return err == nil && active && get("http://"+metrics+"/metrics")
	default:
		return get("http://" + metrics + "/metrics")
	}
}

// kill sends SIGKILL to the role and waits until it is gone.
func (c *cluster) kill(name string) { c.signal(name, syscall.SIGKILL) }

// stop sends SIGTERM (a clean shutdown) and waits until the role is gone.
func (c *cluster) stop(name string) { c.signal(name, syscall.SIGTERM) }

func (c *cluster) signal(name string, sig syscall.Signal) {
	c.mu.Lock()
	p := c.roles[name]
	c.mu.Unlock()
	if p == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	p.killed = true
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// exited returns the roles that ended without the suite stopping them,
// each with how and its last log lines.
func (c *cluster) exited() []string {
	var out []string
	for _, name := range c.names() {
		c.mu.Lock()
		p := c.roles[name]
		c.mu.Unlock()
		if p.isDone() && !p.killed {
			out = append(out, fmt.Sprintf("feed %s (%s) exited (%v): %s", roleOf(name), name, p.exitErr, lastError(p.log)))
		}
	}
	return out
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// lastError is the last ERROR line of a role's log, or its last line.
func lastError(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var last, lastErr string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		last = sc.Text()
		if strings.Contains(last, "level=ERROR") {
			lastErr = last
		}
	}
	if lastErr != "" {
		return lastErr
	}
	return last
}

// countLines counts the lines of the role's log that contain s.
func (c *cluster) countLines(name, s string) int {
	c.mu.Lock()
	p := c.roles[name]
	c.mu.Unlock()
	b, err := os.ReadFile(p.log)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), s)
}

// dropSlot terminates CDC's walsender and drops its slot, retrying while
// CDC reconnects to it first.
func (c *cluster) dropSlot() error {
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, _ = c.pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, c.slot)
		_, err := c.pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, c.slot)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("drop slot %s: %w", c.slot, err)
		}
		time.Sleep(10 * time.Millisecond) // polling: CDC took the slot back first
	}
}

// terminateConnections terminates every client backend of the database
// but the oracle's own, and CDC's walsender, returning how many.
func (c *cluster) terminateConnections() (int, error) {
	var n int
	err := c.pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = $1 AND pid <> pg_backend_pid() AND application_name <> $2 AND backend_type IN ('client backend', 'walsender')`,
		c.db.Name, appName).Scan(&n)
	return n, err
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
