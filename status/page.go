package status

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"strings"
	"time"
)

//go:embed page.html
var pageSource string

// page is the status page's template. Every value it shows from the
// Report sits in an element whose data-json attribute is the value's path
// in the Report's JSON (e.g. "cdc.lagBytes", "projections.versions.0.lag"),
// so that a test can read the page back and compare it with
// `feed status --output json`. Its formats: integers as they are,
// seconds with one decimal, times in RFC 3339 (UTC, seconds), booleans
// yes/no, a missing time "none" and an unknown lag "unknown".
var page = template.Must(template.New("status").Funcs(template.FuncMap{
	"ts":    func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"tsp":   timeText,
	"f1":    func(f float64) string { return fmt.Sprintf("%.1f", f) },
	"yesno": yesNo,
	"lag":   lagText,
	"join":  strings.Join,
}).Parse(pageSource))

func timeText(t *time.Time) string {
	if t == nil {
		return "none"
	}
	return t.UTC().Format(time.RFC3339)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func lagText(n *int64) string {
	if n == nil {
		return "unknown"
	}
	return fmt.Sprint(*n)
}

// PageOptions are the page's own settings.
type PageOptions struct {
	// Refresh is how often the browser reloads the page (default 10 s).
	Refresh time.Duration
	// TTL is the cache's (Cache), for the page to say.
	TTL time.Duration
}

// WriteHTML writes the report as the status page: one HTML document, its
// style inline, no script and nothing else to load.
func WriteHTML(w io.Writer, r Report, o PageOptions) error {
	if o.Refresh <= 0 {
		o.Refresh = 10 * time.Second
	}
	return page.Execute(w, struct {
		Report  Report
		Refresh int
		TTL     time.Duration
	}{r, int(o.Refresh.Seconds()), o.TTL})
}
