package projections

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	wk "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/internal/tracing"
)

// Conn is the brokers with their security settings.
func (c RunnerConfig) Conn() kafka.Conn { return kafka.Conn{Brokers: c.Brokers, Security: c.Security} }

// RunnerConfig configures the consumption of the event topic.
type RunnerConfig struct {
	// Brokers are the Kafka bootstrap addresses. Required.
	Brokers []string
	// Security is how the consumers, the poison publisher and the lag
	// watcher authenticate to the brokers (TLS, SASL).
	Security kafka.Security
	// Topic is the event topic (FEED_TOPIC). Required.
	Topic string
	// GroupPrefix is put before every consumer group name ("" in
	// production; tests and rebuilds use their own).
	GroupPrefix string
	// MaxRetries is how often a failing message is retried in place, with
	// exponential backoff from RetryInitial up to RetryMax, before it is
	// poisoned (or, for an outage, nacked and redelivered).
	MaxRetries   int
	RetryInitial time.Duration
	RetryMax     time.Duration
	// HandlerTimeout bounds one attempt at one message.
	HandlerTimeout time.Duration
	// DrainTimeout bounds how long shutdown waits for in-flight messages.
	DrainTimeout time.Duration
	// LagInterval is how often the consumer-lag gauge is refreshed (0: 15 s;
	// negative: never).
	LagInterval time.Duration
	// Logger receives the runner's logs (nil: slog.Default()).
	Logger *slog.Logger
	// Metrics may be nil.
	Metrics *Metrics
	// TracerProvider, when set, makes each projector's handling of an
	// event written by a traced request a span, child of CDC's publishing
	// span (the message's traceparent header), with the projector's
	// reads and writes under it. Nil: no spans.
	TracerProvider trace.TracerProvider
}

func (c RunnerConfig) withDefaults() RunnerConfig {
	c.MaxRetries = cmp.Or(c.MaxRetries, 5)
	c.RetryInitial = cmp.Or(c.RetryInitial, 100*time.Millisecond)
	c.RetryMax = cmp.Or(c.RetryMax, 5*time.Second)
	c.HandlerTimeout = cmp.Or(c.HandlerTimeout, 2*time.Minute)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, 30*time.Second)
	c.LagInterval = cmp.Or(c.LagInterval, 15*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports the first setting that cannot work.
func (c RunnerConfig) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("runner: no Kafka brokers")
	case c.Topic == "":
		return errors.New("runner: no topic")
	case c.MaxRetries < 0:
		return fmt.Errorf("runner: max retries %d", c.MaxRetries)
	}
	return nil
}

// Runner consumes the event topic with one watermill handler per projector,
// each in its own consumer group, and shuts down gracefully: on cancel it
// stops taking new messages (they are nacked and stay uncommitted), lets the
// in-flight ones finish, then closes the subscribers, which commit the
// offsets of everything handled.
type Runner struct {
	cfg        RunnerConfig
	projectors []Projector
	codec      *events.Codec
	tracer     trace.Tracer // nil: no spans

	// running is closed once every handler subscribed (Running).
	running chan struct{}

	draining atomic.Bool
	mu       sync.Mutex
	inflight int
	idle     *sync.Cond
}

// errDraining nacks messages that arrive after shutdown began.
var errDraining = errors.New("projector is shutting down")

// NewRunner returns a runner for the projectors.
func NewRunner(cfg RunnerConfig, projectors ...Projector) (*Runner, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(projectors) == 0 {
		return nil, errors.New("runner: no projectors")
	}
	for _, p := range projectors {
		if p == nil {
			return nil, errors.New("runner: nil projector")
		}
	}
	r := &Runner{cfg: cfg, projectors: projectors, codec: events.DefaultCodec, running: make(chan struct{})}
	r.idle = sync.NewCond(&r.mu)
	if cfg.TracerProvider != nil {
		r.tracer = cfg.TracerProvider.Tracer(tracing.Name)
	}
	return r, nil
}

// Running is closed once Run has subscribed every handler to the topic
// (watermill's router runs). A Run that fails before never closes it.
func (r *Runner) Running() <-chan struct{} { return r.running }

// Groups returns the consumer group of every projector, prefix included.
func (r *Runner) Groups() []string {
	out := make([]string, len(r.projectors))
	for i, p := range r.projectors {
		out[i] = r.cfg.GroupPrefix + p.Group()
	}
	return out
}

// Run consumes until ctx is cancelled, then drains and returns nil; it
// returns an error when the router cannot start or stops by itself. It
// returns once every goroutine it started returned, and must be called
// once.
func (r *Runner) Run(ctx context.Context) error {
	wlog := kafka.Logger(r.cfg.Logger)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: r.cfg.DrainTimeout}, wlog)
	if err != nil {
		return fmt.Errorf("create router: %w", err)
	}
	pub, err := kafka.NewPublisher(r.cfg.Conn(), wlog)
	if err != nil {
		return err
	}
	defer pub.Close()
	for _, p := range r.projectors {
		group := r.cfg.GroupPrefix + p.Group()
		sub, err := kafka.NewSubscriber(r.cfg.Conn(), group, wlog)
		if err != nil {
			return err
		}
		h := router.AddConsumerHandler(p.Name(), r.cfg.Topic, sub, r.handler(p))
		// Outermost first: the drain gate, then the poison queue, then
		// retries with backoff, then panic recovery around the handler.
		h.AddMiddleware(
			r.gate,
			poisonMiddleware(pub, r.cfg.Topic, group, r.cfg.Metrics, p.Name(), r.draining.Load),
			retryMiddleware(r.cfg.MaxRetries, r.cfg.RetryInitial, r.cfg.RetryMax, func(err error) bool {
				if errors.Is(err, ErrPermanent) || r.draining.Load() {
					return false
				}
				r.cfg.Metrics.retried(p.Name())
				// A retry applies the whole message again: with a push
				// half done, the entries already written are written
				// twice (idempotent, but work), so each one is logged.
				r.cfg.Logger.Warn("projectors: retrying a message", "projector", p.Name(), "group", group, "err", err)
				return true
			}),
			recoverMiddleware,
		)
	}

	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	var lagDone sync.WaitGroup
	defer func() {
		cancelRun()
		lagDone.Wait()
	}()
	done := make(chan error, 1)
	go func() { done <- router.Run(runCtx) }()
	if r.cfg.LagInterval > 0 {
		lagDone.Go(func() { r.watchLag(runCtx) })
	}

	for running := router.Running(); ; {
		select {
		case <-running:
			close(r.running)
			running = nil
			continue
		case err := <-done:
			if err != nil {
				return fmt.Errorf("run projectors: %w", err)
			}
			return errors.New("run projectors: router stopped")
		case <-ctx.Done():
		}
		break
	}
	r.drain()
	if err := router.Close(); err != nil {
		r.cfg.Logger.Warn("projectors: close router", "err", err)
	}
	<-done
	return nil
}

// drain stops new messages and waits (bounded) for in-flight ones.
func (r *Runner) drain() {
	r.draining.Store(true)
	waited := make(chan struct{})
	go func() {
		r.mu.Lock()
		for r.inflight > 0 {
			r.idle.Wait()
		}
		r.mu.Unlock()
		close(waited)
	}()
	select {
	case <-waited:
	case <-time.After(r.cfg.DrainTimeout):
		r.cfg.Logger.Warn("projectors: drain timed out; unfinished messages will be redelivered")
	}
	// The subscriber marks an acked offset right after the ack; give it a
	// moment before the group closes and commits.
	time.Sleep(50 * time.Millisecond)
}

// gate counts in-flight messages and nacks new ones once draining.
func (r *Runner) gate(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		r.mu.Lock()
		if r.draining.Load() {
			r.mu.Unlock()
			return nil, errDraining
		}
		r.inflight++
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.inflight--
			if r.inflight == 0 {
				r.idle.Broadcast()
			}
			r.mu.Unlock()
		}()
		return h(msg)
	}
}

// handler decodes a message and applies it. The context survives shutdown
// (an in-flight message finishes), bounded by HandlerTimeout. A message of
// a type the projector ignores (Selective) is acknowledged undecoded.
func (r *Runner) handler(p Projector) message.NoPublishHandlerFunc {
	sel, _ := p.(Selective)
	return func(msg *message.Message) error {
		start := time.Now()
		typ := msg.Metadata.Get(kafka.MetaName)
		if sel != nil && sel.Ignores(typ) {
			r.cfg.Metrics.outcome(p.Name(), typ, "ignored")
			return nil
		}
		env, ev, err := r.decode(typ, msg)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(msg.Context()), r.cfg.HandlerTimeout)
		defer cancel()
		// The message's place in its partition: the inbox projector's
		// follower cache relies on seeing every offset in order.
		if part, ok := wk.MessagePartitionFromCtx(msg.Context()); ok {
			if off, ok := wk.MessagePartitionOffsetFromCtx(msg.Context()); ok {
				ctx = withDelivery(ctx, delivery{topic: r.cfg.Topic, partition: part, offset: off})
			}
		}
		var span trace.Span
		if r.tracer != nil {
			if parent := msg.Metadata.Get(kafka.MetaTraceParent); parent != "" {
				ctx, span = r.startSpan(ctx, p, parent, msg, &env)
				defer span.End()
			}
		}
		if err := p.Apply(ctx, env, ev); err != nil {
			err = fmt.Errorf("%s: apply %s %s: %w", p.Name(), env.Type, env.EventID, err)
			if span != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, "apply failed")
			}
			return err
		}
		r.cfg.Metrics.observe(p.Name(), time.Since(start))
		r.cfg.Metrics.outcome(p.Name(), env.Type, "ok")
		return nil
	}
}

// startSpan starts the consumer span of p's handling of msg, child of
// the span whose traceparent the message carries.
func (r *Runner) startSpan(ctx context.Context, p Projector, parent string, msg *message.Message, env *events.Envelope) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "kafka"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", r.cfg.Topic),
		attribute.String("messaging.consumer.group.name", r.cfg.GroupPrefix+p.Group()),
		attribute.String("messaging.message.id", msg.UUID),
		attribute.String("feed.event.type", env.Type),
		attribute.String("feed.stream.id", env.StreamID),
	}
	if part, ok := wk.MessagePartitionFromCtx(msg.Context()); ok {
		attrs = append(attrs, attribute.Int64("messaging.destination.partition.id", int64(part)))
	}
	if off, ok := wk.MessagePartitionOffsetFromCtx(msg.Context()); ok {
		attrs = append(attrs, attribute.Int64("messaging.kafka.offset", off))
	}
	return r.tracer.Start(tracing.WithRemoteParent(ctx, parent), p.Name()+" apply "+env.Type,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
}

// decode turns a message into its envelope and current-version event, in
// one pass when typ (the message's name metadata) is a current type
// (events.Codec.DecodeEnvelopeJSON); failures are permanent.
func (r *Runner) decode(typ string, msg *message.Message) (events.Envelope, events.Event, error) {
	env, ev, err := r.codec.DecodeEnvelopeJSON(typ, msg.Payload)
	if err != nil {
		return env, nil, fmt.Errorf("decode message %s: %v: %w", msg.UUID, err, ErrPermanent)
	}
	return env, ev, nil
}

// watchLag refreshes the consumer-lag gauge until ctx ends.
func (r *Runner) watchLag(ctx context.Context) {
	t := time.NewTicker(r.cfg.LagInterval)
	defer t.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		groups := r.Groups()
		lags, err := ConsumerLag(lctx, r.cfg.Conn(), r.cfg.Topic, groups)
		cancel()
		if err == nil {
			for i, g := range groups {
				r.cfg.Metrics.setLag(r.projectors[i].Name(), lags[g])
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Apply decodes and applies one message with every projector, in order,
// without Kafka: for tools and tests that drive the projectors directly.
// A projector that ignores the message's type (Selective) is passed over,
// as the runner's handler passes it over, so that what is applied here is
// what a consumer group applies.
func Apply(ctx context.Context, projectors []Projector, env events.Envelope) error {
	ev, err := events.DefaultCodec.DecodeEnvelope(env)
	if err != nil {
		return fmt.Errorf("decode %s: %v: %w", env.EventID, err, ErrPermanent)
	}
	for _, p := range projectors {
		if sel, ok := p.(Selective); ok && sel.Ignores(env.Type) {
			continue
		}
		if err := p.Apply(ctx, env, ev); err != nil {
			return fmt.Errorf("%s: apply %s: %w", p.Name(), env.Type, err)
		}
	}
	return nil
}
