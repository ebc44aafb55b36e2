// Package schedlat exports the Go runtime's scheduling latency, the time
// goroutines spent runnable before they ran, as a Prometheus histogram with
// buckets fine enough to read a millisecond-scale tail:
// feed_go_sched_latency_seconds.
//
// The Go collector of client_golang can export the same runtime metric
// (/sched/latencies:seconds), but re-bucketed to powers of ten (about 1 ms,
// 10 ms and 117 ms around where a loaded process's tail lies), from which
// no p99 between 1 and 10 ms can be read. When a request is slow while the
// process's own work is fast, this histogram says whether its goroutines
// were waiting for a core: a machine or a process short of CPU shows here
// first.
package schedlat

import (
	"math"
	"runtime/metrics"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Name is the exported histogram's name.
const Name = "feed_go_sched_latency_seconds"

const runtimeMetric = "/sched/latencies:seconds"

// Buckets are the exported upper bounds, in seconds (+Inf implied).
var Buckets = []float64{
	10e-6, 50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1,
}

// Collector reads the runtime histogram at every scrape.
type Collector struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	s    []metrics.Sample
}

// New returns the collector; nil when the runtime does not offer the metric.
func New() *Collector {
	s := []metrics.Sample{{Name: runtimeMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return &Collector{
		desc: prometheus.NewDesc(Name,
			"Time goroutines spent runnable before running (Go's /sched/latencies:seconds, sampled by the runtime), re-bucketed; the sum is estimated from bucket midpoints. A tail here is a process or a machine short of CPU.",
			nil, nil),
		s: s,
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	metrics.Read(c.s)
	h := c.s[0].Value.Float64Histogram()
	count, sum, cum := Rebucket(h.Counts, h.Buckets, Buckets)
	c.mu.Unlock()
	m, err := prometheus.NewConstHistogram(c.desc, count, sum, cum)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	ch <- m
}

// Rebucket folds a runtime histogram (counts[i] observations in
// [edges[i], edges[i+1]); len(edges) == len(counts)+1, the outer edges
// possibly infinite) into cumulative counts at the upper bounds bounds
// (ascending, +Inf implied): each runtime bucket counts under the first
// bound at or above its upper edge, so an observation is never counted
// below its true value, and runtime buckets are far narrower than the
// exported ones. sum is estimated from the runtime buckets' midpoints
// (the finite edge of an unbounded bucket).
func Rebucket(counts []uint64, edges, bounds []float64) (count uint64, sum float64, cum map[float64]uint64) {
	per := make([]uint64, len(bounds))
	for i, n := range counts {
		if n == 0 {
			continue
		}
		lo, hi := edges[i], edges[i+1]
		count += n
		switch {
		case math.IsInf(lo, -1):
			sum += float64(n) * max(hi, 0)
		case math.IsInf(hi, 1):
			sum += float64(n) * lo
		default:
			sum += float64(n) * (lo + hi) / 2
		}
		for j, b := range bounds {
			if hi <= b {
				per[j] += n
				break
			}
		}
	}
	cum = make(map[float64]uint64, len(bounds))
	var run uint64
	for j, b := range bounds {
		run += per[j]
		cum[b] = run
	}
	return count, sum, cum
}
