package cdc

import (
	"context"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/internal/tracing"
)

// Publisher is what CDC needs from the sink: a synchronous publish that
// returns once the broker acknowledged (internal/kafka.NewPublisher).
type Publisher interface {
	Publish(topic string, msgs ...*message.Message) error
}

// item is one event on its way to Kafka.
type item struct {
	row *eventRow
	txn *txn
}

// processor publishes events through lanes: the audience key picks the
// lane, and each lane publishes its queue strictly in order, one
// acknowledged message at a time, so one key's events reach its partition
// in commit order. Throughput comes from the lanes publishing concurrently
// (the sync producer batches concurrent sends into one request per broker).
// The lane queues are bounded: a full lane blocks the reader (backpressure).
type processor struct {
	topic  string
	pubs   []Publisher
	lanes  []chan item
	seed   maphash.Seed
	log    *slog.Logger
	m      *metrics
	wg     sync.WaitGroup
	acked  *atomic.Int64               // events acknowledged, not yet saved
	onAck  func(it item, at time.Time) // tests and benchmarks; nil otherwise
	minBO  time.Duration
	maxBO  time.Duration
	stopMu sync.Once
	tracer trace.Tracer // nil: no spans
}

func newProcessor(cfg Config, pubs []Publisher, m *metrics, acked *atomic.Int64) *processor {
	p := &processor{
		topic: cfg.Topic, pubs: pubs, seed: maphash.MakeSeed(), log: cfg.Logger, m: m, acked: acked,
		lanes: make([]chan item, cfg.Lanes),
		minBO: cfg.MinBackoff, maxBO: cfg.MaxBackoff,
	}
	if cfg.TracerProvider != nil {
		p.tracer = cfg.TracerProvider.Tracer(tracing.Name)
	}
	per := max(cfg.MaxInFlight/cfg.Lanes, 1)
	for i := range p.lanes {
		p.lanes[i] = make(chan item, per)
	}
	return p
}

// start runs the lane goroutines until their queues are closed (stop) or
// ctx is done; ctx ends publishing retries only.
func (p *processor) start(ctx context.Context) {
	for i := range p.lanes {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.runLane(ctx, p.lanes[i], p.pubs[i%len(p.pubs)])
		}()
	}
}

// lane returns the queue of an audience key.
func (p *processor) lane(key int64) chan item {
	return p.lanes[maphash.Comparable(p.seed, key)%uint64(len(p.lanes))]
}

func (p *processor) runLane(ctx context.Context, q chan item, pub Publisher) {
	for it := range q {
		if !it.txn.waitVisible(ctx) {
			return
		}
		msg, err := messageOf(it.row)
		if err != nil {
			// Cannot happen with rows PostgreSQL wrote (valid jsonb, ISO
			// timestamps); publish what is known rather than lose the event.
			p.m.undecodable.Inc()
			p.log.Error("cdc: incomplete envelope", "err", err)
			msg, _ = messageOf(&eventRow{env: it.row.env, metadata: []byte("{}"), recordedAt: "1970-01-01 00:00:00+00"})
		}
		span := p.startSpan(ctx, msg)
		backoff := p.minBO
		for {
			err := pub.Publish(p.topic, msg)
			if err == nil {
				break
			}
			p.m.publishErrors.Inc()
			p.log.Warn("cdc: publish failed, retrying in order", "event", msg.UUID, "backoff", backoff, "err", err)
			select {
			case <-ctx.Done():
				span.End()
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, p.maxBO)
		}
		span.End()
		now := time.Now()
		it.txn.ack()
		p.m.published.Inc()
		p.acked.Add(1)
		p.m.inFlight.Dec()
		if p.onAck != nil {
			p.onAck(it, now)
		}
	}
}

// stop closes the queues and waits for the lanes to publish what they hold,
// or for ctx (given to start) to end.
func (p *processor) stop() {
	p.stopMu.Do(func() {
		for _, q := range p.lanes {
			close(q)
		}
	})
	p.wg.Wait()
}

// startSpan starts the span of msg's publishing when tracing is on and
// the event carries a traceparent (it was written by a traced request): a
// producer span, child of the writer's, whose own traceparent replaces
// the header, so the projectors' spans are its children. Otherwise it
// returns a span that records nothing.
func (p *processor) startSpan(ctx context.Context, msg *message.Message) trace.Span {
	parent := msg.Metadata[kafka.MetaTraceParent]
	if p.tracer == nil || parent == "" {
		return noSpan
	}
	typ := msg.Metadata[kafka.MetaName]
	ctx, span := p.tracer.Start(tracing.WithRemoteParent(ctx, parent), "cdc publish "+typ,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", p.topic),
			attribute.String("messaging.message.id", msg.UUID),
			attribute.String("messaging.kafka.message.key", msg.Metadata[kafka.MetaPartitionKey]),
			attribute.String("feed.event.type", typ),
			attribute.String("feed.stream.id", msg.Metadata[kafka.MetaStreamID]),
		))
	if tp := tracing.TraceParent(ctx); tp != "" {
		msg.Metadata[kafka.MetaTraceParent] = tp
	}
	return span
}

// noSpan is the span of an event that is not traced.
var noSpan = trace.SpanFromContext(context.Background())
