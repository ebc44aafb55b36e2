package procio

import (
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// counts scrapes c through a registry and returns the read and write
// counters.
func counts(t *testing.T, reg *prometheus.Registry) (read, write float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, mf := range mfs {
		if mf.GetName() != Name {
			continue
		}
		if mf.GetType() != dto.MetricType_COUNTER {
			t.Fatalf("%s is %v, want a counter", Name, mf.GetType())
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				switch {
				case l.GetName() == "op" && l.GetValue() == "read":
					read, found = m.GetCounter().GetValue(), found+1
				case l.GetName() == "op" && l.GetValue() == "write":
					write, found = m.GetCounter().GetValue(), found+1
				}
			}
		}
	}
	if found != 2 {
		t.Fatalf("%s: %d series of op read and write, want 2", Name, found)
	}
	return read, write
}

// TestCollectorCountsCalls makes a known number of reads and writes on a
// pipe and checks that the counters grow by at least that many (the Go
// runtime and the scrape itself make calls of their own).
func TestCollectorCountsCalls(t *testing.T) {
	c := New()
	if c == nil {
		t.Skip("/proc/self/io is not readable here")
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	r0, w0 := counts(t, reg)
	const calls = 500
	buf := []byte{1}
	for range calls {
		if _, err := w.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	r1, w1 := counts(t, reg)
	if r1-r0 < calls || w1-w0 < calls {
		t.Fatalf("after %d reads and %d writes: read +%v, write +%v", calls, calls, r1-r0, w1-w0)
	}
	// Bounded above too: a collector that counted something else (bytes,
	// another process) would be far off.
	if r1-r0 > 3*calls || w1-w0 > 3*calls {
		t.Fatalf("after %d reads and %d writes: read +%v, write +%v, too many", calls, calls, r1-r0, w1-w0)
	}
}
