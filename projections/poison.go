package projections

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/feedco/feed/internal/kafka"
)

// poisonMiddleware parks a message that cannot be handled on the poison
// topic, with the reason and the consumer group in its metadata, and acks
// it so the partition moves on. It sits outside Retry and Recoverer, so it
// sees what retries could not fix: permanent errors (undecodable messages)
// at once, and anything else that kept failing or panicking.
//
// Transient infrastructure errors (Redis or PostgreSQL unreachable, time-outs)
// are not poison: they are returned, the message is nacked and redelivered
// after a pause, and the partition waits (its lag grows, visibly) rather
// than skipping events during an outage.
func poisonMiddleware(pub message.Publisher, topic, group string, m *Metrics, projector string, draining func() bool) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err == nil {
				return out, nil
			}
			if !errors.Is(err, ErrPermanent) && (isTransient(err) || draining()) {
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

// isTransient reports whether err looks like an outage that waiting fixes.
func isTransient(err error) bool {
	var ne net.Error
	switch {
	case errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, context.DeadlineExceeded),
		pgconn.Timeout(err), pgconn.SafeToRetry(err):
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// Class 08 connection exceptions, 53 insufficient resources,
		// 57P0x operator intervention (shutdown), 40001/40P01 retryable.
		switch {
		case len(pe.Code) == 5 && (pe.Code[:2] == "08" || pe.Code[:2] == "53" || pe.Code[:4] == "57P0"),
			pe.Code == "40001", pe.Code == "40P01":
			return true
		}
	}
	msg := err.Error()
	for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "redis: connection pool timeout", "redis: client is closed"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
