package rebuild

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Progress shows how a rebuild advances: on a terminal one bar redrawn in
// place (phase, percentage, count, rate, ETA), otherwise a plain line every
// Interval and at the end of each phase. A nil *Progress shows nothing. Safe
// for concurrent use (builds report from several workers).
type Progress struct {
	w        io.Writer
	tty      bool
	interval time.Duration
	now      func() time.Time

	// record, if set, receives each phase's counts (recording).
	record func(stage, unit string, done, total int64)

	mu                     sync.Mutex
	phase, unit            string
	total, done            int64
	start, drawn, recorded time.Time
}

// recordEvery is how often a running phase's counts go to record.
const recordEvery = time.Second

// recording returns a Progress that shows what p shows (nothing when p is
// nil) and hands each phase's counts to record: at its start, at most once
// every recordEvery while it runs, and at its end. record is called with
// the Progress locked, so its calls arrive in order.
func (p *Progress) recording(record func(stage, unit string, done, total int64)) *Progress {
	q := &Progress{w: io.Discard, interval: time.Hour, now: time.Now, record: record}
	if p != nil {
		q.w, q.tty, q.interval, q.now = p.w, p.tty, p.interval, p.now
	}
	return q
}

// recordNow hands the counts to record (p.mu held).
func (p *Progress) recordNow() {
	if p.record != nil {
		p.recorded = p.now()
		p.record(p.phase, p.unit, p.done, p.total)
	}
}

// NewProgress writes to w (stderr): a bar when tty, lines otherwise.
func NewProgress(w io.Writer, tty bool) *Progress {
	iv := 5 * time.Second
	if tty {
		iv = 100 * time.Millisecond
	}
	return &Progress{w: w, tty: tty, interval: iv, now: time.Now}
}

// Start begins a phase of total units (0: unknown).
func (p *Progress) Start(phase, unit string, total int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phase, p.unit, p.total, p.done = phase, unit, total, 0
	p.start = p.now()
	p.drawn = p.start
	p.draw(false)
	p.recordNow()
}

// started reports whether a phase was started (and not yet finished).
func (p *Progress) started() bool {
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
	p.done += int64(n)
	now := p.now()
	if now.Sub(p.drawn) >= p.interval {
		p.draw(false)
	}
	if p.record != nil && now.Sub(p.recorded) >= recordEvery {
		p.recordNow()
	}
}

// Finish ends the phase with a final line.
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

// Printf writes a message line (clearing the bar first on a terminal).
func (p *Progress) Printf(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}

func (p *Progress) draw(final bool) {
	now := p.now()
	p.drawn = now
	el := now.Sub(p.start)
	rate := 0.0
	if s := el.Seconds(); s > 0 {
		rate = float64(p.done) / s
	}
	var b strings.Builder
	if p.tty {
		b.WriteString("\r\033[K")
	}
	b.WriteString(p.phase)
	if p.total > 0 {
		frac := min(float64(p.done)/float64(p.total), 1)
		if p.tty {
			const width = 24
			fill := int(frac * width)
			b.WriteString(" [" + strings.Repeat("=", fill) + strings.Repeat(" ", width-fill) + "]")
		}
		fmt.Fprintf(&b, " %3.0f%% %d/%d %s", frac*100, p.done, p.total, p.unit)
	} else {
		fmt.Fprintf(&b, " %d %s", p.done, p.unit)
	}
	fmt.Fprintf(&b, " %s/s", human(rate))
	switch {
	case final:
		fmt.Fprintf(&b, " in %v", el.Round(10*time.Millisecond))
	case p.total > 0 && rate > 0 && p.done < p.total:
		eta := time.Duration(float64(p.total-p.done) / rate * float64(time.Second))
		fmt.Fprintf(&b, " ETA %v", eta.Round(time.Second))
	}
	if !p.tty || final {
		b.WriteString("\n")
	}
	fmt.Fprint(p.w, b.String())
}

// human prints a rate with a k/M suffix.
func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
