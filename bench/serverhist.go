package bench

import (
	"math"
	"slices"

	dto "github.com/prometheus/client_model/go"

	"github.com/feedco/feed/internal/schedlat"
)

// serverHist is a histogram of the API's /metrics: cumulative counts by
// upper bound (seconds, ascending, +Inf last). Two are read: the latency
// of feed reads, feed_http_request_duration_seconds{route="/api/feed",
// method="GET"} (feedReadHist), and Go's scheduling latency of the
// process, feed_go_sched_latency_seconds (schedHist).
type serverHist struct {
	le     []float64
	counts []float64
}

// ServerReads is the API's own account of the mixed phase's feed reads
// (the probes' included), from its latency histogram: from the request's
// arrival to its response written, without the time the load generator
// or the network add. Beside the load generator's percentiles it tells
// whether a slow read was slow in the server. Quantiles are interpolated
// within buckets, as Prometheus's histogram_quantile does.
type ServerReads struct {
	Count int64   `json:"count"`
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
	// Within10ms is the share of reads served within 10 ms (0-1).
	Within10ms float64 `json:"within10ms"`
}

// ServerSched is how long the API process's goroutines waited for a core
// during the mixed phase: Go's scheduling latency (the runtime samples
// it), from the API's feed_go_sched_latency_seconds. A read whose
// goroutines wait milliseconds here is slow for want of CPU, not for
// its own work: beside ServerReads it tells a saturated machine from a
// slow handler.
type ServerSched struct {
	Samples int64   `json:"samples"`
	P50Us   float64 `json:"p50Us"`
	P99Ms   float64 `json:"p99Ms"`
	P999Ms  float64 `json:"p999Ms"`
	// Over1ms is the share of waits longer than 1 ms (0-1).
	Over1ms float64 `json:"over1ms"`
}

// feedReadHist reads the histogram of GET /api/feed from a scrape's
// families; nil when it is not there.
func feedReadHist(families map[string]*dto.MetricFamily) *serverHist {
	return histOf(families, "feed_http_request_duration_seconds", func(m *dto.Metric) bool {
		route, method := "", ""
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "route":
				route = l.GetValue()
			case "method":
				method = l.GetValue()
			}
		}
		return route == "/api/feed" && method == "GET"
	})
}

// schedHist reads the API's scheduling latency histogram; nil when it is
// not there.
func schedHist(families map[string]*dto.MetricFamily) *serverHist {
	return histOf(families, schedlat.Name, func(*dto.Metric) bool { return true })
}

// histOf is the first histogram of family name that match accepts; nil
// when there is none.
func histOf(families map[string]*dto.MetricFamily, name string, match func(*dto.Metric) bool) *serverHist {
	mf, ok := families[name]
	if !ok {
		return nil
	}
	for _, m := range mf.GetMetric() {
		h := m.GetHistogram()
		if h == nil || !match(m) {
			continue
		}
		out := &serverHist{}
		for _, b := range h.GetBucket() {
			out.le = append(out.le, b.GetUpperBound())
			out.counts = append(out.counts, float64(b.GetCumulativeCount()))
		}
		if len(out.le) == 0 || !math.IsInf(out.le[len(out.le)-1], 1) {
			out.le = append(out.le, math.Inf(1))
			out.counts = append(out.counts, float64(h.GetSampleCount()))
		}
		return out
	}
	return nil
}

// since is the histogram of what was observed from b to h; nil when
// either is missing or their buckets differ (the API restarted with
// other buckets).
func (h *serverHist) since(b *serverHist) *serverHist {
	if h == nil || b == nil || !slices.Equal(h.le, b.le) {
		return nil
	}
	d := &serverHist{le: h.le, counts: make([]float64, len(h.counts))}
	for i := range h.counts {
		d.counts[i] = h.counts[i] - b.counts[i]
	}
	return d
}

// total is the number of observations.
func (h *serverHist) total() float64 { return h.counts[len(h.counts)-1] }

// quantile is the q-quantile in seconds, linear within its bucket (from
// the bucket below's bound, 0 for the first); in the +Inf bucket, the
// highest finite bound.
func (h *serverHist) quantile(q float64) float64 {
	rank := q * h.total()
	prevLe, prevCount := 0.0, 0.0
	for i, le := range h.le {
		c := h.counts[i]
		if c >= rank && c > prevCount {
			if math.IsInf(le, 1) {
				return prevLe
			}
			return prevLe + (le-prevLe)*(rank-prevCount)/(c-prevCount)
		}
		if !math.IsInf(le, 1) {
			prevLe = le
		}
		prevCount = c
	}
	return prevLe
}

// within is the share of observations at or under x seconds, linear
// within the bucket that holds x.
func (h *serverHist) within(x float64) float64 {
	n := h.total()
	if n == 0 {
		return 0
	}
	prevLe, prevCount := 0.0, 0.0
	for i, le := range h.le {
		c := h.counts[i]
		if x <= le {
			if math.IsInf(le, 1) {
				return prevCount / n
			}
			return (prevCount + (c-prevCount)*(x-prevLe)/(le-prevLe)) / n
		}
		prevLe, prevCount = le, c
	}
	return 1
}

// summary is h as ServerReads; nil without observations.
func (h *serverHist) summary() *ServerReads {
	if h == nil || h.total() <= 0 {
		return nil
	}
	return &ServerReads{
		Count:      int64(h.total()),
		P50Ms:      h.quantile(0.5) * 1000,
		P99Ms:      h.quantile(0.99) * 1000,
		Within10ms: h.within(0.010),
	}
}

// schedSummary is h as ServerSched; nil without observations.
func (h *serverHist) schedSummary() *ServerSched {
	if h == nil || h.total() <= 0 {
		return nil
	}
	return &ServerSched{
		Samples: int64(h.total()),
		P50Us:   h.quantile(0.5) * 1e6,
		P99Ms:   h.quantile(0.99) * 1000,
		P999Ms:  h.quantile(0.999) * 1000,
		Over1ms: 1 - h.within(0.001),
	}
}
