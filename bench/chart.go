package bench

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The chart is drawn with gonum.org/v1/plot, its text in the Liberation
// fonts it embeds: a PNG or an SVG of the same two panels.

var (
	colBlue   = color.RGBA{31, 119, 180, 255}
	colRed    = color.RGBA{214, 39, 40, 255}
	colGreen  = color.RGBA{44, 160, 44, 255}
	colOrange = color.RGBA{255, 127, 14, 255}
	colPurple = color.RGBA{148, 103, 189, 255}
	colGray   = color.RGBA{127, 127, 127, 255}
)

// The chart's size: 1200x940 pixels at 96 dpi in the PNG.
const (
	chartW   = 1200 * vg.Inch / 96
	chartH   = 940 * vg.Inch / 96
	chartDPI = 96
)

// minMs is the floor of the log axes: a latency at or below it is drawn
// on the axis.
const minMs = 0.1

// WriteChart draws latency over time (top: reads p50/p99 per second,
// every post-to-visible probe, CDC lag) and the latency distributions
// (bottom: CDFs of HTTP reads, the two baselines, post-to-visible): an
// SVG when path ends in .svg, else a PNG.
func (rep *Report) WriteChart(path string) error {
	top, err := rep.timePlot()
	if err != nil {
		return fmt.Errorf("write chart: %w", err)
	}
	bot, err := rep.cdfPlot()
	if err != nil {
		return fmt.Errorf("write chart: %w", err)
	}
	var c interface {
		vg.CanvasSizer
		io.WriterTo
	}
	if filepath.Ext(path) == ".svg" {
		c = vgsvg.New(chartW, chartH)
	} else {
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(chartW, chartH), vgimg.UseDPI(chartDPI))}
	}
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(8), PadBottom: vg.Points(8), PadLeft: vg.Points(8), PadRight: vg.Points(16), PadY: vg.Points(24)}
	plots := [][]*plot.Plot{{top}, {bot}}
	canvases := plot.Align(plots, tiles, draw.New(c))
	top.Draw(canvases[0][0])
	bot.Draw(canvases[1][0])
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write chart: %w", err)
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write chart: %w", err)
	}
	return f.Close()
}

// logMs sets a logarithmic axis of milliseconds from minMs to 100 s.
func logMs(a *plot.Axis) {
	a.Scale = plot.LogScale{}
	a.Tick.Marker = plot.LogTicks{Prec: -1}
	a.Min, a.Max = minMs, 100_000
}

// addLine adds a line of pts in col (with points of radius dot when dot >
// 0), and returns it for the legend.
func addLine(p *plot.Plot, pts plotter.XYs, col color.Color, dot vg.Length) (plot.Thumbnailer, error) {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return nil, err
	}
	l.Color, l.Width = col, vg.Points(1.5)
	p.Add(l)
	if dot <= 0 {
		return l, nil
	}
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return nil, err
	}
	sc.Color, sc.Radius, sc.Shape = col, dot, draw.CircleGlyph{}
	p.Add(sc)
	return l, nil
}

// timePlot is the top panel: over the seconds of the mixed phase, the
// reads' p50 and p99 of each second, each post-to-visible probe, and the
// CDC lag, in log milliseconds.
func (rep *Report) timePlot() (*plot.Plot, error) {
	m := rep.Mixed
	p := plot.New()
	p.Title.Text = "Latency over time"
	p.X.Label.Text = "seconds of the mixed phase"
	p.Y.Label.Text = "ms (log scale)"
	p.X.Min, p.X.Max = 0, math.Max(1, m.Seconds)
	logMs(&p.Y)
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.XOffs = -vg.Points(8)

	// CDC lag: the reader's own gauge when the run scraped it, else the
	// slot's (about a second coarse: near half a second under any steady
	// write rate).
	cdcLabel, readerLag := "CDC lag (slot)", false
	for _, t := range m.Timeline {
		if t.CDCLagLive != nil {
			cdcLabel, readerLag = "CDC lag (reader)", true
			break
		}
	}
	var lag plotter.XYs
	for _, t := range m.Timeline {
		switch {
		case readerLag && t.CDCLagLive != nil:
			lag = append(lag, plotter.XY{X: t.T, Y: math.Max(*t.CDCLagLive*1000, minMs)})
		case !readerLag && t.Lag != nil:
			lag = append(lag, plotter.XY{X: t.T, Y: math.Max(t.Lag.CDCLagSeconds*1000, minMs)})
		}
	}
	// series adds the per-second values of vals, a line broken where a
	// second had no reads.
	series := func(name string, vals func(SecondPoint) float64, col color.Color) error {
		var run plotter.XYs
		var thumb plot.Thumbnailer
		flush := func() error {
			if len(run) == 0 {
				return nil
			}
			th, err := addLine(p, run, col, vg.Points(2))
			thumb, run = th, nil
			return err
		}
		for _, s := range m.PerSecond {
			v := vals(s)
			if s.Reads == 0 || v <= 0 {
				if err := flush(); err != nil {
					return err
				}
				continue
			}
			run = append(run, plotter.XY{X: float64(s.Second) + 0.5, Y: math.Max(v, minMs)})
		}
		if err := flush(); err != nil {
			return err
		}
		if thumb != nil {
			p.Legend.Add(name, thumb)
		}
		return nil
	}
	if len(lag) > 0 {
		th, err := addLine(p, lag, colGray, 0)
		if err != nil {
			return nil, err
		}
		p.Legend.Add(cdcLabel, th)
	}
	if err := series("feed read p50 / s", func(s SecondPoint) float64 { return s.ReadP50 }, colBlue); err != nil {
		return nil, err
	}
	if err := series("feed read p99 / s", func(s SecondPoint) float64 { return s.ReadP99 }, colRed); err != nil {
		return nil, err
	}
	if len(m.Visible) > 0 {
		pts := make(plotter.XYs, len(m.Visible))
		for i, v := range m.Visible {
			pts[i] = plotter.XY{X: v[0], Y: math.Max(v[1], minMs)}
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, err
		}
		sc.Color, sc.Radius, sc.Shape = colGreen, vg.Points(2.5), draw.CircleGlyph{}
		p.Add(sc)
		p.Legend.Add("post to visible (each)", sc)
	}
	return p, nil
}

// cdfPlot is the bottom panel: the latency distributions (the share at or
// below each latency, log milliseconds) of the HTTP reads, post-to-visible
// and the two baselines.
func (rep *Report) cdfPlot() (*plot.Plot, error) {
	m := rep.Mixed
	p := plot.New()
	p.Title.Text = "Latency distribution (CDF)"
	p.X.Label.Text = "ms (log scale)"
	p.Y.Label.Text = "% at or below"
	logMs(&p.X)
	p.Y.Min, p.Y.Max = 0, 100
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	cdf := func(name string, ms []float64, col color.Color) error {
		if len(ms) == 0 {
			return nil
		}
		s := slices.Clone(ms)
		slices.Sort(s)
		step := max(1, len(s)/2000)
		var pts plotter.XYs
		for i := 0; i < len(s); i += step {
			pts = append(pts, plotter.XY{X: math.Max(s[i], minMs), Y: 100 * float64(i+1) / float64(len(s))})
		}
		pts = append(pts, plotter.XY{X: math.Max(s[len(s)-1], minMs), Y: 100})
		th, err := addLine(p, pts, col, 0)
		if err != nil {
			return err
		}
		p.Legend.Add(name, th)
		return nil
	}
	if err := cdf("feed read (HTTP, mixed)", m.readMs, colBlue); err != nil {
		return nil, err
	}
	if err := cdf("post to visible", m.visibleMs, colGreen); err != nil {
		return nil, err
	}
	if b := rep.BaselineBefore; b != nil {
		if err := cdf("raw Redis, 2 commands (baseline)", append(slices.Clone(b.redisMs), rep.BaselineAfter.redisMsOrNil()...), colOrange); err != nil {
			return nil, err
		}
		if err := cdf("pull SQL (baseline)", append(slices.Clone(b.pullMs), rep.BaselineAfter.pullMsOrNil()...), colPurple); err != nil {
			return nil, err
		}
	}
	return p, nil
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
