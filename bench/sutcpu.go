package bench

import (
	"context"
	"time"

	"github.com/prometheus/procfs"

	"github.com/feedco/feed/internal/redisinfo"
)

// sutSnapshot is the CPU the system under test has used so far, by part,
// and the inbox projector's entries counter at the same moment.
type sutSnapshot struct {
	at      time.Time
	entries float64 // -1 when unknown
	feed    float64 // seconds: process_cpu_seconds_total of the API's process; -1 unknown
	redis   float64 // seconds: INFO cpu; -1 unknown
	// pg is CPU ticks per backend of the benchmark's database.
	pg map[int]uint64
	// reads is the API's latency histogram of feed reads, sched its Go
	// scheduling latency (nil: absent).
	reads, sched *serverHist
	// I/O calls so far: the API's process (its /metrics), Redis (INFO
	// stats) and each backend of the benchmark's database (/proc/<pid>/io,
	// readable only by the backends' owner or root), and each backend's
	// context switches (/proc/<pid>/status).
	feedIO, redisIO ioCount
	pgIO            map[int]ioCount
	pgSwitches      map[int]float64
	// lists is the inbox projector's follower lists by source so far (the
	// API's /metrics; nil: absent).
	lists listCount
	// retries is the projectors' handler retries so far (nil: absent).
	retries retryCount
}

// backendsSQL lists the PostgreSQL backends of the benchmark's database:
// the API's and the projectors' pools and CDC's walsender (a logical
// replication connection belongs to its database). The server's shared
// processes (WAL writer, checkpointer, ...) are not counted.
const backendsSQL = `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`

// sutCPU takes a snapshot; a part it cannot read is -1 (nil for pg).
func (r *Runner) sutCPU(ctx context.Context) sutSnapshot {
	m := r.scrapeMetrics(ctx)
	s := sutSnapshot{at: time.Now(), entries: m.entries, feed: m.cpu, redis: -1, reads: m.reads, sched: m.sched,
		feedIO: m.io, redisIO: noIO, lists: m.lists, retries: m.retries}
	if r.deps.Redis != nil {
		if d, err := redisinfo.CPU(ctx, r.deps.Redis); err == nil {
			s.redis = d.Seconds()
		}
		if rd, wr, err := redisIOCalls(ctx, r.deps.Redis); err == nil {
			s.redisIO = ioCount{float64(rd), float64(wr)}
		}
	}
	if r.deps.DB == nil {
		return s
	}
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		return s
	}
	rows, err := r.deps.DB.Query(ctx, backendsSQL)
	if err != nil {
		return s
	}
	defer rows.Close()
	s.pg, s.pgIO, s.pgSwitches = map[int]uint64{}, map[int]ioCount{}, map[int]float64{}
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) != nil {
			continue
		}
		p, err := fs.Proc(pid)
		if err != nil {
			continue
		}
		if _, ticks, _, err := procCPU(p); err == nil {
			s.pg[pid] = ticks
		}
		if io, err := p.IO(); err == nil {
			s.pgIO[pid] = ioCount{float64(io.SyscR), float64(io.SyscW)}
		}
		if n, err := switches(p); err == nil {
			s.pgSwitches[pid] = n
		}
	}
	return s
}

// since is the CPU used from b to s, in CPU's form (percent of one core by
// part: feed, redis, postgres); a part unknown at either end is left out.
// A backend that started in between counts from its start; one that ended
// in between is not counted.
func (s sutSnapshot) since(b sutSnapshot) *CPU {
	secs := s.at.Sub(b.at).Seconds()
	c := &CPU{Seconds: secs, Percent: map[string]float64{}}
	if secs <= 0 {
		return c
	}
	pct := func(used float64) float64 { return used / secs * 100 }
	if s.feed >= 0 && b.feed >= 0 {
		c.Percent[cpuFeed] = pct(s.feed - b.feed)
	}
	if s.redis >= 0 && b.redis >= 0 {
		c.Percent[cpuRedis] = pct(s.redis - b.redis)
	}
	if s.pg != nil && b.pg != nil {
		var ticks uint64
		for pid, t := range s.pg {
			if t0, ok := b.pg[pid]; ok && t0 <= t {
				ticks += t - t0
			} else if !ok {
				ticks += t
			}
		}
		c.Percent[cpuPostgres] = pct(float64(ticks) / clockTicks)
	}
	for _, v := range c.Percent {
		c.Total += v
	}
	return c
}

// switches is p's context switches so far, voluntary and not: each time
// it slept until something woke it, or was preempted. A PostgreSQL backend
// is switched out between its client's messages: it sleeps until the next
// one, or, on a busy machine, the client it wakes with its answer takes
// its core first and the next message is there when it runs again. So its
// count follows its round trips, whichever way they go.
func switches(p procfs.Proc) (float64, error) {
	st, err := p.NewStatus()
	if err != nil {
		return 0, err
	}
	return float64(st.VoluntaryCtxtSwitches + st.NonVoluntaryCtxtSwitches), nil
}
