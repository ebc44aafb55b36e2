// Package progress is the one progress renderer of the command line
// (`feed seed`, `feed events`, `feed rebuild`, `feed cdc reseed`): a phase of units counted
// as they are done, shown with its count, percentage of a known total,
// rate and ETA. On a terminal it is one bar redrawn in place every
// Options.Interval (100 ms); otherwise a plain line every interval (5 s)
// and at the end of each phase, fit for logs. A nil *Progress shows
// nothing. Safe for concurrent use.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// Progress renders one phase at a time.
type Progress struct {
	w        io.Writer
	tty      bool
	interval time.Duration
	now      func() time.Time

	// record, if set, receives each phase's counts (Recording).
	record func(phase, unit string, done, total int64)

	mu                     sync.Mutex
	phase, unit            string
	total, done            int64
	start, drawn, recorded time.Time
	barShown               bool // a bar is on the terminal's line
}

// Options are the renderer's settings.
type Options struct {
	// TTY draws a bar redrawn in place; without it, lines.
	TTY bool
	// Interval is the least time between two draws while a phase runs.
	// Default 100 ms on a terminal, 5 s otherwise.
	Interval time.Duration
	// Now is the clock (default time.Now), for tests.
	Now func() time.Time
}

// New writes to w: a bar when tty, lines otherwise, at the default
// intervals.
func New(w io.Writer, tty bool) *Progress { return NewWith(w, Options{TTY: tty}) }

// NewWith writes to w with o.
func NewWith(w io.Writer, o Options) *Progress {
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
		if o.TTY {
			o.Interval = 100 * time.Millisecond
		}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Progress{w: w, tty: o.TTY, interval: o.Interval, now: o.Now}
}

// recordEvery is how often a running phase's counts go to record.
const recordEvery = time.Second

// Recording returns a Progress that shows what p shows (nothing when p is
// nil) and hands each phase's counts to record: at its start, at most once
// a second while it runs, and at its end. record is called with the
// Progress locked, so its calls arrive in order.
func (p *Progress) Recording(record func(phase, unit string, done, total int64)) *Progress {
	q := &Progress{w: io.Discard, interval: time.Hour, now: time.Now, record: record}
	if p != nil {
		q.w, q.tty, q.interval, q.now = p.w, p.tty, p.interval, p.now
	}
	return q
}

func (p *Progress) recordNow() {
	if p.record != nil {
		p.recorded = p.now()
		p.record(p.phase, p.unit, p.done, p.total)
	}
}

// Start begins a phase of total units (0: unknown) and draws it.
func (p *Progress) Start(phase, unit string, total int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phase, p.unit, p.total, p.done = phase, unit, total, 0
	p.start = p.now()
	p.draw(false)
	p.recordNow()
}

// Started reports whether a phase is running (started, not finished).
func (p *Progress) Started() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.phase != ""
}

// Add counts n more units done.
func (p *Progress) Add(n int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.update(p.done + int64(n))
}

// Set says that done units are done in all (for a count kept elsewhere).
func (p *Progress) Set(done int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.update(done)
}

func (p *Progress) update(done int64) {
	p.done = done
	now := p.now()
	if now.Sub(p.drawn) >= p.interval {
		p.draw(false)
	}
	if p.record != nil && now.Sub(p.recorded) >= recordEvery {
		p.recordNow()
	}
}

// Finish ends the phase with a final line: its count, rate and time.
func (p *Progress) Finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw(true)
	p.recordNow()
	p.phase = ""
}

// Clear ends the phase without a final line, erasing the bar on a
// terminal: for a command that prints its own summary.
func (p *Progress) Clear() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearBar()
	p.recordNow()
	p.phase = ""
}

// Printf writes a message line, the bar erased first on a terminal (the
// next draw brings it back).
func (p *Progress) Printf(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearBar()
	fmt.Fprintf(p.w, format+"\n", args...)
}

func (p *Progress) clearBar() {
	if p.tty && p.barShown {
		fmt.Fprint(p.w, "\r\033[K")
		p.barShown = false
	}
}

// Line is what a draw shows of a phase, without the terminal's controls:
// phase, [bar,] percentage and count of a known total (else the count),
// rate, and the ETA while running or the time taken at the end.
func Line(phase, unit string, done, total int64, elapsed time.Duration, final, bar bool) string {
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(done) / s
	}
	var b strings.Builder
	b.WriteString(phase)
	if total > 0 {
		frac := min(float64(done)/float64(total), 1)
		if bar {
			const width = 24
			fill := int(frac * width)
			b.WriteString(" [" + strings.Repeat("=", fill) + strings.Repeat(" ", width-fill) + "]")
		}
		fmt.Fprintf(&b, " %3.0f%% %d/%d %s", frac*100, done, total, unit)
	} else {
		fmt.Fprintf(&b, " %d %s", done, unit)
	}
	fmt.Fprintf(&b, " %s/s", Rate(rate))
	switch {
	case final:
		fmt.Fprintf(&b, " in %v", elapsed.Round(10*time.Millisecond))
	case total > 0 && rate > 0 && done < total:
		eta := time.Duration(float64(total-done) / rate * float64(time.Second))
		fmt.Fprintf(&b, " ETA %v", eta.Round(time.Second))
	}
	return b.String()
}

func (p *Progress) draw(final bool) {
	now := p.now()
	p.drawn = now
	line := Line(p.phase, p.unit, p.done, p.total, now.Sub(p.start), final, p.tty)
	switch {
	case p.tty && !final:
		fmt.Fprint(p.w, "\r\033[K"+line)
		p.barShown = true
	case p.tty:
		fmt.Fprint(p.w, "\r\033[K"+line+"\n")
		p.barShown = false
	default:
		fmt.Fprint(p.w, line+"\n")
	}
}

// Rate formats a rate compactly: 950, 12.3k, 1.20M.
func Rate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// IsTerminal says whether w is a terminal (golang.org/x/term): where a
// bar is drawn rather than lines. /dev/null and pipes are not.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
