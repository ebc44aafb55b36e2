package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/feedco/feed/internal/procio"
	"github.com/feedco/feed/internal/schedlat"
)

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	// degraded pages by reason: "load" (HomeDegraded's, at the degrade
	// point) or "redis" (from PostgreSQL alone, Redis unavailable)
	degraded                    *prometheus.CounterVec
	degradedLoad, degradedRedis prometheus.Counter

	// The series by label values, resolved once: WithLabelValues validates
	// and hashes its labels on every call. Bounded: route templates x
	// methods x status codes.
	series sync.Map // seriesKey -> prometheus.Counter (code != 0) or prometheus.Observer (code 0)
}

type seriesKey struct {
	route, method string
	code          int
}

// newMetrics registers the HTTP metrics, labelled by route template (never
// the raw path, whose ids would explode the label set).
func newMetrics(reg *prometheus.Registry) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_http_requests_total",
			Help: "HTTP requests by route template, method and status code.",
		}, []string{"route", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "feed_http_request_duration_seconds",
			Help:    "HTTP request latency by route template and method.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "method"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "feed_http_degraded_total",
			Help: "Feed pages answered with Feed-Degraded: true, by reason: load (inbox and own posts only, at the degrade point) or redis (from PostgreSQL alone, Redis unavailable).",
		}, []string{"reason"}),
	}
	m.degradedLoad, m.degradedRedis = m.degraded.WithLabelValues("load"), m.degraded.WithLabelValues("redis")
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.degraded} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register http metrics: %w", err)
		}
	}
	// The runtime collectors may already be in a shared registry.
	rt := []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
	if c := schedlat.New(); c != nil {
		rt = append(rt, c)
	}
	if c := procio.New(); c != nil {
		rt = append(rt, c)
	}
	for _, c := range rt {
		var are prometheus.AlreadyRegisteredError
		if err := reg.Register(c); err != nil && !errors.As(err, &are) {
			return nil, fmt.Errorf("register runtime metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) observe(route, method string, status int, start time.Time) {
	if status == 0 {
		status = http.StatusOK
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions:
	default:
		method = "other" // clients choose methods; keep the label set bounded
	}
	d := time.Since(start).Seconds()
	k := seriesKey{route, method, status}
	c, ok := m.series.Load(k)
	if !ok {
		c, _ = m.series.LoadOrStore(k, m.requests.WithLabelValues(route, method, strconv.Itoa(status)))
	}
	c.(prometheus.Counter).Inc()
	k.code = 0
	o, ok := m.series.Load(k)
	if !ok {
		o, _ = m.series.LoadOrStore(k, m.latency.WithLabelValues(route, method))
	}
	o.(prometheus.Observer).Observe(d)
}

// middleware measures matched routes; mux has set the route by now.
func (m *metrics) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := "unknown"
		if cr := mux.CurrentRoute(r); cr != nil {
			if t, err := cr.GetPathTemplate(); err == nil {
				route = t
			}
		}
		m.serve(route, next, w, r)
	})
}

// serve runs next, counted and timed under route.
func (m *metrics) serve(route string, next http.Handler, w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := asStatusWriter(w)
	defer func() {
		if v := recover(); v != nil {
			m.observe(route, r.Method, http.StatusInternalServerError, start)
			panic(v) // recoverPanics answers it
		}
		m.observe(route, r.Method, sw.status, start)
	}()
	next.ServeHTTP(sw, r)
}

// wrapUnmatched measures 404s and 405s under one route label.
func (m *metrics) wrapUnmatched(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := asStatusWriter(w)
		defer func() { m.observe("unmatched", r.Method, sw.status, start) }()
		next.ServeHTTP(sw, r)
	})
}
