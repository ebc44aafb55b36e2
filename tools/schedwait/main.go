// Command schedwait reads a Go execution trace (runtime/trace, or
// /debug/pprof/trace of a process run with FEED_PPROF_ADDR) and prints,
// per kind of goroutine, how long its goroutines waited for a P: from
// each time one became runnable to when it ran. A goroutine's kind is its
// start function when the trace saw it created, else the outermost frame
// of its stack the first time it stopped running. `go tool trace
// -pprof=sched` sums the same waits by stack; this gives their
// distribution, which is what tells a goroutine that waits often but
// briefly from one that waits seldom but long.
//
//	curl -so t.out 'http://127.0.0.1:6060/debug/pprof/trace?seconds=5'
//	go run . [-top 25] t.out
//
// It is a module of its own (tools/schedwait/go.mod), so that its parser,
// golang.org/x/exp/trace, is not a dependency of feed.
package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

func main() {
	top := flag.Int("top", 25, "kinds to print, most total wait first")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: schedwait [-top N] TRACE")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "schedwait:", err)
		os.Exit(1)
	}
	defer f.Close()
	kinds, err := Waits(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "schedwait:", err)
		os.Exit(1)
	}
	Print(os.Stdout, kinds, *top)
}

// Kind is the waits for a P of one kind of goroutine, ascending.
type Kind struct {
	Name  string
	Waits []time.Duration
	Total time.Duration
}

// Quantile returns the q-quantile of k's waits (q in [0, 1]).
func (k Kind) Quantile(q float64) time.Duration {
	if len(k.Waits) == 0 {
		return 0
	}
	return k.Waits[min(len(k.Waits)-1, int(q*float64(len(k.Waits))))]
}

// Waits reads a trace and returns every kind's waits, most total wait
// first.
func Waits(r io.Reader) ([]Kind, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, err
	}
	runnable := map[trace.GoID]trace.Time{}
	kind := map[trace.GoID]string{}
	waits := map[string][]time.Duration{}
	for {
		ev, err := tr.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		id := st.Resource.Goroutine()
		from, to := st.Goroutine()
		switch {
		case from == trace.GoNotExist && to == trace.GoRunnable:
			// Created: the stack is the new goroutine's start.
			for fr := range st.Stack.Frames() {
				kind[id] = fr.Func
				break
			}
		case from == trace.GoRunning && kind[id] == "":
			// Created before the trace: its outermost frame.
			for fr := range st.Stack.Frames() {
				kind[id] = fr.Func
			}
		}
		if to == trace.GoRunnable {
			runnable[id] = ev.Time()
		}
		if from == trace.GoRunnable && to == trace.GoRunning {
			if t, ok := runnable[id]; ok {
				k := kind[id]
				if k == "" {
					k = "(unknown)"
				}
				waits[k] = append(waits[k], time.Duration(ev.Time()-t))
				delete(runnable, id)
			}
		}
	}
	kinds := make([]Kind, 0, len(waits))
	for name, w := range waits {
		slices.Sort(w)
		var total time.Duration
		for _, d := range w {
			total += d
		}
		kinds = append(kinds, Kind{Name: name, Waits: w, Total: total})
	}
	slices.SortFunc(kinds, func(a, b Kind) int {
		return cmp.Or(cmp.Compare(b.Total, a.Total), strings.Compare(a.Name, b.Name))
	})
	return kinds, nil
}

// Print writes the first top kinds as a table, waits in µs.
func Print(w io.Writer, kinds []Kind, top int) {
	fmt.Fprintf(w, "%-64s %8s %10s %9s %9s %9s %9s %9s\n", "goroutine kind", "waits", "total ms", "mean µs", "p50 µs", "p90 µs", "p99 µs", "max µs")
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	for _, k := range kinds[:min(top, len(kinds))] {
		n := len(k.Waits)
		fmt.Fprintf(w, "%-64s %8d %10.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n", strings.TrimPrefix(k.Name, "github.com/"), n,
			float64(k.Total)/1e6, us(k.Total)/float64(n), us(k.Quantile(.5)), us(k.Quantile(.9)), us(k.Quantile(.99)), us(k.Waits[n-1]))
	}
}
