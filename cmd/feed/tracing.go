package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/feedco/feed/internal/tracing"
)

// tracerProvider is the process's OpenTelemetry tracer provider, nil when
// tracing is off; cli.config sets it once from the OTEL_* variables and
// the roles hand it to the API, CDC and the projectors.
var tracerProvider trace.TracerProvider

// tracingEnv are the variables that turn tracing on or off; every other
// OTEL_* variable (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER, OTEL_EXPORTER_OTLP_HEADERS, OTEL_BSP_*, ...) is
// read by the OpenTelemetry SDK and exporter themselves.
var tracingEnv = []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"}

// newTracing builds the tracer provider the OTEL_* variables ask for, or
// none (nil, tracing off): off unless OTEL_TRACES_EXPORTER names an
// exporter or an OTLP endpoint is set, and off with OTEL_SDK_DISABLED=true
// or OTEL_TRACES_EXPORTER=none. Exporters: otlp (OTLP over HTTP/protobuf,
// the default once an endpoint is set) and console (spans as JSON on
// stderr). The shutdown flushes what is buffered.
func newTracing(ctx context.Context, getenv func(string) string) (*sdktrace.TracerProvider, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	if exporter == "" && (getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "") {
		exporter = "otlp"
	}
	var exp sdktrace.SpanExporter
	var err error
	switch exporter {
	case "", "none":
		return nil, nil
	case "otlp":
		proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if proto == "" {
			proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		if proto != "" && proto != "http/protobuf" {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: feed exports OTLP over http/protobuf only", proto)
		}
		exp, err = otlptracehttp.New(ctx)
	case "console":
		exp, err = stdouttrace.New(stdouttrace.WithWriter(os.Stderr))
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: want otlp, console or none", exporter)
	}
	if err != nil {
		return nil, fmt.Errorf("create the %s trace exporter: %w", exporter, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "feed")), // OTEL_SERVICE_NAME overrides it
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID())
	if err != nil {
		return nil, fmt.Errorf("describe the trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	// For libraries that trace through the globals.
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return tp, nil
}

// traceRedis makes c's commands spans of the traces they run in (a traced
// request's reads, a traced event's writes) when tracing is on; never
// roots of their own.
func traceRedis(c redis.UniversalClient) error {
	if tracerProvider == nil {
		return nil
	}
	if err := redisotel.InstrumentTracing(c, redisotel.WithTracerProvider(tracing.ChildrenOnly(tracerProvider))); err != nil {
		return fmt.Errorf("trace Redis: %w", err)
	}
	return nil
}
