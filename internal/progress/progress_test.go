package progress

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// clock is a test's time, moved by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time             { return c.t }
func (c *clock) add(d time.Duration)        { c.t = c.t.Add(d) }
func newClock() *clock                      { return &clock{t: time.Unix(1_000_000, 0)} }
func lines(s string) []string               { return strings.Split(strings.TrimSuffix(s, "\n"), "\n") }
func withClock(o Options, c *clock) Options { o.Now = c.now; return o }

// Off a terminal: a line at the start, one per interval at most while the
// phase runs (none between), and a final one with the time taken; rate and
// ETA from the clock.
func TestLinesOffTerminal(t *testing.T) {
	var out bytes.Buffer
	c := newClock()
	p := NewWith(&out, withClock(Options{Interval: 5 * time.Second}, c))
	p.Start("seed users", "events", 1000)
	c.add(2 * time.Second)
	p.Add(100) // within the interval: not drawn
	c.add(3 * time.Second)
	p.Add(150) // 250 in 5 s: 50/s, 750 left: 15 s
	c.add(time.Second)
	p.Add(10)
	c.add(4 * time.Second)
	p.Set(1000)
	p.Finish()
	want := []string{
		"seed users   0% 0/1000 events 0/s",
		"seed users  25% 250/1000 events 50/s ETA 15s",
		"seed users 100% 1000/1000 events 100/s",
		"seed users 100% 1000/1000 events 100/s in 10s",
	}
	if got := lines(out.String()); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if strings.Contains(out.String(), "\r") || strings.Contains(out.String(), "\033") {
		t.Errorf("terminal controls off a terminal: %q", out.String())
	}
}

// On a terminal: the bar is redrawn in place (\r, erase line) with no
// newline until the phase ends; Printf erases it before its line; Clear
// erases it and prints nothing more; an unknown total shows the count.
func TestBarOnTerminal(t *testing.T) {
	var out bytes.Buffer
	c := newClock()
	p := NewWith(&out, withClock(Options{TTY: true}, c))
	p.Start("build inbox", "users", 48)
	c.add(200 * time.Millisecond)
	p.Add(12)
	p.Printf("note %d", 1)
	c.add(200 * time.Millisecond)
	p.Add(36)
	p.Finish()
	want := "\r\033[Kbuild inbox [                        ]   0% 0/48 users 0/s" +
		"\r\033[Kbuild inbox [======                  ]  25% 12/48 users 60/s ETA 1s" +
		"\r\033[Knote 1\n" +
		"\r\033[Kbuild inbox [========================] 100% 48/48 users 120/s" +
		"\r\033[Kbuild inbox [========================] 100% 48/48 users 120/s in 400ms\n"
	if out.String() != want {
		t.Errorf("terminal output\n%q\nwant\n%q", out.String(), want)
	}

	out.Reset()
	p.Start("events", "events", 0)
	c.add(time.Second)
	p.Set(12_345)
	p.Clear()
	p.Printf("events: done")
	want = "\r\033[Kevents 0 events 0/s\r\033[Kevents 12345 events 12.3k/s\r\033[Kevents: done\n"
	if out.String() != want {
		t.Errorf("unknown total, cleared:\n%q\nwant\n%q", out.String(), want)
	}
	if p.Started() {
		t.Error("Started after Clear")
	}
}

// A Recording Progress hands each phase's counts on at its start, at most
// once a second while it runs (by its clock), and at its end, in order; a
// nil Progress records too, and shows nothing.
func TestRecording(t *testing.T) {
	for _, base := range []*Progress{nil, NewWith(io.Discard, Options{})} {
		var got []string
		p := base.Recording(func(stage, unit string, done, total int64) {
			got = append(got, fmt.Sprintf("%s %d/%d %s", stage, done, total, unit))
		})
		c := newClock()
		p.now = c.now
		p.Start("build", "posts", 10)
		p.Add(3) // within the second: not recorded
		c.add(1500 * time.Millisecond)
		p.Add(4)
		p.Add(1)
		p.Finish()
		want := []string{"build 0/10 posts", "build 7/10 posts", "build 8/10 posts"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("base %v: recorded %q, want %q", base != nil, got, want)
		}
	}
	var nilP *Progress
	nilP.Start("x", "y", 1)
	nilP.Add(1)
	nilP.Set(2)
	nilP.Printf("z")
	nilP.Clear()
	nilP.Finish()
	if nilP.Started() {
		t.Error("a nil Progress is started")
	}
}

func TestRate(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 950: "950", 12_345: "12.3k", 1_234_567: "1.23M"} {
		if got := Rate(v); got != want {
			t.Errorf("Rate(%v) = %q, want %q", v, got, want)
		}
	}
}

// Neither a buffer, a pipe nor /dev/null is a terminal.
func TestIsTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	for name, wr := range map[string]io.Writer{"buffer": &bytes.Buffer{}, "pipe": w, "/dev/null": null} {
		if IsTerminal(wr) {
			t.Errorf("%s is a terminal", name)
		}
	}
}
