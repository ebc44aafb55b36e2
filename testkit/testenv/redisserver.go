package testenv

import (
	"context"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServer is a redis-server of the test's own, on a free TCP port,
// that the test kills and starts again (empty) at will, for the faults of
// a Redis that goes away; the shared server is never touched.
type RedisServer struct {
	t    testing.TB
	port int
	dir  string
	cmd  *exec.Cmd
}

// StartRedisServer starts a RedisServer and kills it when the test ends.
// It skips the test when redis-server is not installed.
func StartRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed")
	}
	r := &RedisServer{t: t, port: serverPort(t), dir: t.TempDir()}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// Addr is the server's host:port.
func (r *RedisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// The ports of the servers of this process, kept while a server is
// stopped so that no other test takes its port.
var (
	serverPortsMu sync.Mutex
	serverPorts   = map[int]bool{}
)

// serverPort picks a free port below the kernel's ephemeral range
// (32768-60999 by default): a port from Listen(":0") is an ephemeral one,
// which, while its server is stopped, another listener of any process or
// the source port of an outgoing connection may take, and the server
// restarted on it would not be the one the test's client reaches.
func serverPort(t testing.TB) int {
	t.Helper()
	serverPortsMu.Lock()
	defer serverPortsMu.Unlock()
	for range 200 {
		p := 20000 + rand.IntN(12000)
		if serverPorts[p] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		_ = l.Close()
		serverPorts[p] = true
		return p
	}
	t.Fatal("no free port for a redis-server in 20000-31999")
	return 0
}

// Start runs an empty server on the port and waits until it answers, and
// checks that the server answering is this one (its --dir).
func (r *RedisServer) Start() {
	r.t.Helper()
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir)
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
	defer c.Close()
	Eventually(r.t, 10*time.Second, "own redis-server up", func() bool {
		return c.Ping(context.Background()).Err() == nil
	})
	dir, err := c.ConfigGet(context.Background(), "dir").Result()
	if err != nil {
		r.t.Fatal(err)
	}
	if want, _ := filepath.EvalSymlinks(r.dir); dir["dir"] != r.dir && dir["dir"] != want {
		r.t.Fatalf("port %d answers for another redis-server (dir %q, want %q)", r.port, dir["dir"], r.dir)
	}
}

// Freeze stops the server's process (SIGSTOP): its connections stay open
// and every command waits, as on a Redis that hangs, until Thaw.
func (r *RedisServer) Freeze() {
	r.t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		r.t.Fatal(err)
	}
}

// Thaw lets a frozen server go on (SIGCONT).
func (r *RedisServer) Thaw() {
	r.t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		r.t.Fatal(err)
	}
}

// Stop kills the server (as a crash does) and waits until it is gone; a
// stopped server is left alone.
func (r *RedisServer) Stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGCONT) // a frozen process dies only once it runs
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}
