package api

import (
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
)

// queryValues is r.URL.Query(): the map it returns escapes, as it did in
// page.
//
//go:noinline
func queryValues(raw string) url.Values {
	q, _ := url.ParseQuery(raw)
	return q
}

// pageArgsOf is what page read before parsePageArgs: r.URL.Query()'s map.
func pageArgsOf(raw string) pageArgs {
	q := queryValues(raw)
	var a pageArgs
	a.limit, a.cursor, a.after = q.Get("limit"), q.Get("cursor"), q.Get("after")
	_, a.hasLimit = q["limit"]
	_, a.hasCursor = q["cursor"]
	_, a.hasAfter = q["after"]
	return a
}

func TestParsePageArgsAsParseQuery(t *testing.T) {
	cases := []string{
		"", "limit=20", "limit=", "limit", "limit=5&limit=7", "limit=&limit=7",
		"cursor=abc&limit=3", "after=x", "after=", "after&cursor", "cursor=a&after=b",
		"li%6Dit=9", "limit=%32%30", "cursor=a%2Bb+c", "cursor=%zz&cursor=ok",
		"limit=1;x=2&limit=3", ";", "&&&limit=4&&", "=limit", "limit==5", "%=1&limit=2",
		"cursor=" + strings.Repeat("a", 600), "x=1&y=2&after=z&cursor=w",
		strings.Repeat("a=1&", pageArgsMaxParams) + "limit=8",
		strings.Repeat("&", pageArgsMaxParams+3) + "cursor=c",
	}
	for _, raw := range cases {
		if got, want := parsePageArgs(raw), pageArgsOf(raw); got != want {
			t.Errorf("%q: got %+v, want %+v", raw, got, want)
		}
	}
	// Random queries over the characters that matter to the parser.
	parts := []string{"limit", "cursor", "after", "=", "&", ";", "%", "%2", "%20", "%6D", "+", "1", "x", "li", "mit"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		raw := b.String()
		if got, want := parsePageArgs(raw), pageArgsOf(raw); got != want {
			t.Fatalf("%q: got %+v, want %+v", raw, got, want)
		}
	}
}

func FuzzParsePageArgs(f *testing.F) {
	for _, s := range []string{"limit=20", "cursor=a&after=b", "li%6Dit=9;", "after&after=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if got, want := parsePageArgs(raw), pageArgsOf(raw); got != want {
			t.Fatalf("%q: got %+v, want %+v", raw, got, want)
		}
	})
}

func TestParsePageArgsAllocations(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = parsePageArgs("limit=20&cursor=abcdef") }); n != 0 {
		t.Fatalf("parsePageArgs of a query without escapes: %v allocations, want 0", n)
	}
}

// BenchmarkPageArgs compares parsePageArgs with the url.Values it
// replaced, on the query of a feed read.
func BenchmarkPageArgs(b *testing.B) {
	for _, raw := range []string{"limit=20", "limit=20&cursor=AAAAAYzJ0Tq2AAAAAAAAAAE"} {
		b.Run("parsePageArgs/"+raw[:min(len(raw), 12)], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = parsePageArgs(raw)
			}
		})
		b.Run("url.Values/"+raw[:min(len(raw), 12)], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = pageArgsOf(raw)
			}
		})
	}
}
