package api

import (
	"net/http"

	"github.com/gorilla/mux"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traced wraps the API in otelhttp when tracing is on (Deps.TracerProvider
// set): a server span per request, continuing a W3C traceparent the
// client sent, named by the route template ("POST /api/posts"). The
// commands store that span's traceparent in the events they append
// (Server.trace). With no provider the handler is returned as it is, so
// tracing off costs the requests nothing.
func (s *Server) traced(r *mux.Router, h http.Handler) http.Handler {
	tp := s.deps.TracerProvider
	if tp == nil {
		return h
	}
	r.Use(nameSpanByRoute)
	return otelhttp.NewHandler(h, "http",
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }))
}

// nameSpanByRoute renames the request's span to its method and route
// template once mux matched the route: path parameters stay out of span
// names.
func nameSpanByRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
			if route := mux.CurrentRoute(r); route != nil {
				if tmpl, err := route.GetPathTemplate(); err == nil {
					span.SetName(r.Method + " " + tmpl)
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}
