package api

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/feedco/feed/status"
)

// StatusSource gives the status page its report; *status.Cache is one (it
// gathers at most once every TTL however many ask).
type StatusSource interface {
	Status(ctx context.Context) status.Report
	TTL() time.Duration
}

var errStatusUnavailable = errors.New("the status page is not configured in this process")

// AdminHandler is the operators' listener of a process (FEED_ADMIN_ADDR,
// loopback by default), never the API's public port: GET /metrics (reg),
// GET /status (the status page of st, 503 when nil), GET /healthz (the
// process serves) and Go's profiles under /debug/pprof/. None needs an
// identity or is shed: the listener belongs on the operators' network.
func AdminHandler(reg *prometheus.Registry, st StatusSource, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) { statusPage(w, r, st, log) })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_ = writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// Admin is AdminHandler of the server's registry and status source.
func (s *Server) Admin() http.Handler { return AdminHandler(s.reg, s.deps.Status, s.log) }

// GET /status: the operators' status page (status.WriteHTML), server-
// rendered from the same model as `feed status --output json`, as st
// gives it (cmd/feed's redacts addresses and credentials). A section that
// could not be gathered is shown with its error; the page is still 200.
func statusPage(w http.ResponseWriter, r *http.Request, st StatusSource, log *slog.Logger) {
	if st == nil {
		writeError(w, r, log, errStatusUnavailable)
		return
	}
	rep := st.Status(r.Context())
	var b bytes.Buffer
	if err := status.WriteHTML(&b, rep, status.PageOptions{TTL: st.TTL()}); err != nil {
		writeError(w, r, log, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b.Bytes())
	}
}
