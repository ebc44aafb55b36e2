package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/testkit/testenv"
)

// statusPNG, when set, is where TestStatusPageInChromium saves its
// screenshot: `make status-screenshot` writes docs/status.png with it.
var statusPNG = flag.String("status.png", "", "save the status page's screenshot to this file")

// TestStatusPageInChromium runs `feed dev` (embedded broker, a
// redis-server of its own), writes through the command side, poisons a
// message, records a `feed verify`, waits until the system is quiet and
// then reads `feed status --output json`, the /status page rendered by
// headless Chromium (its DOM after rendering, --dump-dom) and the JSON
// again. Every value the page shows sits in an element whose data-json
// attribute is its path in the JSON: each must equal the JSON's. The
// counters that move by themselves on a shared server (the WAL positions,
// the Redis node's commands and memory, CDC's progress row) must lie
// between the two readings; the rest must equal both. A screenshot is
// taken too, and must be a PNG of the window's size.
func TestStatusPageInChromium(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed: `bash scripts/prepare.sh` installs Debian's chromium as root (apt-get install chromium)")
	}
	dev := startDev(t, "")
	db, brokerAddr := dev.DB, dev.Broker
	ctx := context.Background()
	cfg, err := LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.KafkaBrokers = []string{brokerAddr}

	// Writes: two users, a follow, three posts.
	cmds, author, _ := dev.authorAndReader(t)
	for i := range 3 {
		if _, err := cmds.CreatePost.Handle(ctx, commands.CreatePost{AuthorID: author.ID, Content: fmt.Sprintf("post %d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// A poisoned message of the posts group, pending.
	pub, err := kafka.NewPublisher(connOf(cfg), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	pm := message.NewMessage("e-poison", []byte(`{"type":`))
	pm.Metadata.Set(kafka.MetaName, "post.created.v1")
	pm.Metadata.Set(kafka.MetaPartitionKey, "7")
	pm.Metadata.Set(kafka.MetaPoisonGroup, "feed.projection.posts")
	pm.Metadata.Set(kafka.MetaPoisonReason, "posts: apply post.created.v1: boom")
	if err := pub.Publish(kafka.PoisonTopic(cfg.Topic), pm); err != nil {
		t.Fatal(err)
	}
	_ = pub.Close()
	// A verification, recorded for the status.
	if code, out, errOut := runCLI(t, cfg, "verify", "--users", "5"); code != 0 {
		t.Fatalf("feed verify: exit %d\n%s%s", code, out, errOut)
	}

	readJSON := func() map[string]any {
		t.Helper()
		code, out, errOut := runCLI(t, cfg, "status", "--output", "json")
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("feed status --output json: exit %d, not JSON: %v\n%s%s", code, err, out, errOut)
		}
		if code != 0 {
			t.Fatalf("feed status --output json: exit %d\n%s%s", code, out, errOut)
		}
		return m
	}
	var events float64
	if err := db.Pool.QueryRow(ctx, `SELECT count(*)::float8 FROM events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	// Quiet: CDC recorded every event as published, every group has
	// consumed everything, the poisoned message is counted.
	testenv.Eventually(t, 30*time.Second, "the system is quiet", func() bool {
		m := readJSON()
		if lookup(m, "cdc.eventsPublished") != events || lookup(m, "poison.groups.0.pending") != 1.0 {
			return false
		}
		vs, _ := lookup(m, "projections.versions").([]any)
		for i := range vs {
			if lookup(m, fmt.Sprintf("projections.versions.%d.lag", i)) != 0.0 {
				return false
			}
		}
		return len(vs) == len(projections.Names())
	})

	before := readJSON()
	dom := runChromium(t, chromium, "--dump-dom", dev.Admin+"/status")
	after := readJSON()

	values := regexp.MustCompile(`<[a-z0-9]+\s[^>]*\bdata-json="([^"]+)"[^>]*>([^<]*)<`).FindAllStringSubmatch(dom, -1)
	shown := map[string]string{}
	for _, v := range values {
		shown[v[1]] = strings.TrimSpace(htmlUnescape(v[2]))
	}
	// The page must show at least these.
	for _, p := range []string{"generatedAt", "cdc.slot", "cdc.lagBytes", "cdc.lagSeconds", "cdc.eventsPublished", "cdc.currentLsn",
		"projections.versions.0.lag", "projections.versions.3.policy.celebrityThreshold", "projections.versions.0.policy.inboxLayout",
		"projections.rebuild.running", "poison.groups.0.pending", "verify.results.0.result", "verify.results.0.users",
		"redis.nodes.0.keys", "redis.nodes.0.commands"} {
		if _, ok := shown[p]; !ok {
			t.Errorf("the page does not show %s", p)
		}
	}
	between := map[string]bool{"generatedAt": true, "cdc.confirmedLsn": true, "cdc.currentLsn": true, "cdc.progressSavedAt": true,
		"redis.nodes.0.commands": true}
	for path, text := range shown {
		b, a := lookup(before, path), lookup(after, path)
		switch {
		case path == "cdc.lagBytes":
			// Of the page's own WAL positions, read in one query.
			want := lsn(t, shown["cdc.currentLsn"]) - lsn(t, shown["cdc.confirmedLsn"])
			if got, _ := strconv.ParseFloat(text, 64); got != float64(want) {
				t.Errorf("%s: page %s, want %d (its server LSN less its confirmed LSN)", path, text, want)
			}
		case path == "redis.nodes.0.memoryBytes":
			got, _ := strconv.ParseFloat(text, 64)
			if math.Abs(got-b.(float64)) > 1<<20 || math.Abs(got-a.(float64)) > 1<<20 {
				t.Errorf("%s: page %s, JSON %v then %v (more than 1 MiB apart)", path, text, b, a)
			}
		case strings.HasPrefix(path, "redis.nodes.") && strings.HasSuffix(path, ".addr"):
			// The page is redacted: nodes are numbered, not addressed.
			if !strings.HasPrefix(text, "node ") || strings.Contains(text, ":") {
				t.Errorf("%s: the page shows %q, want the node's number only", path, text)
			}
		case between[path]:
			if !ordered(t, path, b, text) || !ordered(t, path, text, a) {
				t.Errorf("%s: page %s is not between the JSON's %v and %v", path, text, b, a)
			}
		default:
			if !same(b, text) || !same(a, text) {
				t.Errorf("%s: page %q, JSON %v then %v", path, text, b, a)
			}
		}
	}
	t.Logf("%d values on the page compared with feed status --output json", len(shown))

	// The screenshot.
	shot := filepath.Join(t.TempDir(), "status.png")
	runChromium(t, chromium, "--screenshot="+shot, "--window-size=1280,1500", "--hide-scrollbars", dev.Admin+"/status")
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if s := img.Bounds().Size(); s.X != 1280 || s.Y != 1500 {
		t.Errorf("screenshot %v, want 1280x1500", s)
	}
	if *statusPNG != "" {
		if err := os.WriteFile(*statusPNG, b, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot saved to %s", *statusPNG)
	}
}

// runChromium runs headless Chromium with args and returns its stdout.
func runChromium(t *testing.T, chromium string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, append([]string{"--headless", "--no-sandbox", "--disable-gpu",
		"--disable-dev-shm-usage", "--no-first-run", "--user-data-dir=" + t.TempDir()}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errb.String())
	}
	return out.String()
}

// lookup is the value at a dotted path of a decoded JSON object (list
// items by index), nil when absent.
func lookup(m any, path string) any {
	v := m
	for _, k := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// same reports whether the page's text is the JSON value in the page's
// formats (status/page.go): integers as they are, other numbers with one
// decimal, times in RFC 3339 to the second, yes/no, and null as "none" or
// "unknown".
func same(v any, text string) bool {
	switch x := v.(type) {
	case nil:
		return text == "none" || text == "unknown"
	case bool:
		return (x && text == "yes") || (!x && text == "no")
	case float64:
		if x == math.Trunc(x) && !strings.Contains(text, ".") {
			return strconv.FormatFloat(x, 'f', 0, 64) == text
		}
		return fmt.Sprintf("%.1f", x) == text
	case string:
		if t, err := time.Parse(time.RFC3339Nano, x); err == nil {
			return t.UTC().Format(time.RFC3339) == text
		}
		return x == text
	}
	return false
}

// ordered reports whether a <= b, each a JSON value or the page's text: an
// LSN, a time or a number.
func ordered(t *testing.T, path string, a, b any) bool {
	t.Helper()
	str := func(v any) string {
		if f, ok := v.(float64); ok {
			return strconv.FormatFloat(f, 'f', 0, 64)
		}
		s, _ := v.(string)
		return s
	}
	sa, sb := str(a), str(b)
	if strings.Contains(sa, "/") {
		return lsn(t, sa) <= lsn(t, sb)
	}
	if ta, err := time.Parse(time.RFC3339Nano, sa); err == nil {
		tb, err := time.Parse(time.RFC3339Nano, sb)
		return err == nil && !ta.Truncate(time.Second).After(tb.Truncate(time.Second))
	}
	na, errA := strconv.ParseFloat(sa, 64)
	nb, errB := strconv.ParseFloat(sb, 64)
	if errA != nil || errB != nil {
		t.Errorf("%s: %q or %q is not a number", path, sa, sb)
		return false
	}
	return na <= nb
}

// lsn parses a PostgreSQL LSN, X/Y in hexadecimal.
func lsn(t *testing.T, s string) uint64 {
	t.Helper()
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		t.Errorf("LSN %q does not parse", s)
		return 0
	}
	return h<<32 | l
}

// htmlUnescape undoes the entities html/template writes in text.
func htmlUnescape(s string) string {
	return strings.NewReplacer("&amp;", "&", "&lt;", "<", "&gt;", ">", "&#34;", `"`, "&#39;", "'", "&quot;", `"`).Replace(s)
}
