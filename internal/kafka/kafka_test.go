package kafka_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/testkit/kafkatest"
)

// Messages published through watermill with one key land on one partition,
// in order, readable by a plain Kafka client, and a new watermill group
// starts from the oldest offset; a topic survives a broker restart.
func TestPublishSubscribeOrderAndRestart(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	topic := b.Topic(t, 4)
	const n = 200
	var msgs []*message.Message
	for i := 0; i < n; i++ {
		m := message.NewMessage(strconv.Itoa(i), []byte(strconv.Itoa(i)))
		m.Metadata.Set(kafka.MetaPartitionKey, strconv.Itoa(i%3))
		msgs = append(msgs, m)
	}
	b.Publish(t, topic, msgs...)

	b.Stop()
	b.Restart(t)

	sub, err := kafka.NewSubscriber(b.Conn(), "g-"+topic, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int{}
	for got := 0; got < n; got++ {
		select {
		case m := <-ch:
			k := m.Metadata.Get(kafka.MetaPartitionKey)
			v, _ := strconv.Atoi(string(m.Payload))
			if prev, ok := last[k]; ok && v <= prev {
				t.Fatalf("key %s: %d after %d", k, v, prev)
			}
			last[k] = v
			m.Ack()
		case <-ctx.Done():
			t.Fatalf("got %d of %d messages", got, n)
		}
	}

	// A plain Kafka client sees the same records, keyed.
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	count := 0
	for count < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("kgo read %d of %d", count, n)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if len(r.Key) == 0 {
				t.Errorf("record without key")
			}
			count++
		})
	}
}
