package bench

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// CPU is the machine's CPU time during the mixed phase, by process group,
// in percent of one core (200 is both cores of a 2-core machine). It is
// read from /proc, so it covers every process of the machine the
// benchmark runs on, and means what it says only when the system under
// test runs there too (`feed dev` beside its PostgreSQL and Redis, as in
// docs/bench.md). A process that ended during the phase is not counted;
// one that started during it counts from its start.
//
// Steal is the time the hypervisor ran something else while this
// machine's CPUs had work (/proc/stat's steal, all CPUs), in percent of
// one core over the same window; -1 when /proc/stat could not be read. On
// a shared virtual machine it is what makes runs of the same code differ:
// the processes' CPU times above do not include it, but their work is
// slowed by the cache and the cycles they lose to it.
type CPU struct {
	Cores   int                `json:"cores"`
	Seconds float64            `json:"seconds"`
	Percent map[string]float64 `json:"percent"` // group -> % of one core
	Total   float64            `json:"total"`
	Steal   float64            `json:"steal"`
}

// CPU groups, by the process's name (/proc/<pid>/comm).
const (
	cpuBench    = "bench" // this process
	cpuFeed     = "feed"  // other feed processes: feed dev, feed cdc, ...
	cpuPostgres = "postgres"
	cpuRedis    = "redis"
	cpuOther    = "other" // everything else, kernel threads included
)

// cpuSystem names the sum of the system under test's groups (feed, redis,
// postgres) in CPUPerEntry.
const cpuSystem = "system"

// perEntry is the CPU-µs per entry of the feed, redis and postgres groups
// and their sum; nil without entries.
func (c *CPU) perEntry(entries int64) map[string]float64 {
	if c == nil || entries <= 0 {
		return nil
	}
	out := map[string]float64{}
	for _, g := range []string{cpuFeed, cpuRedis, cpuPostgres} {
		us := c.Percent[g] / 100 * c.Seconds * 1e6 / float64(entries)
		out[g] = us
		out[cpuSystem] += us
	}
	return out
}

var cpuGroupOrder = []string{cpuFeed, cpuRedis, cpuPostgres, cpuBench, cpuOther}

// cpuGroup names the group of a process from its comm.
func cpuGroup(comm string, self bool) string {
	switch {
	case self:
		return cpuBench
	case comm == "feed" || strings.HasPrefix(comm, "feed.") || strings.HasPrefix(comm, "feed-"):
		return cpuFeed // a build under another name, as when two builds are compared
	case comm == "postgres" || strings.HasPrefix(comm, "postgres:"):
		return cpuPostgres
	case strings.HasPrefix(comm, "redis-server"):
		return cpuRedis
	}
	return cpuOther
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go supports (sysconf(_SC_CLK_TCK) without cgo).
const clockTicks = 100

// procTime is one process's CPU time so far.
type procTime struct {
	group string
	ticks uint64 // utime + stime
}

// cpuSnapshot is the CPU time of every process, by pid, at one moment.
type cpuSnapshot struct {
	at    time.Time
	procs map[int]procTime
	steal float64 // seconds of steal time of all CPUs so far (/proc/stat); -1 unknown
}

// procCPU returns comm and utime+stime (in clock ticks) from a process's
// /proc/<pid>/stat. gone is true when the file cannot be read (the
// process exited).
func procCPU(p procfs.Proc) (comm string, ticks uint64, gone bool, err error) {
	st, err := p.Stat()
	if err != nil {
		var pe *fs.PathError
		return "", 0, errors.As(err, &pe), err
	}
	return st.Comm, uint64(st.UTime) + uint64(st.STime), false, nil
}

// readCPUSnapshot reads every process under proc (normally "/proc").
// Processes that exit while it reads are skipped.
func readCPUSnapshot(proc string, self int) (cpuSnapshot, error) {
	pfs, err := procfs.NewFS(proc)
	if err != nil {
		return cpuSnapshot{}, fmt.Errorf("open %s: %w", proc, err)
	}
	procs, err := pfs.AllProcs()
	if err != nil {
		return cpuSnapshot{}, fmt.Errorf("list %s: %w", proc, err)
	}
	snap := cpuSnapshot{at: time.Now(), procs: make(map[int]procTime, len(procs)), steal: -1}
	if st, err := pfs.Stat(); err == nil {
		snap.steal = st.CPUTotal.Steal
	}
	for _, p := range procs {
		comm, ticks, gone, err := procCPU(p)
		if gone {
			continue
		}
		if err != nil {
			return cpuSnapshot{}, fmt.Errorf("%s/%d/stat: %w", proc, p.PID, err)
		}
		snap.procs[p.PID] = procTime{group: cpuGroup(comm, p.PID == self), ticks: ticks}
	}
	if len(snap.procs) == 0 {
		return cpuSnapshot{}, fmt.Errorf("no processes under %s", proc)
	}
	return snap, nil
}

// cpuBetween is the CPU time of each group from a to b, in percent of one
// core over the wall time between them. A pid seen in b only counts from
// zero (it started in between); a pid whose group changed (reused) too.
func cpuBetween(a, b cpuSnapshot, cores int) CPU {
	secs := b.at.Sub(a.at).Seconds()
	c := CPU{Cores: cores, Seconds: secs, Percent: map[string]float64{}, Steal: -1}
	if secs <= 0 {
		return c
	}
	if a.steal >= 0 && b.steal >= a.steal {
		c.Steal = (b.steal - a.steal) / secs * 100
	}
	for pid, pb := range b.procs {
		var t0 uint64
		if pa, ok := a.procs[pid]; ok && pa.group == pb.group && pa.ticks <= pb.ticks {
			t0 = pa.ticks
		}
		p := float64(pb.ticks-t0) / clockTicks / secs * 100
		c.Percent[pb.group] += p
		c.Total += p
	}
	for _, g := range cpuGroupOrder {
		c.Percent[g] += 0 // every group present, zero or not
	}
	return c
}

// String is the report's line: "feed 89, redis 68, ... = 191% of 200%
// (2 cores, 30 s); steal 4".
func (c CPU) String() string {
	parts := make([]string, 0, len(cpuGroupOrder))
	for _, g := range cpuGroupOrder {
		parts = append(parts, fmt.Sprintf("%s %.0f", g, c.Percent[g]))
	}
	s := fmt.Sprintf("%s = %.0f%% of %d%% (%d cores, %.0f s)", strings.Join(parts, ", "), c.Total, 100*c.Cores, c.Cores, c.Seconds)
	if c.Steal >= 0 {
		s += fmt.Sprintf("; steal %.1f", c.Steal)
	}
	return s
}

// cpuMeter takes the snapshot at the start of the phase; end returns the
// CPU since. Without a readable /proc (not Linux) it measures nothing and
// end returns nil.
type cpuMeter struct {
	proc  string
	self  int
	start cpuSnapshot
	err   error
}

func startCPUMeter(proc string) *cpuMeter {
	m := &cpuMeter{proc: proc, self: os.Getpid()}
	m.start, m.err = readCPUSnapshot(proc, m.self)
	return m
}

func (m *cpuMeter) end() (*CPU, error) {
	if m.err != nil {
		return nil, m.err
	}
	b, err := readCPUSnapshot(m.proc, m.self)
	if err != nil {
		return nil, err
	}
	c := cpuBetween(m.start, b, runtime.NumCPU())
	return &c, nil
}
