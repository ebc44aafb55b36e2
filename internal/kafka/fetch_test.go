package kafka

import (
	"testing"
	"time"
)

// SetFetch reaches the subscribers' sarama configuration; zero keeps the
// default.
func TestSetFetch(t *testing.T) {
	t.Cleanup(func() { SetFetch(0, 0) })
	if c := SubscriberSaramaConfig(); c.Consumer.Fetch.Min != FetchMinBytes || c.Consumer.MaxWaitTime != FetchMaxWait {
		t.Fatalf("defaults: %d, %v", c.Consumer.Fetch.Min, c.Consumer.MaxWaitTime)
	}
	SetFetch(1, 300*time.Millisecond)
	if c := SubscriberSaramaConfig(); c.Consumer.Fetch.Min != 1 || c.Consumer.MaxWaitTime != 300*time.Millisecond {
		t.Fatalf("1, 300ms: %d, %v", c.Consumer.Fetch.Min, c.Consumer.MaxWaitTime)
	}
	SetFetch(0, 0)
	if c := SubscriberSaramaConfig(); c.Consumer.Fetch.Min != FetchMinBytes || c.Consumer.MaxWaitTime != FetchMaxWait {
		t.Fatalf("reset: %d, %v", c.Consumer.Fetch.Min, c.Consumer.MaxWaitTime)
	}
}
