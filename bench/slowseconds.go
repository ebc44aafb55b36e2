package bench

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// slowReadMs is the read p99 target: a second of the mixed phase whose
// reads' p99 is over it is a slow second.
const slowReadMs = 10

// SlowSeconds is how many seconds of the mixed phase had a read p99 over
// slowReadMs, beside what the inbox projector wrote in them and in the
// others: a tail that comes in bursts of fan-out (retried or redelivered
// messages, a burst of posts) shows here as slow seconds with more
// entries than the rest.
type SlowSeconds struct {
	Count   int `json:"count"`
	Seconds int `json:"seconds"`
	// FanoutSlow and FanoutOther are the median inbox entries/s of the
	// slow seconds and of the others (0: no such second, or no samples).
	FanoutSlow  float64 `json:"fanoutEntriesPerSecondSlow"`
	FanoutOther float64 `json:"fanoutEntriesPerSecondOther"`
}

// slowSeconds pairs each second's reads with the sampler's point taken at
// its end: a point at t covers the seconds from the previous point's
// (both rounded to whole seconds: the sampler ticks on the phase's clock).
func slowSeconds(secs []SecondPoint, timeline []TimePoint) *SlowSeconds {
	fanout := map[int]float64{}
	prev := 0
	for _, p := range timeline {
		end := int(math.Round(p.T))
		for s := prev; s < end && p.FanoutPerSec > 0; s++ {
			fanout[s] = p.FanoutPerSec
		}
		prev = max(prev, end)
	}
	out := &SlowSeconds{}
	var slow, other []float64
	for _, s := range secs {
		if s.Reads == 0 {
			continue
		}
		out.Seconds++
		f, ok := fanout[s.Second]
		if s.ReadP99 > slowReadMs {
			out.Count++
			if ok {
				slow = append(slow, f)
			}
		} else if ok {
			other = append(other, f)
		}
	}
	out.FanoutSlow, out.FanoutOther = median(slow), median(other)
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func writeSlowSeconds(w io.Writer, s *SlowSeconds) {
	if s == nil || s.Seconds == 0 {
		return
	}
	fmt.Fprintf(w, "seconds with a read p99 over %d ms: %d of %d", slowReadMs, s.Count, s.Seconds)
	if s.Count > 0 && s.FanoutSlow > 0 && s.FanoutOther > 0 {
		fmt.Fprintf(w, "; inbox entries/s in them (median) %.0f, in the others %.0f", s.FanoutSlow, s.FanoutOther)
	}
	fmt.Fprintln(w)
}

// retriesName counts the projectors' handler retries: each applies a
// whole message again.
const retriesName = "feed_projection_retries_total"

// retryCount is that counter by projector so far; nil when the API's
// /metrics has none.
type retryCount map[string]float64

func retryCountOf(families map[string]*dto.MetricFamily) retryCount {
	return byLabel(families, retriesName, "projector")
}

// since is the retries from b to c by projector; nil when either end is
// unknown.
func (c retryCount) since(b retryCount) map[string]float64 {
	if c == nil || b == nil {
		return nil
	}
	out := map[string]float64{}
	for k, v := range c {
		out[k] = v - b[k]
	}
	return out
}

func writeRetries(w io.Writer, r map[string]float64) {
	if r == nil {
		return
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r)) {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, r[k]))
	}
	fmt.Fprintf(w, "projector retries (each applies a message again): %s\n", strings.Join(parts, ", "))
}
