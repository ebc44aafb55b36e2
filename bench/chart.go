package bench

import (
	"cmp"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"slices"
	"strings"
)

// The chart is drawn with the standard library only: lines, points, axes,
// and a 3x5 bitmap font for the labels (no font module is needed).

var (
	colWhite  = color.RGBA{255, 255, 255, 255}
	colBlack  = color.RGBA{0, 0, 0, 255}
	colGrid   = color.RGBA{225, 225, 225, 255}
	colBlue   = color.RGBA{31, 119, 180, 255}
	colRed    = color.RGBA{214, 39, 40, 255}
	colGreen  = color.RGBA{44, 160, 44, 255}
	colOrange = color.RGBA{255, 127, 14, 255}
	colPurple = color.RGBA{148, 103, 189, 255}
	colGray   = color.RGBA{127, 127, 127, 255}
)

// glyphs is a 3x5 font: 15 cells per character, row by row.
var glyphs = map[rune]string{
	'0': "####.##.##.####", '1': ".#.##..#..#.###", '2': "###..#####..###", '3': "###..####..####",
	'4': "#.##.####..#..#", '5': "####..###..####", '6': "####..####.####", '7': "###..#..#..#..#",
	'8': "####.#####.####", '9': "####.####..####", 'A': ".#.#.#####.##.#", 'B': "##.#.###.#.###.",
	'C': ".###..#..#...##", 'D': "##.#.##.##.###.", 'E': "####..##.#..###", 'F': "####..##.#..#..",
	'G': ".###..#.##.#.##", 'H': "#.##.#####.##.#", 'I': "###.#..#..#.###", 'J': "..#..#..##.#.#.",
	'K': "#.##.###.#.##.#", 'L': "#..#..#..#..###", 'M': "#.########.##.#", 'N': "##.#.##.##.##.#",
	'O': ".#.#.##.##.#.#.", 'P': "##.#.###.#..#..", 'Q': ".#.#.##.###..##", 'R': "##.#.###.#.##.#",
	'S': ".###...#...###.", 'T': "###.#..#..#..#.", 'U': "#.##.##.##.####", 'V': "#.##.##.##.#.#.",
	'W': "#.##.########.#", 'X': "#.##.#.#.#.##.#", 'Y': "#.##.#.#..#..#.", 'Z': "###..#.#.#..###",
	'.': ".............#.", '-': "......###......", '/': "..#..#.#.#..#..", ':': "....#.....#....",
	'%': "#.#..#.#.#..#.#", '(': ".#.#..#..#...#.", ')': ".#...#..#..#.#.", '>': "#...#...#.#.#..",
	'=': "...###...###...", '+': "....#.###.#....", ' ': "...............",
}

type canvas struct{ img *image.RGBA }

func newCanvas(w, h int) *canvas {
	c := &canvas{img: image.NewRGBA(image.Rect(0, 0, w, h))}
	for y := range h {
		for x := range w {
			c.img.SetRGBA(x, y, colWhite)
		}
	}
	return c
}

func (c *canvas) dot(x, y, size int, col color.RGBA) {
	for dy := 0; dy < size; dy++ {
		for dx := 0; dx < size; dx++ {
			c.img.SetRGBA(x+dx-size/2, y+dy-size/2, col)
		}
	}
}

// line draws a Bresenham line of the given thickness.
func (c *canvas) line(x0, y0, x1, y1, thick int, col color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := cmp.Compare(x1, x0), cmp.Compare(y1, y0)
	e := dx + dy
	for {
		c.dot(x0, y0, thick, col)
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// text draws s (upper-cased) at (x, y) top-left, each font cell scale px.
func (c *canvas) text(x, y int, s string, scale int, col color.RGBA) {
	for _, r := range strings.ToUpper(s) {
		g, ok := glyphs[r]
		if !ok {
			g = glyphs[' ']
		}
		for i := 0; i < 15 && i < len(g); i++ {
			if g[i] == '#' {
				for dy := range scale {
					for dx := range scale {
						c.img.SetRGBA(x+(i%3)*scale+dx, y+(i/3)*scale+dy, col)
					}
				}
			}
		}
		x += 4 * scale
	}
}

// panel maps data to pixels inside a rectangle; y may be logarithmic.
type panel struct {
	x0, y0, x1, y1 int // pixel box (x0,y1 bottom-left)
	xmin, xmax     float64
	ymin, ymax     float64
	xlog, ylog     bool
}

func (p panel) px(x float64) int {
	if p.xlog {
		x, p.xmin, p.xmax = math.Log10(math.Max(x, p.xmin)), math.Log10(p.xmin), math.Log10(p.xmax)
	}
	f := (x - p.xmin) / (p.xmax - p.xmin)
	return p.x0 + int(math.Round(math.Max(0, math.Min(1, f))*float64(p.x1-p.x0)))
}

func (p panel) py(y float64) int {
	if p.ylog {
		y, p.ymin, p.ymax = math.Log10(math.Max(y, p.ymin)), math.Log10(p.ymin), math.Log10(p.ymax)
	}
	f := (y - p.ymin) / (p.ymax - p.ymin)
	return p.y1 - int(math.Round(math.Max(0, math.Min(1, f))*float64(p.y1-p.y0)))
}

func (c *canvas) frame(p panel) {
	c.line(p.x0, p.y1, p.x1, p.y1, 1, colBlack)
	c.line(p.x0, p.y0, p.x0, p.y1, 1, colBlack)
}

// logTicks labels decades between lo and hi on the y (vertical) or x axis.
func (c *canvas) logTicks(p panel, vertical bool) {
	for v := p.ymin; vertical && v <= p.ymax*1.0001; v *= 10 {
		y := p.py(v)
		c.line(p.x0+1, y, p.x1, y, 1, colGrid)
		c.text(p.x0-8-4*2*len(fmtTick(v)), y-5, fmtTick(v), 2, colBlack)
	}
	for v := p.xmin; !vertical && v <= p.xmax*1.0001; v *= 10 {
		x := p.px(v)
		c.line(x, p.y0, x, p.y1-1, 1, colGrid)
		c.text(x-4*len(fmtTick(v)), p.y1+8, fmtTick(v), 2, colBlack)
	}
}

func fmtTick(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%gS", v/1000)
	case v < 1:
		return fmt.Sprintf("%g", v)
	}
	return fmt.Sprintf("%g", v)
}

// legend draws colored boxes with names from (x, y) down.
func (c *canvas) legend(x, y int, items []legendItem) {
	width := 0
	for _, it := range items {
		width = max(width, 20+8*len(it.name))
	}
	for yy := y - 6; yy < y+18*len(items)+2; yy++ { // a white box, so curves do not cross the text
		for xx := x - 6; xx < x+width+6; xx++ {
			c.img.SetRGBA(xx, yy, colWhite)
		}
	}
	for i, it := range items {
		yy := y + i*18
		for dy := range 10 {
			for dx := range 14 {
				c.img.SetRGBA(x+dx, yy+dy, it.col)
			}
		}
		c.text(x+20, yy, it.name, 2, colBlack)
	}
}

type legendItem struct {
	name string
	col  color.RGBA
}

// WriteChart draws latency over time (top: reads p50/p99 per second,
// every post-to-visible probe, CDC lag) and the latency distributions
// (bottom: CDFs of HTTP reads, the two baselines, post-to-visible) to a PNG.
func (rep *Report) WriteChart(path string) error {
	const w, h = 1200, 940
	c := newCanvas(w, h)
	m := rep.Mixed
	// Top panel: latency over time, log ms.
	top := panel{x0: 110, y0: 50, x1: 1170, y1: 420, xmin: 0, xmax: math.Max(1, m.Seconds), ymin: 0.1, ymax: 100000, ylog: true}
	c.text(110, 14, "LATENCY OVER TIME (MS, LOG SCALE) - X: SECONDS OF THE MIXED PHASE", 2, colBlack)
	c.logTicks(top, true)
	for s := 0.0; s <= top.xmax; s += tickStep(top.xmax) {
		x := top.px(s)
		c.line(x, top.y0, x, top.y1-1, 1, colGrid)
		c.text(x-6, top.y1+8, fmt.Sprintf("%g", s), 2, colBlack)
	}
	c.frame(top)
	series := func(vals func(SecondPoint) float64, col color.RGBA) {
		px, py := -1, -1
		for _, s := range m.PerSecond {
			v := vals(s)
			if s.Reads == 0 || v <= 0 {
				px = -1
				continue
			}
			x, y := top.px(float64(s.Second)+0.5), top.py(v)
			if px >= 0 {
				c.line(px, py, x, y, 2, col)
			}
			c.dot(x, y, 4, col)
			px, py = x, y
		}
	}
	// CDC lag: the reader's own gauge when the run scraped it, else the
	// slot's (about a second coarse: near half a second under any steady
	// write rate).
	cdcLabel, readerLag := "CDC LAG (SLOT)", false
	for _, t := range m.Timeline {
		if t.CDCLagLive != nil {
			cdcLabel, readerLag = "CDC LAG (READER)", true
			break
		}
	}
	px, py := -1, -1
	for _, t := range m.Timeline {
		var sec float64
		switch {
		case readerLag && t.CDCLagLive != nil:
			sec = *t.CDCLagLive
		case !readerLag && t.Lag != nil:
			sec = t.Lag.CDCLagSeconds
		default:
			continue
		}
		x, y := top.px(t.T), top.py(math.Max(sec*1000, 0.1))
		if px >= 0 {
			c.line(px, py, x, y, 2, colGray)
		}
		px, py = x, y
	}
	series(func(s SecondPoint) float64 { return s.ReadP50 }, colBlue)
	series(func(s SecondPoint) float64 { return s.ReadP99 }, colRed)
	for _, v := range m.Visible {
		c.dot(top.px(v[0]), top.py(v[1]), 5, colGreen)
	}
	c.legend(top.x1-330, top.y0+8, []legendItem{{"FEED READ P50 / S", colBlue}, {"FEED READ P99 / S", colRed},
		{"POST TO VISIBLE (EACH)", colGreen}, {cdcLabel, colGray}})

	// Bottom panel: CDFs over log ms.
	bot := panel{x0: 110, y0: 520, x1: 1170, y1: 880, xmin: 0.1, xmax: 100000, ymin: 0, ymax: 100, xlog: true}
	c.text(110, 484, "LATENCY DISTRIBUTION (CDF, % AT OR BELOW) - X: MS, LOG SCALE", 2, colBlack)
	for v := 0.0; v <= 100; v += 25 {
		y := bot.py(v)
		c.line(bot.x0+1, y, bot.x1, y, 1, colGrid)
		c.text(bot.x0-8-8*len(fmt.Sprint(v)), y-5, fmt.Sprint(v), 2, colBlack)
	}
	c.logTicks(bot, false)
	c.frame(bot)
	cdf := func(ms []float64, col color.RGBA) {
		if len(ms) == 0 {
			return
		}
		s := slices.Clone(ms)
		slices.Sort(s)
		px, py := -1, -1
		step := max(1, len(s)/2000)
		for i := 0; i < len(s); i += step {
			x, y := bot.px(s[i]), bot.py(100*float64(i+1)/float64(len(s)))
			if px >= 0 {
				c.line(px, py, x, y, 2, col)
			}
			px, py = x, y
		}
		c.line(px, py, bot.px(s[len(s)-1]), bot.py(100), 2, col)
	}
	items := []legendItem{{"FEED READ (HTTP, MIXED)", colBlue}, {"POST TO VISIBLE", colGreen}}
	cdf(m.readMs, colBlue)
	cdf(m.visibleMs, colGreen)
	if b := rep.BaselineBefore; b != nil {
		cdf(append(slices.Clone(b.redisMs), rep.BaselineAfter.redisMsOrNil()...), colOrange)
		cdf(append(slices.Clone(b.pullMs), rep.BaselineAfter.pullMsOrNil()...), colPurple)
		items = append(items, legendItem{"RAW REDIS 2 COMMANDS (BASELINE)", colOrange}, legendItem{"PULL SQL (BASELINE)", colPurple})
	}
	c.legend(bot.x0+20, bot.y0+10, items)

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write chart: %w", err)
	}
	if err := png.Encode(f, c.img); err != nil {
		f.Close()
		return fmt.Errorf("write chart: %w", err)
	}
	return f.Close()
}

func (b *Baselines) redisMsOrNil() []float64 {
	if b == nil {
		return nil
	}
	return b.redisMs
}

func (b *Baselines) pullMsOrNil() []float64 {
	if b == nil {
		return nil
	}
	return b.pullMs
}

// tickStep picks a round step for about 10 ticks over [0, span].
func tickStep(span float64) float64 {
	for _, s := range []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600} {
		if span/s <= 12 {
			return s
		}
	}
	return 1200
}
