package schedlat

import (
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestRebucket(t *testing.T) {
	inf := math.Inf(1)
	edges := []float64{math.Inf(-1), 0, 8e-6, 12e-6, 900e-6, 1.1e-3, 30e-3, inf}
	counts := []uint64{0, 5, 2, 0, 3, 1, 4}
	bounds := []float64{10e-6, 1e-3, 50e-3}
	count, sum, cum := Rebucket(counts, edges, bounds)
	if count != 15 {
		t.Fatalf("count %d, want 15", count)
	}
	// [0,8µs) and [8,12µs): the second's upper edge is past 10 µs, so it
	// counts under 1 ms, never below its true value.
	want := map[float64]uint64{10e-6: 5, 1e-3: 7, 50e-3: 11}
	for b, n := range want {
		if cum[b] != n {
			t.Errorf("cumulative at %g: %d, want %d (all: %v)", b, cum[b], n, cum)
		}
	}
	// [900µs,1.1ms) lands under 50 ms; [30ms,+Inf) only in +Inf (count).
	wantSum := 5*4e-6 + 2*10e-6 + 0 + 3*1e-3 + 1*15.55e-3 + 4*30e-3
	if math.Abs(sum-wantSum) > 1e-12 {
		t.Errorf("sum %g, want %g", sum, wantSum)
	}
}

// TestCollectorSeesWaits makes goroutines wait for the one P while another
// spins, and expects waits of a millisecond or more in the exported
// histogram, cumulative and consistent.
func TestCollectorSeesWaits(t *testing.T) {
	c := New()
	if c == nil {
		t.Skip("the runtime has no /sched/latencies:seconds")
	}
	before := read(t, c)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // holds the only P until preempted (about every 10 ms)
		for {
			select {
			case <-stop:
				return
			default:
			}
		}
	})
	var sleepers sync.WaitGroup
	for range 64 { // their wake-ups wait behind the spinner
		sleepers.Go(func() {
			for range 5 {
				time.Sleep(100 * time.Microsecond) // the scenario: sleepers whose wake-ups wait for a P
			}
		})
	}
	sleepers.Wait()
	close(stop)
	wg.Wait()
	after := read(t, c)
	if after.GetSampleCount() <= before.GetSampleCount() {
		t.Fatalf("no scheduling observed: count %d then %d", before.GetSampleCount(), after.GetSampleCount())
	}
	var prev uint64
	var within, total uint64
	for i, b := range after.GetBucket() {
		if b.GetUpperBound() != Buckets[i] {
			t.Fatalf("bucket %d bound %g, want %g", i, b.GetUpperBound(), Buckets[i])
		}
		if b.GetCumulativeCount() < prev {
			t.Fatalf("bucket %g: cumulative %d below the previous %d", b.GetUpperBound(), b.GetCumulativeCount(), prev)
		}
		prev = b.GetCumulativeCount()
		if b.GetUpperBound() == 500e-6 {
			within = b.GetCumulativeCount() - bucketAt(before, 500e-6)
		}
	}
	if prev > after.GetSampleCount() {
		t.Fatalf("last bucket %d above the count %d", prev, after.GetSampleCount())
	}
	total = after.GetSampleCount() - before.GetSampleCount()
	if over := total - within; over == 0 {
		t.Fatalf("no wait over 500 µs among %d sampled while a goroutine held the only P", total)
	}
}

// TestCollectorRegisters gathers the histogram through a pedantic
// registry (which checks the metric against its description).
func TestCollectorRegisters(t *testing.T) {
	c := New()
	if c == nil {
		t.Skip("the runtime has no /sched/latencies:seconds")
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) != 1 || fams[0].GetName() != Name || fams[0].GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("gathered %v, want one histogram %s", fams, Name)
	}
	if !strings.HasPrefix(Name, "feed_") {
		t.Fatalf("%s: every metric of feed is under feed_", Name)
	}
}

func read(t *testing.T, c *Collector) *dto.Histogram {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram()
}

func bucketAt(h *dto.Histogram, bound float64) uint64 {
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == bound {
			return b.GetCumulativeCount()
		}
	}
	return 0
}
