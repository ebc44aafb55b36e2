package tracing

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestTraceParentRoundTrip(t *testing.T) {
	if got := TraceParent(context.Background()); got != "" {
		t.Fatalf("no span: traceparent %q, want none", got)
	}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := WithRemoteParent(context.Background(), tp)
	if got := TraceParent(ctx); got != tp {
		t.Fatalf("round trip: %q, want %q", got, tp)
	}
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		if sc := trace.SpanContextFromContext(WithRemoteParent(context.Background(), bad)); sc.IsValid() {
			t.Errorf("%q gave a valid parent %v", bad, sc)
		}
	}
}

func TestChildrenOnly(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tr := ChildrenOnly(tp).Tracer("test")
	_, root := tr.Start(context.Background(), "root")
	root.End()
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("a root span was recorded (%d spans)", n)
	}
	ctx, parent := tp.Tracer("test").Start(context.Background(), "parent")
	_, child := tr.Start(ctx, "child")
	child.End()
	parent.End()
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[0].Name != "child" || spans[0].Parent.SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("want the child under its parent, got %v", spans)
	}
}

// Off (no span in the context), asking for the traceparent allocates
// nothing: the API asks on every write.
func TestTraceParentOffAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() { _ = TraceParent(ctx) }); n != 0 {
		t.Fatalf("%v allocations, want 0", n)
	}
}
