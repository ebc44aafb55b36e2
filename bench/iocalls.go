package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/internal/procio"
)

// ioCount is a process's read and write calls so far; -1 unknown.
type ioCount struct{ read, write float64 }

var noIO = ioCount{-1, -1}

func (c ioCount) known() bool { return c.read >= 0 && c.write >= 0 }

// ioCountOf reads the API's feed_process_io_syscalls_total from a scrape.
func ioCountOf(families map[string]*dto.MetricFamily) ioCount {
	c := noIO
	byOp := byLabel(families, procio.Name, "op")
	if v, ok := byOp["read"]; ok {
		c.read = v
	}
	if v, ok := byOp["write"]; ok {
		c.write = v
	}
	return c
}

// byLabel is the family name's values summed by their label's value; nil
// when the scrape has no such family.
func byLabel(families map[string]*dto.MetricFamily, name, label string) map[string]float64 {
	mf, ok := families[name]
	if !ok {
		return nil
	}
	out := map[string]float64{}
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out[l.GetValue()] += sampleValue(m)
			}
		}
	}
	return out
}

// IOCalls is the system under test's I/O calls over the mixed phase, by
// part (feed, redis, postgres): read and write system calls (Redis: the
// reads and writes of client connections it processed), and their sum
// per request the benchmark sent and per delivered inbox entry. Unlike CPU
// time, a count per unit of work does not depend on the machine's speed:
// two runs on different days compare directly. PostgreSQL's backends read
// and write their client sockets with recv and send, which /proc/<pid>/io
// does not count: their read and write calls are their files' (WAL, data
// pages read from the kernel's cache), and their round trips show in
// PostgresSwitches and in the API's own count (each round trip is a write
// and a read of its process).
type IOCalls struct {
	Parts map[string]IOPart `json:"parts"`
	// PostgresSwitches is the backends' context switches: each wait for
	// the client's next message, a lock or a WAL flush that a backend
	// slept through, and each time it was preempted (nil: unknown).
	PostgresSwitches *Switches `json:"postgresSwitches,omitempty"`
	// Requests is the HTTP requests of the phase: reads, writes and the
	// visibility probes' reads.
	Requests  int64 `json:"requests"`
	Delivered int64 `json:"deliveredEntries"`
}

// IOPart is one part's calls over the phase.
type IOPart struct {
	Read  float64 `json:"read"`
	Write float64 `json:"write"`
	// PerRequest and PerEntry are (Read+Write) per request and per
	// delivered entry (0: no requests, no entries).
	PerRequest float64 `json:"perRequest"`
	PerEntry   float64 `json:"perEntry"`
}

// Switches is a count over the phase, per request and per delivered entry
// (0: no requests, no entries).
type Switches struct {
	Count      float64 `json:"count"`
	PerRequest float64 `json:"perRequest"`
	PerEntry   float64 `json:"perEntry"`
}

// pidsSince sums s's counts less b's by process: a process that started
// in between counts from zero, one that ended in between (or whose pid
// was reused: a count that went down) is left out.
func pidsSince(s, b map[int]float64) float64 {
	var d float64
	for pid, c := range s {
		if c0 := b[pid]; c0 <= c {
			d += c - c0
		}
	}
	return d
}

// ioSince is the calls from b to s; nil when no part is known at both
// ends. A backend that started in between counts from its start; one that
// ended in between is not counted.
func (s sutSnapshot) ioSince(b sutSnapshot, requests, delivered int64) *IOCalls {
	out := &IOCalls{Parts: map[string]IOPart{}, Requests: requests, Delivered: delivered}
	add := func(part string, d ioCount) {
		p := IOPart{Read: d.read, Write: d.write}
		if requests > 0 {
			p.PerRequest = (d.read + d.write) / float64(requests)
		}
		if delivered > 0 {
			p.PerEntry = (d.read + d.write) / float64(delivered)
		}
		out.Parts[part] = p
	}
	if s.feedIO.known() && b.feedIO.known() {
		add(cpuFeed, ioCount{s.feedIO.read - b.feedIO.read, s.feedIO.write - b.feedIO.write})
	}
	if s.redisIO.known() && b.redisIO.known() {
		add(cpuRedis, ioCount{s.redisIO.read - b.redisIO.read, s.redisIO.write - b.redisIO.write})
	}
	if len(s.pgIO) > 0 && len(b.pgIO) > 0 {
		var d ioCount
		for pid, c := range s.pgIO {
			c0, ok := b.pgIO[pid]
			if !ok {
				c0 = ioCount{}
			}
			if c0.read <= c.read && c0.write <= c.write {
				d.read += c.read - c0.read
				d.write += c.write - c0.write
			}
		}
		add(cpuPostgres, d)
	}
	if len(s.pgSwitches) > 0 && len(b.pgSwitches) > 0 {
		w := &Switches{Count: pidsSince(s.pgSwitches, b.pgSwitches)}
		if requests > 0 {
			w.PerRequest = w.Count / float64(requests)
		}
		if delivered > 0 {
			w.PerEntry = w.Count / float64(delivered)
		}
		out.PostgresSwitches = w
	}
	if len(out.Parts) == 0 && out.PostgresSwitches == nil {
		return nil
	}
	return out
}

// requests is the phase's HTTP requests: reads, writes and probe reads.
func (m *Mixed) requests() int64 {
	n := int64(m.Reads.Count + m.Posts.Count + m.Follows.Count + m.Unfollows.Count)
	return n + int64(m.ProbeReadsPerSec*m.Seconds+0.5)
}

// writeIOCalls prints the phase's I/O calls per request and per entry.
func writeIOCalls(w io.Writer, c *IOCalls) {
	if c == nil {
		return
	}
	var parts []string
	for _, name := range []string{cpuFeed, cpuRedis, cpuPostgres} {
		p, ok := c.Parts[name]
		if !ok {
			continue
		}
		s := fmt.Sprintf("%s %.1f (%.0f reads + %.0f writes)", name, p.PerRequest, p.Read, p.Write)
		if name == cpuPostgres {
			s = fmt.Sprintf("%s files %.1f (%.0f reads + %.0f writes)", name, p.PerRequest, p.Read, p.Write)
		}
		if c.Delivered > 0 {
			s += fmt.Sprintf(", %.3f an entry", p.PerEntry)
		}
		parts = append(parts, s)
	}
	if sw := c.PostgresSwitches; sw != nil {
		parts = append(parts, fmt.Sprintf("postgres context switches %.1f (%.0f of its backends)", sw.PerRequest, sw.Count))
	}
	fmt.Fprintf(w, "I/O calls per request (%d requests, %d entries; read and write system calls, Redis's reads and writes processed; PostgreSQL's sockets use recv and send, not counted): %s\n",
		c.Requests, c.Delivered, strings.Join(parts, "; "))
}

// redisIOCalls is how many read and write events the server has processed so
// far (INFO stats total_reads_processed and total_writes_processed: a
// read or write of a client connection each, about one system call).
// On a cluster client it is the node the command reaches.
func redisIOCalls(ctx context.Context, rdb redis.UniversalClient) (reads, writes int64, err error) {
	info, err := rdb.Info(ctx, "stats").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("redis INFO stats: %w", err)
	}
	found := 0
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "total_reads_processed" && k != "total_writes_processed") {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("redis INFO stats %s: %w", k, err)
		}
		if k == "total_reads_processed" {
			reads = n
		} else {
			writes = n
		}
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("redis INFO stats: no total_reads_processed and total_writes_processed (Redis before 6.2?)")
	}
	return reads, writes, nil
}
