// Package archtest checks, by reading the source, the structural rules the
// rest of the repository relies on: which package may spell a Redis key or
// hold a Lua script, who may read the environment, and which packages may
// import which (docs/architecture.md, "Packages").
package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/feedco/feed"

// sourceFile is one parsed Go file of the repository.
type sourceFile struct {
	path string // relative to the repository root, slash-separated
	dir  string // its package directory, relative
	test bool   // a _test.go file
	ast  *ast.File
}

// repoFiles parses every Go file of the repository once.
func repoFiles(t *testing.T) []sourceFile {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found from %s: %v", root, err)
	}
	fset := token.NewFileSet()
	var files []sourceFile
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		files = append(files, sourceFile{
			path: rel,
			dir:  filepath.ToSlash(filepath.Dir(rel)),
			test: strings.HasSuffix(p, "_test.go"),
			ast:  f,
		})
		return nil
	})
	if err != nil {
		t.Fatalf("read the repository: %v", err)
	}
	if len(files) < 50 {
		t.Fatalf("found only %d Go files under %s: the walk is broken", len(files), root)
	}
	return files
}

func under(dir, prefix string) bool { return dir == prefix || strings.HasPrefix(dir, prefix+"/") }

// binary says whether dir holds a binary's code: the product's cmd/, or
// the benchmark module's bench/cmd/ (feedbench).
func binary(dir string) bool { return under(dir, "cmd") || under(dir, "bench/cmd") }

// keyFragments are the pieces of Redis key names and sentinel members that
// only the read-model package may spell (the inboxes': the home feed's
// owner, inboxFragments).
var keyFragments = []string{
	"timeline:{", "newest:{", "post:{", "followers:{", "following:{", "following_v:{",
	"projection:versions", "projection:rebuild", "~floor", "~built",
}

// TestOnlyReadModelSpellsKeys fails when non-test code outside readmodel/
// names a Redis key prefix or a sentinel, or holds a Lua script; the home
// feed's owner (homefeed/) may hold the scripts of its inboxes.
func TestOnlyReadModelSpellsKeys(t *testing.T) {
	for _, f := range repoFiles(t) {
		if f.test || under(f.dir, "readmodel") || under(f.dir, "testkit/archtest") {
			continue
		}
		owner := under(f.dir, homeFeedOwner)
		ast.Inspect(f.ast, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(n.Value)
				if err != nil {
					return true
				}
				for _, frag := range keyFragments {
					if strings.Contains(s, frag) {
						t.Errorf("%s: the string %q spells the Redis key fragment %q; call readmodel instead", f.path, s, frag)
					}
				}
				if strings.Contains(s, "redis.call") && !owner {
					t.Errorf("%s: holds a Lua script; scripts belong to readmodel", f.path)
				}
			case *ast.BinaryExpr:
				// "celebrities" alone is also a flag name; concatenated
				// into a string it is the celebrity set's key.
				for _, side := range []ast.Expr{n.X, n.Y} {
					if lit, ok := side.(*ast.BasicLit); ok && n.Op == token.ADD && lit.Value == `"celebrities"` {
						t.Errorf("%s: builds the celebrity set's key; call readmodel instead", f.path)
					}
				}
			case *ast.SelectorExpr:
				if n.Sel.Name == "NewScript" && !owner {
					t.Errorf("%s: creates a Redis script; scripts belong to readmodel", f.path)
				}
			}
			return true
		})
	}
}

// homeFeedOwner is the package that owns the home feed: its inboxes'
// keys, layout and rules (docs/architecture.md).
const homeFeedOwner = "homefeed"

// inboxFragments name an inbox key (the packed inbox `pfeed:{u}` and its
// buffer, and the sorted-set inbox `feed:{u}` of earlier releases), and
// layoutNames an inbox layout: only the home feed's owner spells them.
var (
	inboxFragments = []string{"pfeed:", "feed:{"}
	layoutNames    = map[string]bool{"packed": true, "zset": true}
	layoutIdents   = []string{"InboxLayoutZset", "InboxLayoutPacked", "InboxStore", "PackedInbox"}
)

// TestOnlyHomeFeedSpellsInboxes fails when non-test code outside the home
// feed's owner names an inbox key or a layout (a string literal that is a
// layout's name, or an identifier of the layouts' old branching): callers
// ask the owner (homefeed.Manager, homefeed.Inboxes), they do not know how
// an inbox is stored.
func TestOnlyHomeFeedSpellsInboxes(t *testing.T) {
	for _, f := range repoFiles(t) {
		if f.test || under(f.dir, homeFeedOwner) || under(f.dir, "testkit/archtest") {
			continue
		}
		ast.Inspect(f.ast, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(n.Value)
				if err != nil {
					return true
				}
				for _, frag := range inboxFragments {
					if strings.Contains(s, frag) {
						t.Errorf("%s: the string %q spells the inbox key fragment %q; call homefeed instead", f.path, s, frag)
					}
				}
				if layoutNames[s] {
					t.Errorf("%s: the string %q names an inbox layout; only homefeed knows how inboxes are stored", f.path, s)
				}
			case *ast.Ident:
				for _, id := range layoutIdents {
					if strings.Contains(n.Name, id) {
						t.Errorf("%s: %s names an inbox layout; only homefeed knows how inboxes are stored", f.path, n.Name)
					}
				}
			}
			return true
		})
	}
}

// envReaders are the functions that read or change the process environment.
var envReaders = map[string]bool{
	"Getenv": true, "LookupEnv": true, "Environ": true, "Setenv": true,
	"Unsetenv": true, "Clearenv": true, "ExpandEnv": true,
}

// TestOnlyCmdReadsEnvironment fails when code outside the binaries (cmd/,
// bench/cmd/) and the test helpers reads the environment: configuration is
// read once, in a binary's main package, and passed down as values. Tests
// may (a crash test re-executes itself with a variable that tells the
// child its role).
func TestOnlyCmdReadsEnvironment(t *testing.T) {
	for _, f := range repoFiles(t) {
		if f.test || binary(f.dir) || under(f.dir, "testkit") {
			continue
		}
		osName := importName(f.ast, "os")
		sysName := importName(f.ast, "syscall")
		ast.Inspect(f.ast, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || !envReaders[sel.Sel.Name] {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && (x.Name == osName || x.Name == sysName) {
				t.Errorf("%s: %s.%s reads the environment; only cmd/ does (pass the value in a config)", f.path, x.Name, sel.Sel.Name)
			}
			return true
		})
	}
}

// importName returns the name a file uses for an imported package path, or
// "" when it does not import it.
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if p != path {
			continue
		}
		if imp.Name != nil {
			return imp.Name.Name
		}
		return filepath.Base(path)
	}
	return ""
}

// TestImportRules keeps the flow one way: the rules of docs/architecture.md,
// "Packages". The binaries and the tests may compose the whole system; the
// rules between the layers hold for tests too.
func TestImportRules(t *testing.T) {
	type rule struct {
		from, to string // package directories; "*" is any
		why      string
	}
	forbidden := []rule{
		{"*", "api", "nothing imports the HTTP layer"},
		{"*", "cmd", "nothing imports a binary"},
		{"commands", "queries", "the write and read sides are independent"},
		{"queries", "commands", "the write and read sides are independent"},
		{"cdc", "projections", "CDC and the projectors meet only in Kafka"},
		{"projections", "cdc", "CDC and the projectors meet only in Kafka"},
		{"readmodel", "projections", "the read models do not know their writers"},
		{"readmodel", "queries", "the read models do not know their readers"},
		{"readmodel", "homefeed", "the read models do not know the home feed's owner"},
		{"homefeed", "projections", "the home feed's owner does not know its callers"},
		{"homefeed", "queries", "the home feed's owner does not know its callers"},
		{"homefeed", "rebuild", "the home feed's owner does not know its callers"},
		{"homefeed", "verify", "the home feed's owner does not know its callers"},
	}
	for _, f := range repoFiles(t) {
		for _, imp := range f.ast.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			dep, ok := strings.CutPrefix(p, module+"/")
			if !ok {
				continue
			}
			if under(f.dir, "events") && !f.test {
				t.Errorf("%s imports %s: events imports nothing of ours", f.path, p)
			}
			for _, r := range forbidden {
				if (r.from == "*" || under(f.dir, r.from)) && under(dep, r.to) && !under(f.dir, r.to) {
					if r.from == "*" && (f.test || binary(f.dir)) {
						continue // the binaries and the tests compose the system
					}
					t.Errorf("%s imports %s: %s", f.path, p, r.why)
				}
			}
		}
	}
}

// TestProductDoesNotImportTestSupport fails when a product package (any
// non-test file outside testkit/) imports the test tree, or when any file
// of the product module imports the benchmark's module: the binary ships
// the product only.
func TestProductDoesNotImportTestSupport(t *testing.T) {
	for _, f := range repoFiles(t) {
		for _, imp := range f.ast.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			dep, ok := strings.CutPrefix(p, module+"/")
			if !ok {
				continue
			}
			if under(dep, "testkit") && !f.test && !under(f.dir, "testkit") {
				t.Errorf("%s imports %s: the test tree is for tests only", f.path, p)
			}
			if under(dep, "bench") && !under(f.dir, "bench") {
				t.Errorf("%s imports %s: the benchmark is a module of its own, beside the product", f.path, p)
			}
		}
	}
}

// TestRolesStartGoroutinesThroughServices fails when the binary's own code
// (cmd/, not its tests) has a go statement: what a role runs in the
// background is an internal/service Service, started, awaited ready and
// stopped by service.Run or its owner (docs/architecture.md, Background
// services).
func TestRolesStartGoroutinesThroughServices(t *testing.T) {
	for _, f := range repoFiles(t) {
		if f.test || !under(f.dir, "cmd") {
			continue
		}
		ast.Inspect(f.ast, func(n ast.Node) bool {
			if _, ok := n.(*ast.GoStmt); ok {
				t.Errorf("%s has a go statement: run it as an internal/service Service", f.path)
			}
			return true
		})
	}
}

// TestReadSideStartsGoroutinesInRun fails when a product file of queries/,
// readmodel/ or homefeed/ has a go statement outside a function named Run
// or run...: the read side's background work is what a service runs
// (queries.Feed.Run, readmodel.LiveVersions.Run), and its parts start
// their goroutines in their own run functions, called from there, never
// in a constructor or on a first call (docs/architecture.md, Background
// services).
func TestReadSideStartsGoroutinesInRun(t *testing.T) {
	for _, f := range repoFiles(t) {
		if f.test || !(under(f.dir, "queries") || under(f.dir, "readmodel") || under(f.dir, "homefeed")) {
			continue
		}
		for _, d := range f.ast.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			name := fn.Name.Name
			if name == "Run" || strings.HasPrefix(name, "run") {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if _, ok := n.(*ast.GoStmt); ok {
					t.Errorf("%s: %s has a go statement: start goroutines in the Run a service runs, or in a run function called from it", f.path, name)
				}
				return true
			})
		}
		// A go statement outside any function (in a package-level
		// variable's initializer) is not possible; one in a func literal
		// of a package-level variable is.
		for _, d := range f.ast.Decls {
			if g, ok := d.(*ast.GenDecl); ok {
				ast.Inspect(g, func(n ast.Node) bool {
					if _, ok := n.(*ast.GoStmt); ok {
						t.Errorf("%s: a package-level function literal has a go statement: start goroutines in Run", f.path)
					}
					return true
				})
			}
		}
	}
}
