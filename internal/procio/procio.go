// Package procio exports how many read and write system calls the process
// has made (Linux's /proc/self/io syscr and syscw) as
// feed_process_io_syscalls_total{op="read"|"write"}.
//
// On a host where a system call is costly (a virtual machine, every
// service on loopback) a process's CPU follows its calls more than its
// own work: each network round trip is a write and one or two reads on
// either side, and a write on loopback also pays the receiver's delivery.
// Unlike CPU time, the count per unit of work (per feed read, per post)
// does not move with the machine's speed, so a change that saves a round
// trip shows in one short run (`feedbench`, docs/bench.md).
//
// The kernel counts read(2), write(2) and their vectored and positional
// forms, on sockets, pipes and files alike, including those that return
// EAGAIN; recvfrom(2), sendto(2), epoll and futex are not counted.
package procio

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
)

// Name is the exported counter's name.
const Name = "feed_process_io_syscalls_total"

// Collector reads /proc/self/io at every scrape.
type Collector struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	proc procfs.Proc
}

// New returns the collector; nil where /proc/self/io cannot be read (not
// Linux, or a kernel without task I/O accounting).
func New() *Collector {
	p, err := procfs.Self()
	if err != nil {
		return nil
	}
	if _, err := p.IO(); err != nil {
		return nil
	}
	return &Collector{
		desc: prometheus.NewDesc(Name,
			"Read and write system calls the process made (/proc/self/io syscr and syscw: read, write and their vectored and positional forms, EAGAIN included; not recvfrom, sendto, epoll or futex). Per unit of work it is the count of the process's I/O calls, which the machine's speed does not change.",
			[]string{"op"}, nil),
		proc: p,
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector. A failed read exports nothing
// (a scrape without the series, not a false zero).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	io, err := c.proc.IO()
	c.mu.Unlock()
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(io.SyscR), "read")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(io.SyscW), "write")
}
