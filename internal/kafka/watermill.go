package kafka

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wk "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/rcrowley/go-metrics"

	"github.com/feedco/feed/events"
)

// Metadata keys of every event message (see docs/architecture.md).
const (
	MetaName          = "name" // the event type, as watermill's cqrs marshaler expects
	MetaStreamID      = "stream_id"
	MetaStreamVersion = "stream_version"
	MetaPosition      = "position"
	MetaCommitLSN     = "commit_lsn"
	MetaCorrelationID = "correlation_id"
	MetaPartitionKey  = "partition_key"
	MetaPoisonReason  = "poison_reason"
	MetaPoisonGroup   = "poison_group"
	// MetaTraceParent is the W3C traceparent of the trace the event
	// belongs to, when its writer was traced (internal/tracing).
	MetaTraceParent = "traceparent"
)

// CloudEvents 1.0 attributes in the Kafka protocol binding's binary
// mode: each attribute is a header "ce_<name>", the data content type is
// "content-type", and the record's value is the data (the envelope's
// JSON). The mapping is written here rather than taken from the
// CloudEvents Go SDK: the SDK's Kafka binding (protocol/kafka_sarama)
// builds sarama messages through its own producer and event type, where
// CDC publishes watermill messages through watermill-kafka and the
// Marshaler below. Most attributes repeat what an event message says
// already (ce_id its UUID, ce_type its name, ce_subject its stream_id,
// ce_partitionkey its key) or are constants: the Marshaler adds them to
// the record of every message that has a name, sharing the bytes of the
// headers it writes anyway; only ce_time is metadata of its own
// (EventMetadata).
const (
	MetaCESpecVersion = "ce_specversion"
	MetaCEID          = "ce_id"
	MetaCESource      = "ce_source"
	MetaCEType        = "ce_type"
	MetaCETime        = "ce_time"
	MetaCESubject     = "ce_subject"
	MetaCEDataSchema  = "ce_dataschema"
	MetaCEPartition   = "ce_partitionkey"
	MetaContentType   = "content-type"

	// CloudEventsSource is every event's ce_source: the feed service,
	// whose log gives each event its unique ce_id.
	CloudEventsSource = "https://github.com/feedco/feed"
	// CloudEventsDataSchema is every event's ce_dataschema: the
	// envelope's published schema (events/schema, docs/events.md).
	CloudEventsDataSchema = "https://github.com/feedco/feed/blob/main/events/schema/envelope.json"
)

// EventMetadata is the metadata of the message that carries env: what
// consumers route and order by without decoding the payload, and
// ce_time; the Marshaler adds the other CloudEvents attributes
// (docs/events.md, CloudEvents).
func EventMetadata(env *events.Envelope) message.Metadata {
	m := message.Metadata{
		MetaName:          env.Type,
		MetaStreamID:      env.StreamID,
		MetaStreamVersion: strconv.FormatInt(env.StreamVersion, 10),
		MetaPosition:      strconv.FormatInt(env.Position, 10),
		MetaCommitLSN:     env.CommitLSN,
		MetaCorrelationID: env.Metadata.CorrelationID,
		MetaPartitionKey:  strconv.FormatInt(env.AudienceKey, 10),
		MetaCETime:        env.RecordedAt.UTC().Format(time.RFC3339Nano),
	}
	if env.Metadata.TraceParent != "" {
		m[MetaTraceParent] = env.Metadata.TraceParent
	}
	return m
}

// PoisonTopic is where a consumer group parks messages it cannot handle.
func PoisonTopic(topic string) string { return topic + ".poison" }

// saramaVersion is the protocol version spoken to brokers; every version
// from 1.0 to 4.0 works with kfake once sarama is 1.46+.
var saramaVersion = sarama.V3_6_0_0

// PublisherSaramaConfig keeps per-key order with no loss: all in-sync
// replicas acknowledge, idempotent producer, one request in flight, and the
// hash partitioner on the message key.
func PublisherSaramaConfig() *sarama.Config {
	c := wk.DefaultSaramaSyncPublisherConfig()
	c.Version = saramaVersion
	c.ClientID = "feed"
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Idempotent = true
	c.Net.MaxOpenRequests = 1
	c.Producer.Return.Successes = true
	c.Producer.Return.Errors = true
	c.Producer.Partitioner = sarama.NewHashPartitioner
	c.Producer.Retry.Max = 10
	c.Producer.Retry.Backoff = 250 * time.Millisecond
	c.Metadata.Retry.Max = 10
	c.Metadata.Retry.Backoff = 250 * time.Millisecond
	return c
}

// Sarama keeps go-metrics meters and histograms of every request, response
// and fetch (its MetricRegistry), updated on every call whether anyone reads
// them or not; nothing in feed reads them. They are off (go-metrics'
// documented switch, metrics.UseNilMetrics) unless ClientMetrics turns
// them on.
func init() { metrics.UseNilMetrics = true }

// ClientMetrics turns sarama's go-metrics registry on or off for the
// clients created after the call (FEED_KAFKA_CLIENT_METRICS): call it at
// start-up, before any publisher or subscriber exists.
func ClientMetrics(on bool) { metrics.UseNilMetrics = !on }

// Fetch batching of the subscribers: the broker answers a fetch once it
// holds FetchMinBytes for the group's partitions, or after FetchMaxWait.
// Sarama's defaults (1 byte, 500 ms) answer as soon as one message is
// there, and each fetch costs the broker, sarama's fetch loop and its
// decoding, per group. 16 KiB is about 25 event messages; a lone message
// waits at most FetchMaxWait more. An idle group still fetches once per
// FetchMaxWait, each fetch handing every partition's empty block to that
// partition's consumer goroutine: SetFetch trades that idle cost against
// the wait of a lone message (docs/projections.md, "Consumption").
const (
	FetchMinBytes = 16 << 10
	FetchMaxWait  = 20 * time.Millisecond
)

var fetch = struct {
	minBytes int32
	maxWait  time.Duration
}{FetchMinBytes, FetchMaxWait}

// SetFetch sets the fetch batching of the subscribers created after the
// call (FEED_KAFKA_FETCH_MIN_BYTES, FEED_KAFKA_FETCH_MAX_WAIT); zero keeps
// a default. Call it at start-up, before any subscriber exists.
func SetFetch(minBytes int32, maxWait time.Duration) {
	fetch.minBytes, fetch.maxWait = cmp.Or(minBytes, FetchMinBytes), cmp.Or(maxWait, FetchMaxWait)
}

// SubscriberSaramaConfig starts a new group at the oldest offset (the
// watermill default, newest, would skip what was published before the group
// existed), commits offsets every second, and batches fetches
// (FetchMinBytes, FetchMaxWait, or what SetFetch set).
func SubscriberSaramaConfig() *sarama.Config {
	c := wk.DefaultSaramaSubscriberConfig()
	c.Version = saramaVersion
	c.ClientID = "feed"
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.AutoCommit.Enable = true
	c.Consumer.Offsets.AutoCommit.Interval = time.Second
	c.Consumer.Group.Session.Timeout = 10 * time.Second
	c.Consumer.Group.Heartbeat.Interval = time.Second
	c.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRoundRobin()}
	c.Consumer.Fetch.Min = fetch.minBytes
	c.Consumer.MaxWaitTime = fetch.maxWait
	return c
}

// Marshaler puts the message's partition_key metadata in the Kafka key and
// every metadata entry, with watermill's message UUID, in the headers: the
// records watermill-kafka's partitioning marshaler writes, built with one
// allocation for the headers instead of a slice grown per entry (CDC
// marshals every event; see BenchmarkMarshal), and for a message with a
// name (an event) the CloudEvents attributes beside them. Unmarshal is
// watermill's: the CloudEvents headers come back as metadata, which a
// republish does not write twice.
var Marshaler wk.MarshalerUnmarshaler = marshaler{}

type marshaler struct{ wk.DefaultMarshaler }

var uuidHeaderKey = []byte(wk.UUIDHeaderKey)

// The constant CloudEvents headers, shared by every record (the producer
// only reads them).
var (
	ceSpecVersion = sarama.RecordHeader{Key: []byte(MetaCESpecVersion), Value: []byte("1.0")}
	ceSource      = sarama.RecordHeader{Key: []byte(MetaCESource), Value: []byte(CloudEventsSource)}
	ceDataSchema  = sarama.RecordHeader{Key: []byte(MetaCEDataSchema), Value: []byte(CloudEventsDataSchema)}
	ceContentType = sarama.RecordHeader{Key: []byte(MetaContentType), Value: []byte("application/json")}
	ceIDKey       = []byte(MetaCEID)
	ceTypeKey     = []byte(MetaCEType)
	ceSubjectKey  = []byte(MetaCESubject)
	cePartKey     = []byte(MetaCEPartition)
)

// derivedCE says which metadata keys the Marshaler writes itself: a
// consumed message republished (the poison queue) carries them as
// metadata, and they are not written twice.
func derivedCE(key string) bool {
	switch key {
	case MetaCESpecVersion, MetaCEID, MetaCESource, MetaCEType, MetaCESubject, MetaCEDataSchema, MetaCEPartition, MetaContentType:
		return true
	}
	return false
}

func (marshaler) Marshal(topic string, msg *message.Message) (*sarama.ProducerMessage, error) {
	if msg.Metadata.Get(wk.UUIDHeaderKey) != "" {
		return nil, fmt.Errorf("metadata %s is reserved by watermill for message UUID", wk.UUIDHeaderKey)
	}
	k := msg.Metadata.Get(MetaPartitionKey)
	if k == "" {
		return nil, fmt.Errorf("cannot generate partition key: message %s has no %s metadata", msg.UUID, MetaPartitionKey)
	}
	headers := make([]sarama.RecordHeader, 1, len(msg.Metadata)+9)
	id := []byte(msg.UUID)
	headers[0] = sarama.RecordHeader{Key: uuidHeaderKey, Value: id}
	key := []byte(k)
	var name, stream []byte
	for mk, mv := range msg.Metadata {
		if derivedCE(mk) {
			continue
		}
		h := sarama.RecordHeader{Key: []byte(mk), Value: []byte(mv)}
		switch mk {
		case MetaName:
			name = h.Value
		case MetaStreamID:
			stream = h.Value
		}
		headers = append(headers, h)
	}
	if name != nil {
		// An event: the CloudEvents attributes (binary mode).
		headers = append(headers, ceSpecVersion, ceSource, ceDataSchema, ceContentType,
			sarama.RecordHeader{Key: ceIDKey, Value: id}, sarama.RecordHeader{Key: ceTypeKey, Value: name},
			sarama.RecordHeader{Key: cePartKey, Value: key})
		if stream != nil {
			headers = append(headers, sarama.RecordHeader{Key: ceSubjectKey, Value: stream})
		}
	}
	return &sarama.ProducerMessage{
		Topic:   topic,
		Key:     sarama.ByteEncoder(key),
		Value:   sarama.ByteEncoder(msg.Payload),
		Headers: headers,
	}, nil
}

// NewPublisher returns a watermill sync publisher on conn: Publish returns
// once the broker acknowledged.
func NewPublisher(conn Conn, logger watermill.LoggerAdapter) (*wk.Publisher, error) {
	sc := PublisherSaramaConfig()
	if err := conn.Security.ApplySarama(sc); err != nil {
		return nil, fmt.Errorf("create Kafka publisher: %w", err)
	}
	p, err := wk.NewPublisher(wk.PublisherConfig{
		Brokers:               conn.Brokers,
		Marshaler:             Marshaler,
		OverwriteSaramaConfig: sc,
	}, logger)
	if err != nil {
		return nil, fmt.Errorf("create Kafka publisher: %w", err)
	}
	return p, nil
}

// NewSubscriber returns a watermill subscriber in consumer group group.
// WARNING: the group name is where the committed offsets live; renaming it
// replays the whole topic into that consumer.
func NewSubscriber(conn Conn, group string, logger watermill.LoggerAdapter) (*wk.Subscriber, error) {
	sc := SubscriberSaramaConfig()
	if err := conn.Security.ApplySarama(sc); err != nil {
		return nil, fmt.Errorf("create Kafka subscriber for group %s: %w", group, err)
	}
	s, err := wk.NewSubscriber(wk.SubscriberConfig{
		Brokers:               conn.Brokers,
		Unmarshaler:           Marshaler,
		OverwriteSaramaConfig: sc,
		ConsumerGroup:         group,
		// Watermill reconnects every ~2 ms by default when a group keeps
		// failing: back off instead of burning a core.
		ReconnectRetrySleep: 2 * time.Second,
		NackResendSleep:     200 * time.Millisecond,
	}, logger)
	if err != nil {
		return nil, fmt.Errorf("create Kafka subscriber for group %s: %w", group, err)
	}
	return s, nil
}

// Logger adapts a slog logger for watermill, with watermill's per-handler
// and per-subscriber lifecycle chatter (its Info level) demoted to Debug;
// its warnings and errors stay as they are. Trace, Debug and Info are
// checked against the logger's level first (gatedLogger).
func Logger(l *slog.Logger) watermill.LoggerAdapter {
	if l == nil {
		l = slog.Default()
	}
	return gatedLogger{LoggerAdapter: PlainLogger(l), l: l}
}

// PlainLogger is Logger without the level check in front: watermill's
// slog adapter alone.
func PlainLogger(l *slog.Logger) watermill.LoggerAdapter {
	return watermill.NewSlogLoggerWithLevelMapping(l, map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug})
}

// gatedLogger puts the level check in front of watermill's slog adapter,
// which turns the fields into slog arguments (a slice and a boxing per
// field) before slog checks the level: the router logs every message at
// Trace, and the subscriber at Trace and Debug, so at the usual Info level
// that was work for nothing on every delivery (BenchmarkLoggerTrace: the
// adapter alone against this).
type gatedLogger struct {
	watermill.LoggerAdapter
	l *slog.Logger
}

func (g gatedLogger) enabled(level slog.Level) bool { return g.l.Enabled(context.Background(), level) }

// Trace implements watermill.LoggerAdapter.
func (g gatedLogger) Trace(msg string, fields watermill.LogFields) {
	if g.enabled(watermill.LevelTrace) {
		g.LoggerAdapter.Trace(msg, fields)
	}
}

// Debug implements watermill.LoggerAdapter.
func (g gatedLogger) Debug(msg string, fields watermill.LogFields) {
	if g.enabled(slog.LevelDebug) {
		g.LoggerAdapter.Debug(msg, fields)
	}
}

// Info implements watermill.LoggerAdapter (mapped to Debug by Logger).
func (g gatedLogger) Info(msg string, fields watermill.LogFields) {
	if g.enabled(slog.LevelDebug) {
		g.LoggerAdapter.Info(msg, fields)
	}
}

// With implements watermill.LoggerAdapter.
func (g gatedLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return gatedLogger{LoggerAdapter: g.LoggerAdapter.With(fields), l: g.l}
}
