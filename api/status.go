package api

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/feedco/feed/status"
)

// StatusSource gives the status page its report; *status.Cache is one (it
// gathers at most once every TTL however many ask).
type StatusSource interface {
	Status(ctx context.Context) status.Report
	TTL() time.Duration
}

var errStatusUnavailable = errors.New("the status page is not configured in this process")

// GET /status: the operators' status page (status.WriteHTML), server-
// rendered from the same model as `feed status --output json`. Like
// /metrics it needs no identity and is never shed: it belongs on the
// operators' network, not behind the public gateway (docs/api.md, Status).
// A section that could not be gathered is shown with its error; the page
// is still 200.
func (s *Server) statusPage(w http.ResponseWriter, r *http.Request) {
	if s.deps.Status == nil {
		writeError(w, r, s.log, errStatusUnavailable)
		return
	}
	rep := s.deps.Status.Status(r.Context())
	var b bytes.Buffer
	if err := status.WriteHTML(&b, rep, status.PageOptions{TTL: s.deps.Status.TTL()}); err != nil {
		writeError(w, r, s.log, err)
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
