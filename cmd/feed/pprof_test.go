package main

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPprofServesProfiles: with FEED_PPROF_ADDR set, the profile index is
// served there; unset, nothing listens (startPprof returns at once).
func TestPprofServesProfiles(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	t.Setenv("FEED_PPROF_ADDR", addr)
	startPprof(slog.New(slog.NewTextHandler(io.Discard, nil)))
	var body string
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/debug/pprof/")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /debug/pprof/: %s", resp.Status)
			}
			body = string(b)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pprof server never answered on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{"goroutine", "heap", "profile"} {
		if !strings.Contains(body, want) {
			t.Errorf("profile index lacks %q", want)
		}
	}
}
