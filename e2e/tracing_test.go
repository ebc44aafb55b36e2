package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/feedco/feed/api"
	"github.com/feedco/feed/commands"
	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/auth"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/testkit/systest"
	"github.com/feedco/feed/testkit/testenv"
)

// traceSpan is one span of a trace as the test reports it.
type traceSpan struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	SpanID string `json:"spanId"`
	Parent string `json:"parentSpanId,omitempty"`
}

// TestTraceOfAPost follows one POST /api/posts through the pipeline, all
// in one trace recorded by the SDK's in-memory exporter: the request's
// server span (otelhttp), its traceparent stored in the event's metadata,
// CDC's publishing span (child of the request's, carried on as the Kafka
// header), each projector's handling (children of CDC's) and the inbox
// projector's Redis write under its span.
func TestTraceOfAPost(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	s := systest.Start(t, systest.Config{Name: "trace", Partitions: 3, TracerProvider: tp,
		Projections: projections.Config{CelebrityThreshold: 1000, InboxMax: 100}})

	signer, err := auth.NewSigner(jwtSecret)
	if err != nil {
		t.Fatal(err)
	}
	users, err := auth.NewUsers(s.DB.Pool, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Config{}, api.Deps{Commands: s.Commands, Tokens: signer, Users: users, Feed: s.Feed,
		Logger: s.Log, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)

	// An author and an active follower (a read makes them active), written
	// without a trace.
	ctx := context.Background()
	ana, err := s.Commands.RegisterUser.Handle(ctx, commands.RegisterUser{Name: "ana"})
	if err != nil {
		t.Fatal(err)
	}
	bo, err := s.Commands.RegisterUser.Handle(ctx, commands.RegisterUser{Name: "bo"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commands.Follow.Handle(ctx, commands.Follow{FollowerID: bo.ID, FolloweeID: ana.ID}); err != nil {
		t.Fatal(err)
	}
	call := func(method, path, body string, user int64) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+signer.Sign(user, time.Hour))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	if resp := call(http.MethodGet, "/api/feed", "", bo.ID); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/feed: %s", resp.Status)
	}
	s.WaitCDC(t, time.Minute)
	s.WaitConsumed(t, time.Minute)

	resp := call(http.MethodPost, "/api/posts", `{"content":"traced"}`, ana.ID)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /api/posts: %s", resp.Status)
	}
	var post struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&post); err != nil {
		t.Fatal(err)
	}

	// The root: the request's server span.
	var root sdktrace.ReadOnlySpan
	for _, sp := range exp.GetSpans().Snapshots() {
		if sp.Name() == "POST /api/posts" {
			root = sp
		}
	}
	if root == nil {
		t.Fatalf("no span POST /api/posts among %v", names(exp.GetSpans().Snapshots()))
	}
	if root.Parent().IsValid() || root.SpanKind() != trace.SpanKindServer {
		t.Fatalf("POST /api/posts: parent %v, kind %v; want a server root", root.Parent(), root.SpanKind())
	}
	traceID := root.SpanContext().TraceID()

	// The event stores the request span's traceparent.
	var meta events.Metadata
	if err := s.DB.Pool.QueryRow(ctx, `SELECT metadata FROM events WHERE type = $1 AND payload->>'postId' = $2`,
		events.TypePostCreated, post.ID).Scan(&meta); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("00-%s-%s-01", traceID, root.SpanContext().SpanID()); meta.TraceParent != want {
		t.Fatalf("the event's traceparent %q, want the request span's %q", meta.TraceParent, want)
	}

	// Wait for the inbox projector's handling with its Redis write, and
	// for the timelines' and posts' handling (independent consumer groups:
	// they end in any order).
	inboxSpan := projections.NameInbox + " apply " + events.TypePostCreated
	var spans []sdktrace.ReadOnlySpan
	testenv.Eventually(t, time.Minute, "the projectors' spans, the inbox's with its Redis write, in the post's trace", func() bool {
		spans = spans[:0]
		for _, sp := range exp.GetSpans().Snapshots() {
			if sp.SpanContext().TraceID() == traceID {
				spans = append(spans, sp)
			}
		}
		inbox, others := false, 0
		for _, sp := range spans {
			switch sp.Name() {
			case inboxSpan:
				inbox = inbox || len(children(spans, sp)) > 0
			case projections.NameTimelines + " apply " + events.TypePostCreated, projections.NamePosts + " apply " + events.TypePostCreated:
				others++
			}
		}
		return inbox && others >= 2
	})
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range spans {
		byName[sp.Name()] = sp
	}
	cdcSpan := byName["cdc publish "+events.TypePostCreated]
	if cdcSpan == nil || cdcSpan.Parent().SpanID() != root.SpanContext().SpanID() || cdcSpan.SpanKind() != trace.SpanKindProducer {
		t.Fatalf("want CDC's producer span, child of the request's, among %v", names(spans))
	}
	for _, name := range []string{inboxSpan, projections.NameTimelines + " apply " + events.TypePostCreated,
		projections.NamePosts + " apply " + events.TypePostCreated} {
		sp := byName[name]
		if sp == nil || sp.Parent().SpanID() != cdcSpan.SpanContext().SpanID() || sp.SpanKind() != trace.SpanKindConsumer {
			t.Fatalf("want the consumer span %q, child of CDC's, among %v", name, names(spans))
		}
	}

	// The trace, for the record (docs/events.md, Tracing).
	out := make([]traceSpan, 0, len(spans))
	for _, sp := range spans {
		ts := traceSpan{Name: sp.Name(), Kind: sp.SpanKind().String(), SpanID: sp.SpanContext().SpanID().String()}
		if sp.Parent().IsValid() {
			ts.Parent = sp.Parent().SpanID().String()
		}
		out = append(out, ts)
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	t.Logf("trace %s:\n%s", traceID, b)
}

func children(spans []sdktrace.ReadOnlySpan, parent sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, sp := range spans {
		if sp.Parent().SpanID() == parent.SpanContext().SpanID() {
			out = append(out, sp)
		}
	}
	return out
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, len(spans))
	for i, sp := range spans {
		out[i] = sp.Name() + "<-" + sp.Parent().SpanID().String()
	}
	return out
}
