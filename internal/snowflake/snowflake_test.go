package snowflake

import (
	"sync"
	"testing"
	"time"
)

func TestUniqueAndIncreasing(t *testing.T) {
	g, err := New(3)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := int64(0)
			for i := 0; i < 20000; i++ {
				id, at := g.Next()
				if id <= last {
					t.Errorf("id %d not above %d", id, last)
					return
				}
				if !Time(id).Equal(at) {
					t.Errorf("Time(id)=%v, Next said %v", Time(id), at)
					return
				}
				last = id
				mu.Lock()
				if seen[id] {
					t.Errorf("duplicate id %d", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func TestClockBackwards(t *testing.T) {
	g, _ := New(1)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g.now = func() time.Time { return now }
	a, _ := g.Next()
	now = now.Add(-time.Second)
	b, _ := g.Next()
	if b <= a {
		t.Fatalf("clock went back: %d then %d", a, b)
	}
}

func TestNodeRange(t *testing.T) {
	if _, err := New(1024); err == nil {
		t.Fatal("node 1024 accepted")
	}
	if _, err := New(-1); err == nil {
		t.Fatal("node -1 accepted")
	}
}
