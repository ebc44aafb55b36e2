package main

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestPprofServesProfiles: with FEED_PPROF_ADDR set, the profile index is
// served there from Start to Stop; unset, there is no service.
func TestPprofServesProfiles(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Setenv("FEED_PPROF_ADDR", "")
	if s := newPprof(log); s != nil {
		t.Fatal("a pprof service without FEED_PPROF_ADDR")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	t.Setenv("FEED_PPROF_ADDR", addr)
	s := newPprof(log)
	if s == nil {
		t.Fatalf("no pprof service on %s", addr)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-s.Ready()
	resp, err := http.Get("http://" + addr + "/debug/pprof/")
	if err != nil {
		t.Fatalf("pprof server does not answer on %s: %v", addr, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /debug/pprof/: %s", resp.Status)
	}
	for _, want := range []string{"goroutine", "heap", "profile"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("profile index lacks %q", want)
		}
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + addr + "/debug/pprof/"); err == nil {
		t.Fatal("pprof still served after Stop")
	}
}
