package projections

import (
	"errors"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/internal/transient"
)

// poisonMiddleware parks a message that cannot be handled on the poison
// topic, with the reason and the consumer group in its metadata, and acks
// it so the partition moves on. It sits outside Retry and Recoverer, so it
// sees what retries could not fix: permanent errors (undecodable messages)
// at once, and anything else that kept failing or panicking.
//
// Transient errors (transient.Retryable: Redis or PostgreSQL down,
// time-outs, a lost serialization race) are not poison: they are
// returned, the message is nacked and redelivered after a pause, and the
// partition waits (its lag grows, visibly) rather than skipping events
// during an outage.
func poisonMiddleware(pub message.Publisher, topic, group string, m *Metrics, projector string, draining func() bool) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err == nil {
				return out, nil
			}
			if !errors.Is(err, ErrPermanent) && (transient.Retryable(err) || draining()) {
				m.outcome(projector, msg.Metadata.Get(kafka.MetaName), "retry_later")
				return nil, err
			}
			p := message.NewMessage(msg.UUID, msg.Payload)
			for k, v := range msg.Metadata {
				p.Metadata.Set(k, v)
			}
			p.Metadata.Set(kafka.MetaPoisonReason, err.Error())
			p.Metadata.Set(kafka.MetaPoisonGroup, group)
			if p.Metadata.Get(kafka.MetaPartitionKey) == "" {
				p.Metadata.Set(kafka.MetaPartitionKey, "0")
			}
			if perr := pub.Publish(kafka.PoisonTopic(topic), p); perr != nil {
				return nil, errors.Join(err, perr)
			}
			m.outcome(projector, msg.Metadata.Get(kafka.MetaName), "poisoned")
			return nil, nil
		}
	}
}
