package testenv

import (
	"io"
	"os"
	"os/exec"
	"testing"
)

// ChildMain is the TestMain of a package whose tests run their own test
// binary again as a separate process, one they can kill with SIGKILL: in
// that child (the environment variable env is "1") it runs child and
// exits with its code; otherwise it runs the tests.
func ChildMain(m *testing.M, env string, child func() int) {
	if os.Getenv(env) == "1" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

// StartChild starts the test binary as a child of ChildMain (env=1, plus
// vars, each KEY=value), running no test, with its output to out. A child
// still running when the test ends is killed.
func StartChild(t testing.TB, env string, out io.Writer, vars ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), env+"=1"), vars...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child process: %v", err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}
