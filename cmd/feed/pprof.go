package main

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"time"
)

// startPprof serves Go's runtime profiles (/debug/pprof/...) on
// FEED_PPROF_ADDR when it is set, for any command; unset (the default)
// serves nothing. The listener is separate from the API's so that it can
// stay on a loopback or operator-only address.
func startPprof(log *slog.Logger) {
	addr := os.Getenv("FEED_PPROF_ADDR")
	if addr == "" {
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("pprof server", "addr", addr, "err", err)
		}
	}()
	log.Info("pprof: serving /debug/pprof/", "addr", addr)
}
