package main

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serveMetrics serves reg's /metrics on addr for a role that has no HTTP
// API of its own (`feed cdc`, `feed project`); "" serves nothing. The
// returned stop closes the server.
func serveMetrics(addr string, reg *prometheus.Registry, log *slog.Logger, role string) (stop func()) {
	if addr == "" {
		return func() {}
	}
	srv := &http.Server{Addr: addr, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(role+": metrics server", "err", err)
		}
	}()
	return func() { _ = srv.Close() }
}
