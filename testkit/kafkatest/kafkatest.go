// Package kafkatest starts real Kafka-protocol brokers (kfake, persistent)
// for tests, on free ports, gives each test its own topic, and publishes to
// it as CDC does.
package kafkatest

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/testkit/testenv"
)

// Broker is a test's embedded broker.
type Broker struct {
	*kafka.Embedded
	Addr    string
	DataDir string
	// Config is the rest of the broker's configuration (brokers, SASL,
	// TLS, client security), kept across Restart.
	Config kafka.EmbeddedConfig
}

// FreeAddr returns a 127.0.0.1 address with a port free right now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// Start runs a broker with a data directory under t.TempDir, closed at
// cleanup.
func Start(t testing.TB) *Broker {
	t.Helper()
	return StartWith(t, kafka.EmbeddedConfig{})
}

// StartWith is Start with cfg's brokers, SASL, TLS and client security
// (its Addr and DataDir are chosen here). Several brokers listen on free
// ports chosen by the system.
func StartWith(t testing.TB, cfg kafka.EmbeddedConfig) *Broker {
	t.Helper()
	b := &Broker{Addr: FreeAddr(t), DataDir: t.TempDir(), Config: cfg}
	if cfg.Brokers > 1 {
		b.Addr = "127.0.0.1:0"
	}
	b.Restart(t)
	t.Cleanup(func() {
		if b.Embedded != nil {
			b.Close()
		}
	})
	return b
}

// Stop closes the broker (its state stays in DataDir).
func (b *Broker) Stop() {
	if b.Embedded != nil {
		b.Close()
		b.Embedded = nil
	}
}

// Restart starts the broker again on the same address and data directory.
func (b *Broker) Restart(t testing.TB) {
	t.Helper()
	var err error
	for i := 0; i < 50; i++ { // the port may linger briefly after Stop
		cfg := b.Config
		cfg.Addr, cfg.DataDir = b.Addr, b.DataDir
		b.Embedded, err = kafka.StartEmbedded(context.Background(), cfg)
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("start embedded broker: %v", err)
}

// Topic creates a unique topic with the given partitions and returns its name.
func (b *Broker) Topic(t testing.TB, partitions int32) string {
	t.Helper()
	name := testenv.RandomName("feedtest.")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafka.EnsureTopics(ctx, b.Conn(), map[string]int32{name: partitions, kafka.PoisonTopic(name): 1}); err != nil {
		t.Fatal(err)
	}
	return name
}

// Publish sends msgs to topic through the project's publisher, each
// acknowledged by the broker before the next, and closes the publisher.
func (b *Broker) Publish(t testing.TB, topic string, msgs ...*message.Message) {
	t.Helper()
	pub, err := kafka.NewPublisher(b.Conn(), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := pub.Publish(topic, m); err != nil {
			_ = pub.Close()
			t.Fatalf("publish %s: %v", m.UUID, err)
		}
	}
	if err := pub.Close(); err != nil {
		t.Fatalf("close publisher: %v", err)
	}
}

// PublishEvents publishes envelopes to topic as CDC does (EventMessage).
func (b *Broker) PublishEvents(t testing.TB, topic string, envs ...events.Envelope) {
	t.Helper()
	msgs := make([]*message.Message, len(envs))
	for i, e := range envs {
		msgs[i] = EventMessage(t, e)
	}
	b.Publish(t, topic, msgs...)
}

// EventMessage is env in the Kafka contract's format (docs/architecture.md):
// the event id as the message UUID, the envelope's JSON as payload, and the
// contract's metadata, the audience key as the partition key.
func EventMessage(t testing.TB, env events.Envelope) *message.Message {
	t.Helper()
	payload, err := json.Marshal(env)
	if err != nil {
		t.Fatalf("encode envelope %s: %v", env.EventID, err)
	}
	m := message.NewMessage(env.EventID, payload)
	m.Metadata = kafka.EventMetadata(&env)
	return m
}
