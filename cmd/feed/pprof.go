package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"

	"github.com/feedco/feed/internal/service"
)

// newPprof returns the service that serves Go's runtime profiles
// (/debug/pprof/...) on FEED_PPROF_ADDR, for any command, or nil when the
// variable is unset (the default) or its address cannot be bound (logged:
// profiles are a diagnostic, not a reason to refuse to run). It listens
// at once, so it is ready once started. The listener is separate from the
// API's so that it can stay on a loopback or operator-only address.
func newPprof(log *slog.Logger) *service.Service {
	addr := os.Getenv("FEED_PPROF_ADDR")
	if addr == "" {
		return nil
	}
	l, err := listen(addr)
	if err != nil {
		log.Error("pprof: not served", "addr", addr, "err", err)
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	log.Info("pprof: serving /debug/pprof/", "addr", l.Addr().String())
	return service.New("pprof", func(ctx context.Context) error { return serveHTTP(ctx, l, mux) })
}
