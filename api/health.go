package api

import (
	"context"
	"net/http"
	"sort"
	"time"
)

// GET /healthz: the process is alive (no dependency is checked, so a
// database outage does not get the process restarted).
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	_ = writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// GET /readyz: every dependency answers a ping within 2s; else 503 with
// each check's result, so a load balancer stops sending traffic.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	names := make([]string, 0, len(s.deps.Ready))
	for n := range s.deps.Ready {
		names = append(names, n)
	}
	sort.Strings(names)
	checks := map[string]string{}
	status := http.StatusOK
	for _, n := range names {
		if err := s.deps.Ready[n](ctx); err != nil {
			checks[n] = "down"
			status = http.StatusServiceUnavailable
			s.log.WarnContext(ctx, "readiness check failed", "check", n, "err", err)
			continue
		}
		checks[n] = "ok"
	}
	word := "ok"
	if status != http.StatusOK {
		word = "unavailable"
	}
	_ = writeJSON(w, status, map[string]any{"status": word, "checks": checks})
}
