package bench

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the q-quantile (0 < q <= 1) of sorted by the
// nearest-rank method: the smallest value with at least q of the samples at
// or below it. It returns 0 for no samples. sorted must be ascending.
func Percentile(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(n))) - 1
	return sorted[max(0, min(n-1, i))]
}

// Summary describes one latency distribution, in milliseconds.
type Summary struct {
	Count int64   `json:"count"`
	Rate  float64 `json:"perSecond"`
	Mean  float64 `json:"meanMs"`
	P50   float64 `json:"p50Ms"`
	P90   float64 `json:"p90Ms"`
	P99   float64 `json:"p99Ms"`
	P999  float64 `json:"p999Ms"`
	Max   float64 `json:"maxMs"`
}

// Summarize sorts ms in place and summarises it; elapsed gives the rate.
func Summarize(ms []float64, elapsed time.Duration) Summary {
	slices.Sort(ms)
	s := Summary{Count: int64(len(ms))}
	if elapsed > 0 {
		s.Rate = float64(len(ms)) / elapsed.Seconds()
	}
	if len(ms) == 0 {
		return s
	}
	var sum float64
	for _, v := range ms {
		sum += v
	}
	s.Mean = sum / float64(len(ms))
	s.P50, s.P90, s.P99, s.P999 = Percentile(ms, 0.5), Percentile(ms, 0.9), Percentile(ms, 0.99), Percentile(ms, 0.999)
	s.Max = ms[len(ms)-1]
	return s
}

// sample is one timed operation: when it started (since the phase began)
// and how long it took.
type sample struct {
	at time.Duration
	ms float64
}

// msOf converts a duration to float milliseconds.
func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// latencies extracts the durations of samples.
func latencies(ss []sample) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = s.ms
	}
	return out
}

// perSecond groups samples by whole second of at and returns, per second,
// the count, p50 and p99 (seconds with no samples have zeros).
func perSecond(ss []sample, seconds int) (count []int, p50, p99 []float64) {
	buckets := make([][]float64, seconds)
	for _, s := range ss {
		i := int(s.at / time.Second)
		if i >= 0 && i < seconds {
			buckets[i] = append(buckets[i], s.ms)
		}
	}
	count, p50, p99 = make([]int, seconds), make([]float64, seconds), make([]float64, seconds)
	for i, b := range buckets {
		slices.Sort(b)
		count[i], p50[i], p99[i] = len(b), Percentile(b, 0.5), Percentile(b, 0.99)
	}
	return count, p50, p99
}
