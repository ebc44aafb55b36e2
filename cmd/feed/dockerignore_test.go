package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// TestDockerignore reads .dockerignore as docker build does
// (moby/patternmatcher, the matcher of Docker's builder) and checks that
// every file the Dockerfile's build reads stays in the context: what its
// COPY lines name, and each Go file and embedded file of the module's
// packages that ./cmd/feed imports; and that what it is for, leaving out
// local state, VCS, docs and tests, happens.
func TestDockerignore(t *testing.T) {
	const root = "../.."
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	excluded := func(rel string) bool {
		t.Helper()
		m, err := pm.MatchesOrParentMatches(filepath.ToSlash(rel))
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		return m
	}

	// The Dockerfile's build-stage COPY sources (not COPY --from).
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	copies := 0
	sc := bufio.NewScanner(bytes.NewReader(dockerfile))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || fields[0] != "COPY" || strings.HasPrefix(fields[1], "--from") {
			continue
		}
		for _, src := range fields[1 : len(fields)-1] {
			copies++
			if src != "." && excluded(src) {
				t.Errorf("the Dockerfile copies %s, which .dockerignore leaves out", src)
			}
		}
	}
	if copies < 3 {
		t.Fatalf("found %d COPY sources in the Dockerfile, want go.mod, go.sum and .", copies)
	}

	// Every file go build ./cmd/feed reads from the module.
	out, err := exec.Command("go", "list", "-deps", "-json=Dir,Module,GoFiles,CgoFiles,EmbedFiles,SFiles,HFiles", "./").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	needed := 0
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			Dir                                           string
			Module                                        *struct{ Path string }
			GoFiles, CgoFiles, EmbedFiles, SFiles, HFiles []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Module == nil || p.Module.Path != "github.com/feedco/feed" {
			continue
		}
		for _, list := range [][]string{p.GoFiles, p.CgoFiles, p.EmbedFiles, p.SFiles, p.HFiles} {
			for _, name := range list {
				rel, err := filepath.Rel(abs, filepath.Join(p.Dir, name))
				if err != nil {
					t.Fatal(err)
				}
				needed++
				if excluded(rel) {
					t.Errorf("go build ./cmd/feed reads %s, which .dockerignore leaves out", rel)
				}
			}
		}
	}
	if needed < 50 {
		t.Fatalf("go list found %d files of the module that the build reads, want the whole of cmd/feed's imports", needed)
	}

	for _, rel := range []string{".git", ".git/HEAD", "bin/feed", ".feed/kafka", "docs/status.png", "README.md",
		"cmd/feed/cli_test.go", "replay/testdata/x", "e2e/doc.go", "compose.yaml"} {
		if !excluded(rel) {
			t.Errorf(".dockerignore keeps %s", rel)
		}
	}
}
