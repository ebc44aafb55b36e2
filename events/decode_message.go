package events

import (
	"encoding/json"
	"strings"
	"time"
)

// envelopeInto is Envelope with the payload decoded in place: Payload holds
// a pointer to the event that json.Unmarshal fills while it reads the
// envelope (encoding/json decodes into the pointer an interface holds).
type envelopeInto struct {
	EventID       string    `json:"eventId"`
	Position      int64     `json:"position,string"`
	StreamID      string    `json:"streamId"`
	StreamVersion int64     `json:"streamVersion"`
	Type          string    `json:"type"`
	Payload       any       `json:"payload"`
	Metadata      Metadata  `json:"metadata"`
	RecordedAt    time.Time `json:"recordedAt"`
	CommitLSN     string    `json:"commitLsn,omitempty"`
	AudienceKey   int64     `json:"audienceKey,string"`
}

// newEvent returns a pointer to a zero event of a current type, nil for
// any other type.
func newEvent(typ string) Event {
	switch typ {
	case TypeUserRegistered:
		return &UserRegistered{}
	case TypePostCreated:
		return &PostCreated{}
	case TypePostDeleted:
		return &PostDeleted{}
	case TypePostEdited:
		return &PostEdited{}
	case TypeFollowed:
		return &Followed{}
	case TypeUnfollowed:
		return &Unfollowed{}
	case TypeMuted:
		return &Muted{}
	case TypeUnmuted:
		return &Unmuted{}
	case TypeBlocked:
		return &Blocked{}
	case TypeUnblocked:
		return &Unblocked{}
	case TypePostReposted:
		return &PostReposted{}
	case TypePostUnreposted:
		return &PostUnreposted{}
	case TypePostLiked:
		return &PostLiked{}
	case TypePostUnliked:
		return &PostUnliked{}
	}
	return nil
}

// DecodeEnvelopeJSON decodes an envelope's JSON (a Kafka message's
// payload, as CDC writes it) and its payload's event, in one
// json.Unmarshal, when typ, the event type the message says it carries
// (its "name" metadata, known before decoding), is a current type without
// an upcaster: the payload is decoded straight into that event, with no
// json.RawMessage copied out of the envelope and parsed again. The
// returned envelope's Payload is then nil (projectors use the decoded
// event). Anything else (another type, an upcaster, an envelope whose
// type differs from typ, a payload key missing, repeated, escaped or in
// another case, a null payload, any decoding error) takes the plain way, json.Unmarshal of the Envelope then DecodeEnvelope, which
// also gives the errors. TestDecodeEnvelopeJSON and
// FuzzDecodeEnvelopeJSON hold the two equal; BenchmarkDecodeEnvelopeJSON
// measures them (one-pass against plain).
func (c *Codec) DecodeEnvelopeJSON(typ string, b []byte) (Envelope, Event, error) {
	if _, up := c.upcasters[typ]; !up {
		if ev := newEvent(typ); ev != nil {
			w := envelopeInto{Payload: ev}
			if onePayloadKey(b) && json.Unmarshal(b, &w) == nil && w.Type == typ && w.Payload == ev {
				return Envelope{
					EventID:       w.EventID,
					Position:      w.Position,
					StreamID:      w.StreamID,
					StreamVersion: w.StreamVersion,
					Type:          w.Type,
					Metadata:      w.Metadata,
					RecordedAt:    w.RecordedAt,
					CommitLSN:     w.CommitLSN,
					AudienceKey:   w.AudienceKey,
				}, deref(ev), nil
			}
		}
	}
	return c.decodeEnvelopeJSONPlain(b)
}

// decodeEnvelopeJSONPlain is the plain way: the envelope with its payload
// as raw JSON, then the codec on that payload.
func (c *Codec) decodeEnvelopeJSONPlain(b []byte) (Envelope, Event, error) {
	var env Envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return env, nil, err
	}
	ev, err := c.DecodeEnvelope(env)
	return env, ev, err
}

// onePayloadKey reports whether the JSON object b has exactly one
// top-level key that encoding/json would match to the payload field, and
// it is spelled "payload" without escapes: then decoding into the event in
// place gives what the plain way gives (a missing key would leave the zero
// event where the plain way fails, a repeated one would merge two objects
// where the plain way keeps the last). Keys with escapes answer false.
func onePayloadKey(b []byte) bool {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	seen := false
	i++
	for {
		i = skipWS(b, i)
		if i < len(b) && b[i] == '}' {
			return seen
		}
		if i >= len(b) || b[i] != '"' {
			return false
		}
		ks, ke, ok := plainString(b, i)
		if !ok {
			return false
		}
		if k := b[ks:ke]; len(k) == len("payload") && strings.EqualFold(string(k), "payload") {
			if seen || string(k) != "payload" {
				return false
			}
			seen = true
		}
		i = skipWS(b, ke+1)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		if i = skipValue(b, skipWS(b, i+1)); i < 0 {
			return false
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i++
		case '}':
			return seen
		default:
			return false
		}
	}
}
