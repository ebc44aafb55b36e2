package projections_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/testkit/kafkatest"
)

// A consumer group that never committed (not even created yet) lags by
// everything the topic retains; `feed status` must say so, not fail.
func TestConsumerLagOfGroupThatNeverCommitted(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	topic := b.Topic(t, 3)
	var msgs []*message.Message
	for i := 0; i < 5; i++ {
		m := message.NewMessage(strconv.Itoa(i), []byte("x"))
		m.Metadata.Set(kafka.MetaPartitionKey, strconv.Itoa(i))
		msgs = append(msgs, m)
	}
	b.Publish(t, topic, msgs...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lags, err := projections.ConsumerLag(ctx, b.Conn(), topic, []string{"never-joined"})
	if err != nil {
		t.Fatalf("lag of a new group: %v", err)
	}
	if lags["never-joined"] != 5 {
		t.Fatalf("lag = %d, want 5", lags["never-joined"])
	}
}
