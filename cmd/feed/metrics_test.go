package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Every role's registry carries feed_build_info: one series, value 1,
// labelled with the binary's version, revision and Go version.
func TestRoleRegistryBuildInfo(t *testing.T) {
	mfs, err := newRoleRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, mf := range mfs {
		if mf.GetName() != "feed_build_info" {
			continue
		}
		found = true
		if len(mf.GetMetric()) != 1 {
			t.Fatalf("feed_build_info has %d series, want 1", len(mf.GetMetric()))
		}
		m := mf.GetMetric()[0]
		if v := m.GetGauge().GetValue(); v != 1 {
			t.Errorf("feed_build_info = %v, want 1", v)
		}
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["goversion"] != runtime.Version() {
			t.Errorf("goversion = %q, want %q", labels["goversion"], runtime.Version())
		}
		for _, k := range []string{"version", "revision"} {
			if labels[k] == "" {
				t.Errorf("label %s is empty: %v", k, labels)
			}
		}
	}
	if !found {
		t.Fatal("no feed_build_info in a role's registry")
	}
}

// A build without VCS information (the Dockerfile's: .dockerignore leaves
// .git out, and it builds with -buildvcs=false) reports the revision
// given with -X main.stampedRevision, as the Dockerfile's FEED_REVISION
// argument sets it.
func TestStampedRevision(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "feed")
	build := exec.Command("go", "build", "-buildvcs=false", "-ldflags=-X main.stampedRevision=0123abcd", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("feed version: %v", err)
	}
	if !strings.Contains(string(out), "revision 0123abcd\n") {
		t.Errorf("feed version of a build stamped 0123abcd:\n%s", out)
	}
}
