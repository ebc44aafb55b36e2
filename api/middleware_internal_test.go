package api

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
)

type ctxKeyTest struct{}

// TestDeadlineCtx checks the lazy deadline context against what
// context.WithTimeout answers, whether or not Done was asked for first.
func TestDeadlineCtx(t *testing.T) {
	parent := context.WithValue(context.Background(), ctxKeyTest{}, "v")
	for _, early := range []bool{false, true} { // Done asked for before the end
		t.Run("expires", func(t *testing.T) {
			ctx, stop := withTimeout(parent, 20*time.Millisecond)
			defer stop()
			if d, ok := ctx.Deadline(); !ok || time.Until(d) > 20*time.Millisecond {
				t.Fatalf("deadline %v %v", d, ok)
			}
			if ctx.Value(ctxKeyTest{}) != "v" {
				t.Fatal("value of the parent lost")
			}
			endsWith(t, ctx, early, context.DeadlineExceeded, func() {
				if ctx.Err() != nil {
					t.Fatalf("err %v before the deadline", ctx.Err())
				}
				time.Sleep(30 * time.Millisecond) // the scenario: the 20 ms deadline passes
			}, "after the deadline")
			stop()
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatalf("err %v after stop past the deadline", ctx.Err())
			}
			if !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
				t.Fatalf("cause %v", context.Cause(ctx))
			}
		})
		t.Run("stopped", func(t *testing.T) {
			ctx, stop := withTimeout(parent, time.Hour)
			var child context.Context
			cancelChild := func() {}
			defer func() { cancelChild() }()
			endsWith(t, ctx, early, context.Canceled, func() {
				child, cancelChild = context.WithCancel(ctx)
				stop()
				stop()
			}, "after stop")
			waitDone(t, child.Done(), "of the child after stop")
			if !errors.Is(child.Err(), context.Canceled) || !errors.Is(context.Cause(ctx), context.Canceled) {
				t.Fatalf("child err %v, cause %v", child.Err(), context.Cause(ctx))
			}
		})
		t.Run("parent cancelled", func(t *testing.T) {
			p, cancel := context.WithCancel(parent)
			ctx, stop := withTimeout(p, time.Hour)
			defer stop()
			endsWith(t, ctx, early, context.Canceled, cancel, "after the parent's cancel")
		})
	}
	// A parent with a sooner deadline bounds it.
	p, cancel := context.WithTimeout(parent, time.Millisecond)
	defer cancel()
	ctx, stop := withTimeout(p, time.Hour)
	defer stop()
	if d, _ := ctx.Deadline(); time.Until(d) > time.Millisecond {
		t.Fatalf("deadline %v beyond the parent's", d)
	}
}

// waitDone fails t unless done is closed within a second.
// endsWith calls end, then checks that ctx reports want and that its Done
// channel closes: Done asked for before end when early, else after it.
func endsWith(t *testing.T, ctx context.Context, early bool, want error, end func(), when string) {
	t.Helper()
	var done <-chan struct{}
	if early {
		done = ctx.Done()
	}
	end()
	if !errors.Is(ctx.Err(), want) {
		t.Fatalf("err %v %s", ctx.Err(), when)
	}
	if done == nil {
		done = ctx.Done()
	}
	waitDone(t, done, when)
}

func waitDone(t *testing.T, done <-chan struct{}, when string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Done not closed " + when)
	}
}

func BenchmarkWithTimeout(b *testing.B) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.Run("context", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, stop := context.WithTimeout(parent, 10*time.Second)
			stop()
		}
	})
	b.Run("lazy", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, stop := withTimeout(parent, 10*time.Second)
			stop()
		}
	})
}

func TestNewRequestID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := newRequestID()
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 4 || u.Variant() != uuid.RFC4122 || u.String() != id || seen[id] {
			t.Fatalf("request id %q: %v, version %v, variant %v", id, err, u.Version(), u.Variant())
		}
		seen[id] = true
	}
}
