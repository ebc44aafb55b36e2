package bench

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

// statTail is what a kernel's stat line has after rsslimit (startcode ..
// exit_code).
const statTail = " 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0"

// statOf reads a stat line through a fake procfs, as procCPU reads it.
func statOf(t *testing.T, line string) (string, uint64, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "4242"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "4242", "stat"), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	pfs, err := procfs.NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pfs.Proc(4242)
	if err != nil {
		t.Fatal(err)
	}
	comm, ticks, _, err := procCPU(p)
	return comm, ticks, err
}

// A stat line's comm may hold spaces and parentheses; the times are the
// 14th and 15th fields of the line (utime, stime).
func TestParseProcStat(t *testing.T) {
	rest := " S 1 2 3 4 5 6 7 8 9 10 %d %d 0 0 20 0 1 0 99 1000 10 18446744073709551615" + statTail
	for _, tc := range []struct {
		comm         string
		utime, stime uint64
	}{
		{"postgres", 120, 30},
		{"redis-server", 0, 0},
		{"feed (x) y", 7, 5}, // a comm such a process can set itself
		{")(", 1, 2},
	} {
		line := "4242 (" + tc.comm + ")" + strings.Replace(strings.Replace(rest, "%d", strconv.FormatUint(tc.utime, 10), 1), "%d", strconv.FormatUint(tc.stime, 10), 1)
		comm, ticks, err := statOf(t, line)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if comm != tc.comm || ticks != tc.utime+tc.stime {
			t.Errorf("%q: comm %q ticks %d, want %q %d", line, comm, ticks, tc.comm, tc.utime+tc.stime)
		}
	}
	for _, bad := range []string{"", "4242 postgres S 1", "4242 (feed) S 1 2 3", "4242 (feed) S 1 2 3 4 5 6 7 8 9 10 x 1 0"} {
		if _, _, err := statOf(t, bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestCPUGroup(t *testing.T) {
	for _, tc := range []struct {
		comm  string
		self  bool
		group string
	}{
		{"feed", false, cpuFeed},
		{"feed", true, cpuBench},
		{"postgres", false, cpuPostgres},
		{"redis-server", false, cpuRedis},
		{"feed.new", false, cpuFeed}, // the binary under another name
		{"feed-fc3f87c", false, cpuFeed},
		{"feedbench", false, cpuOther}, // not the feed binary
		{"kworker/0:1", false, cpuOther},
	} {
		if g := cpuGroup(tc.comm, tc.self); g != tc.group {
			t.Errorf("cpuGroup(%q, %v) = %q, want %q", tc.comm, tc.self, g, tc.group)
		}
	}
}

// writeProc writes a fake procfs: pid -> (comm, ticks).
func writeProc(t *testing.T, dir string, procs map[int]procTime) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
	for pid, p := range procs {
		d := filepath.Join(dir, strconv.Itoa(pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		line := strconv.Itoa(pid) + " (" + p.group + ") S 1 1 1 0 -1 0 0 0 0 0 " + strconv.FormatUint(p.ticks, 10) + " 0 0 0 20 0 1 0 5 0 0 18446744073709551615" + statTail + "\n"
		if err := os.WriteFile(filepath.Join(d, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Entries that are not processes are skipped.
	if err := os.WriteFile(filepath.Join(dir, "uptime"), []byte("1 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeStat writes a /proc/stat whose cpu line has steal ticks of steal
// (the 8th number; USER_HZ 100) and whatever else a kernel writes there.
func writeStat(t *testing.T, dir string, steal int) {
	t.Helper()
	body := "cpu  1000 0 500 90000 10 0 5 " + strconv.Itoa(steal) + " 0 0\n" +
		"cpu0 500 0 250 45000 5 0 3 " + strconv.Itoa(steal/2) + " 0 0\n" +
		"intr 1 0\nctxt 100\nbtime 1700000000\nprocesses 10\nprocs_running 1\nprocs_blocked 0\nsoftirq 1 0 0 0 0 0 0 0 0 0 0\n"
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The groups' shares over a window: a process that ran throughout counts
// its difference, one that started in the window counts from zero, one
// that ended is not counted, a reused pid (another program) counts from
// zero; the groups add up to the total. The machine's steal time over
// the window comes from /proc/stat, and is unknown (-1) without it.
func TestCPUBetween(t *testing.T) {
	dir := t.TempDir()
	const self = 10
	// Here procTime.group holds the comm written to the fake stat file.
	writeProc(t, dir, map[int]procTime{
		self: {group: "feed", ticks: 1000},
		11:   {group: "feed", ticks: 5000},
		12:   {group: "postgres", ticks: 100},
		13:   {group: "postgres", ticks: 900}, // ends in the window
		14:   {group: "redis-server", ticks: 70},
		15:   {group: "sshd", ticks: 40}, // its pid is reused by a postgres
	})
	a, err := readCPUSnapshot(dir, self)
	if err != nil {
		t.Fatal(err)
	}
	if a.steal != -1 {
		t.Errorf("steal %v without a /proc/stat, want -1 (unknown)", a.steal)
	}
	later := a
	later.at = a.at.Add(time.Second)
	noStat := cpuBetween(a, later, 2)
	writeStat(t, dir, 700) // the machine's steal so far: 7 s
	if a, err = readCPUSnapshot(dir, self); err != nil {
		t.Fatal(err)
	}
	writeProc(t, dir, map[int]procTime{
		self: {group: "feed", ticks: 1050},        // +50
		11:   {group: "feed", ticks: 5180},        // +180
		12:   {group: "postgres", ticks: 130},     // +30
		14:   {group: "redis-server", ticks: 190}, // +120
		15:   {group: "postgres", ticks: 44},      // another program: 44, not 44 - 40
		16:   {group: "postgres", ticks: 6},       // new process: 6
	})
	writeStat(t, dir, 709) // +9 ticks: 4.5% of one core over 2 s
	b, err := readCPUSnapshot(dir, self)
	if err != nil {
		t.Fatal(err)
	}
	a.at = time.Unix(100, 0)
	b.at = a.at.Add(2 * time.Second) // percent = ticks / 100 / 2 s * 100 = ticks / 2
	c := cpuBetween(a, b, 2)
	want := map[string]float64{cpuBench: 25, cpuFeed: 90, cpuPostgres: 40, cpuRedis: 60, cpuOther: 0}
	for g, p := range want {
		if math.Abs(c.Percent[g]-p) > 1e-9 {
			t.Errorf("%s: %.3f%%, want %.3f%%", g, c.Percent[g], p)
		}
	}
	if len(c.Percent) != len(want) || math.Abs(c.Total-215) > 1e-9 || c.Cores != 2 || c.Seconds != 2 {
		t.Errorf("got %+v, want the groups above, total 215, 2 cores, 2 s", c)
	}
	if math.Abs(c.Steal-4.5) > 1e-9 {
		t.Errorf("steal %.3f%%, want 4.5%%", c.Steal)
	}
	if s := c.String(); s != "feed 90, redis 60, postgres 40, bench 25, other 0 = 215% of 200% (2 cores, 2 s); steal 4.5" {
		t.Errorf("line %q", s)
	}
	if noStat.Steal != -1 || strings.Contains(noStat.String(), "steal") {
		t.Errorf("without /proc/stat: steal %v, line %q; want -1 and no steal in the line", noStat.Steal, noStat.String())
	}
	rewound := b // later, but with less steal than at a: another boot
	rewound.steal = a.steal - 0.01
	if c := cpuBetween(a, rewound, 2); c.Steal != -1 {
		t.Errorf("steal going backwards (another boot) gave %v, want -1", c.Steal)
	}
	if _, err := readCPUSnapshot(t.TempDir(), self); err == nil {
		t.Error("an empty procfs gave a snapshot")
	}
}

// On the real /proc, the meter sees this process's work: it spins until
// getrusage says it used 300 ms of CPU (however busy the machine), and the
// meter must count that much for the bench group, to the ticks' 10 ms.
func TestCPUMeterSeesThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here")
	}
	used := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	m := startCPUMeter("/proc")
	u0 := used()
	for deadline := time.Now().Add(30 * time.Second); used()-u0 < 300*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatal("300 ms of CPU not had in 30 s")
		}
	}
	c, err := m.end()
	if err != nil {
		t.Fatal(err)
	}
	got := time.Duration(c.Percent[cpuBench] / 100 * c.Seconds * float64(time.Second))
	if got < 280*time.Millisecond || c.Total < c.Percent[cpuBench] {
		t.Errorf("spun 300 ms of CPU, meter counted %v for this process: %s", got, c)
	}
	if m := startCPUMeter(filepath.Join(t.TempDir(), "missing")); m.err == nil {
		t.Error("a missing procfs gave a meter")
	} else if c, err := m.end(); c != nil || err == nil {
		t.Errorf("end of a failed meter: %v, %v", c, err)
	}
}

func TestCPUPerEntry(t *testing.T) {
	c := &CPU{Cores: 2, Seconds: 10, Percent: map[string]float64{cpuFeed: 50, cpuRedis: 20, cpuPostgres: 10, cpuBench: 30}}
	got := c.perEntry(1_000_000)
	// feed: half a core for 10 s = 5 s = 5e6 µs over 1e6 entries.
	want := map[string]float64{cpuFeed: 5, cpuRedis: 2, cpuPostgres: 1, cpuSystem: 8}
	for k, v := range want {
		if d := got[k] - v; d > 1e-9 || d < -1e-9 {
			t.Fatalf("%s: %v µs/entry, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if c.perEntry(0) != nil || (*CPU)(nil).perEntry(5) != nil {
		t.Fatal("no entries or no CPU must give nil")
	}
}

func TestSystemCPUSince(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := sutSnapshot{at: t0, entries: 0, feed: 10, redis: 5, pg: map[int]uint64{1: 100, 2: 50, 3: 7}}
	// 10 s later: feed used 5 s, redis 2 s; backend 1 used 300 ticks, 2
	// was replaced by a new pid 4 that used 100 (2 ended: not counted).
	s := sutSnapshot{at: t0.Add(10 * time.Second), entries: 1e6, feed: 15, redis: 7, pg: map[int]uint64{1: 400, 3: 7, 4: 100}}
	c := s.since(b)
	want := map[string]float64{cpuFeed: 50, cpuRedis: 20, cpuPostgres: 40}
	for k, v := range want {
		if d := c.Percent[k] - v; d > 1e-9 || d < -1e-9 {
			t.Fatalf("%s: %v%%, want %v (all %v)", k, c.Percent[k], v, c.Percent)
		}
	}
	if e := c.perEntry(1e6); e[cpuSystem] < 10.999 || e[cpuSystem] > 11.001 {
		t.Fatalf("per entry %v, want 11 µs in all", e)
	}
	s.redis = -1
	if _, ok := s.since(b).Percent[cpuRedis]; ok {
		t.Fatal("a part unknown at one end must be left out")
	}
}
