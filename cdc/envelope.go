package cdc

import "github.com/feedco/feed/events"

// appendEnvelope appends the Kafka payload of env: the JSON json.Marshal
// would print, except that the payload is copied as PostgreSQL's jsonb
// printed it (the same JSON value) instead of being compacted.
// TestAppendEnvelope and FuzzAppendEnvelope hold it equal to json.Marshal.
func appendEnvelope(b []byte, env *events.Envelope) []byte {
	// A commit timestamp is always within years 0..9999, the one case
	// AppendJSON could fail on.
	b, _ = env.AppendJSON(b, true)
	return b
}
