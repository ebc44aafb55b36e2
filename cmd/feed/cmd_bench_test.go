package main

import (
	"errors"
	"testing"

	"github.com/feedco/feed/bench"
)

// --read-ratio 0 and --post-share 0 mean none (the library's "negative"),
// not the library's default for a zero value; negative flags are refused.
func TestBenchNoneFlags(t *testing.T) {
	for _, tc := range []struct {
		read, post         float64
		wantRead, wantPost float64
		bad                bool
	}{
		{20, 0.8, 20, 0.8, false},
		{0, 0.8, -1, 0.8, false},
		{5, 0, 5, -1, false},
		{-1, 0.8, 0, 0, true},
		{20, -0.5, 0, 0, true},
	} {
		c := bench.Config{ReadRatio: tc.read, PostShare: tc.post}
		err := noneFlags(&c)
		var ue usageError
		if tc.bad {
			if !errors.As(err, &ue) {
				t.Errorf("read %g post %g: %v, want a usage error", tc.read, tc.post, err)
			}
			continue
		}
		if err != nil || c.ReadRatio != tc.wantRead || c.PostShare != tc.wantPost {
			t.Errorf("read %g post %g: %g %g %v, want %g %g", tc.read, tc.post, c.ReadRatio, c.PostShare, err, tc.wantRead, tc.wantPost)
		}
	}
}
