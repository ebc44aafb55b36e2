package testenv

import (
	"context"
	"net"
	"os/exec"
	"strconv"
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
	cmd  *exec.Cmd
}

// StartRedisServer starts a RedisServer and kills it when the test ends.
// It skips the test when redis-server is not installed.
func StartRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &RedisServer{t: t, port: l.Addr().(*net.TCPAddr).Port}
	_ = l.Close()
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// Addr is the server's host:port.
func (r *RedisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// Start runs an empty server on the port and waits until it answers.
func (r *RedisServer) Start() {
	r.t.Helper()
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.t.TempDir())
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
	defer c.Close()
	Eventually(r.t, 10*time.Second, "own redis-server up", func() bool {
		return c.Ping(context.Background()).Err() == nil
	})
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
