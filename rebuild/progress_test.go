package rebuild

import (
	"fmt"
	"io"
	"testing"
	"time"
)

// A recording Progress hands each phase's counts on at its start, at most
// once a second while it runs (by its clock), and at its end, in order; a
// nil Progress records too.
func TestProgressRecording(t *testing.T) {
	for _, base := range []*Progress{nil, NewProgress(io.Discard, false)} {
		var got []string
		p := base.recording(func(stage, unit string, done, total int64) {
			got = append(got, fmt.Sprintf("%s %d/%d %s", stage, done, total, unit))
		})
		now := time.Unix(0, 0)
		p.now = func() time.Time { return now }
		p.Start("build", "posts", 10)
		p.Add(3) // within the second: not recorded
		now = now.Add(1500 * time.Millisecond)
		p.Add(4)
		p.Add(1)
		p.Finish()
		want := []string{"build 0/10 posts", "build 7/10 posts", "build 8/10 posts"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("base %v: recorded %q, want %q", base != nil, got, want)
		}
	}
}
