package replay

import "github.com/feedco/feed/events"

// appendEnvelope appends e as one JSON line, byte for byte what
// json.Marshal(e) prints, without reflection: the replay's hot path.
// TestAppendEnvelope checks the equivalence.
func appendEnvelope(dst []byte, e *events.Envelope) ([]byte, error) {
	return e.AppendJSON(dst, false)
}
