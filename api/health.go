package api

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// GET /healthz: the process is alive (no dependency is checked, so a
// database outage does not get the process restarted).
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	_ = writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// GET /readyz: every dependency is pinged at once, within 2 s, and the
// body names each check's result ("ok" or "down"). A failing Ready check
// makes it 503 ("unavailable"), so a load balancer stops sending traffic;
// a failing Degradable check only makes it "degraded" (200): the process
// still answers, from the source of truth.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	type result struct {
		name     string
		required bool
		err      error
	}
	var wg sync.WaitGroup
	results := make(chan result, len(s.deps.Ready)+len(s.deps.Degradable))
	run := func(checks map[string]func(context.Context) error, required bool) {
		for n, check := range checks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results <- result{name: n, required: required, err: check(ctx)}
			}()
		}
	}
	run(s.deps.Ready, true)
	run(s.deps.Degradable, false)
	wg.Wait()
	close(results)
	checks := map[string]string{}
	status, word := http.StatusOK, "ok"
	for res := range results {
		if res.err == nil {
			checks[res.name] = "ok"
			continue
		}
		checks[res.name] = "down"
		s.log.WarnContext(ctx, "readiness check failed", "check", res.name, "err", res.err)
		if res.required {
			status, word = http.StatusServiceUnavailable, "unavailable"
		} else if word == "ok" {
			word = "degraded"
		}
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", retryAfterSeconds)
	}
	_ = writeJSON(w, status, map[string]any{"status": word, "checks": checks})
}
