package main

import (
	"bytes"
	"runtime/trace"
	"strings"
	"sync"
	"testing"
)

// testWorker is woken n times by a channel send; each wake-up is one wait
// for a P that Waits must attribute to this function.
func testWorker(ch <-chan int, wg *sync.WaitGroup) {
	defer wg.Done()
	for range ch {
	}
}

func TestWaitsByStartFunction(t *testing.T) {
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	const n = 200
	ch := make(chan int)
	var wg sync.WaitGroup
	wg.Add(1)
	go testWorker(ch, &wg)
	for i := range n {
		ch <- i // unbuffered: the worker blocks between sends
	}
	close(ch)
	wg.Wait()
	trace.Stop()

	kinds, err := Waits(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var worker *Kind
	for i, k := range kinds {
		if strings.HasSuffix(k.Name, ".testWorker") {
			worker = &kinds[i]
		}
		for j := 1; j < len(k.Waits); j++ {
			if k.Waits[j] < k.Waits[j-1] {
				t.Fatalf("%s: waits not ascending", k.Name)
			}
		}
	}
	if worker == nil {
		t.Fatalf("no kind for testWorker among %d kinds", len(kinds))
	}
	// Created runnable once, then made runnable by most sends (a send may
	// find it still running and leave the value to its next receive).
	if len(worker.Waits) < 2 || len(worker.Waits) > n+1 {
		t.Fatalf("testWorker waited %d times, want between 2 and %d", len(worker.Waits), n+1)
	}
	if worker.Quantile(0) > worker.Quantile(0.5) || worker.Quantile(0.5) > worker.Quantile(1) {
		t.Fatal("quantiles not ordered")
	}
	for i := 1; i < len(kinds); i++ {
		if kinds[i].Total > kinds[i-1].Total {
			t.Fatal("kinds not sorted by total wait")
		}
	}
	var out bytes.Buffer
	Print(&out, kinds, 3)
	if lines := strings.Count(out.String(), "\n"); lines != min(3, len(kinds))+1 {
		t.Fatalf("Print wrote %d lines, want header + %d:\n%s", lines, min(3, len(kinds)), out.String())
	}
}
