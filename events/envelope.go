package events

import (
	"encoding/json"
	"time"
)

// Metadata travels with every event: who acted and which request caused it.
type Metadata struct {
	CorrelationID string `json:"correlationId,omitempty"`
	CausationID   string `json:"causationId,omitempty"`
	// Actor is the acting user's id ("" for system actions).
	Actor string `json:"actor,omitempty"`
	// TraceParent is the W3C Trace Context traceparent of the span that
	// wrote the event (the HTTP request's), when it was traced: CDC and
	// the projectors continue that trace (docs/events.md, Tracing).
	TraceParent string `json:"traceparent,omitempty"`
}

// Envelope is one stored event: the unit the log holds, CDC publishes and
// projectors consume. Its JSON field names are a public contract (Kafka
// payloads, `feed events` output).
type Envelope struct {
	// EventID is a UUID, unique across the log; Kafka message id too.
	EventID string `json:"eventId"`
	// Position is the log's bigserial: unique, but not commit order.
	Position      int64           `json:"position,string"`
	StreamID      string          `json:"streamId"`
	StreamVersion int64           `json:"streamVersion"`
	Type          string          `json:"type"`
	Payload       json.RawMessage `json:"payload"`
	Metadata      Metadata        `json:"metadata"`
	RecordedAt    time.Time       `json:"recordedAt"`
	// CommitLSN is the commit LSN of the transaction that wrote the event,
	// as PostgreSQL prints it ("16/B374D848"); set by CDC, empty otherwise.
	CommitLSN string `json:"commitLsn,omitempty"`
	// AudienceKey is the account the event is keyed by (see Event).
	AudienceKey int64 `json:"audienceKey,string"`
}
