// Package tracing carries a trace across the event log: the W3C Trace
// Context traceparent of the span that wrote an event is stored in the
// event's metadata (events.Metadata.TraceParent), CDC continues it in the
// Kafka header "traceparent", and each projector's handling is a child of
// it. Tracing is on when the binary gives a component a TracerProvider
// (cmd/feed builds one from the OTEL_* variables); a component given none
// starts no span, so tracing costs nothing when it is off.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Name is the instrumentation scope of feed's own spans.
const Name = "github.com/feedco/feed"

// Header is the W3C Trace Context header, also the Kafka header CDC sets.
const Header = "traceparent"

// w3c is the W3C Trace Context propagator: the format is part of the
// event contract, whatever propagators a process configures.
var w3c propagation.TraceContext

// carrier is a TextMapCarrier of the one traceparent field.
type carrier struct{ traceparent string }

func (c *carrier) Get(key string) string {
	if key == Header {
		return c.traceparent
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	if key == Header {
		c.traceparent = value
	}
}

func (c *carrier) Keys() []string { return []string{Header} }

// TraceParent is the traceparent of the span in ctx, "" when ctx holds no
// valid span context.
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	var c carrier
	w3c.Inject(ctx, &c)
	return c.traceparent
}

// WithRemoteParent returns ctx with the span context of a traceparent as
// its remote parent; ctx itself when traceparent is empty or malformed.
func WithRemoteParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return w3c.Extract(ctx, &carrier{traceparent: traceparent})
}

// ChildrenOnly wraps tp so that its tracers start a span only within a
// trace (ctx holds a valid span context) and never a root: for the
// instrumentation of clients (Redis) whose calls are worth a span as part
// of a traced request or event, and are noise on their own.
func ChildrenOnly(tp trace.TracerProvider) trace.TracerProvider { return childrenOnly{tp: tp} }

type childrenOnly struct {
	embedded.TracerProvider
	tp trace.TracerProvider
}

func (p childrenOnly) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return childrenOnlyTracer{t: p.tp.Tracer(name, opts...)}
}

type childrenOnlyTracer struct {
	embedded.Tracer
	t trace.Tracer
}

func (t childrenOnlyTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.t.Start(ctx, name, opts...)
}
