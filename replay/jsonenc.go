package replay

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/feedco/feed/events"
)

// appendEnvelope appends e as one JSON line, byte for byte what
// json.Marshal(e) prints (the field order and escaping of encoding/json,
// HTML-safe), without reflection: the replay's hot path. TestAppendEnvelope
// checks the equivalence.
func appendEnvelope(dst []byte, e *events.Envelope) ([]byte, error) {
	dst = append(dst, `{"eventId":`...)
	dst = appendString(dst, e.EventID)
	dst = append(dst, `,"position":"`...)
	dst = strconv.AppendInt(dst, e.Position, 10)
	dst = append(dst, `","streamId":`...)
	dst = appendString(dst, e.StreamID)
	dst = append(dst, `,"streamVersion":`...)
	dst = strconv.AppendInt(dst, e.StreamVersion, 10)
	dst = append(dst, `,"type":`...)
	dst = appendString(dst, e.Type)
	dst = append(dst, `,"payload":`...)
	dst = appendRaw(dst, e.Payload)
	dst = append(dst, `,"metadata":{`...)
	sep := false
	for _, f := range [...]struct{ k, v string }{
		{`"correlationId":`, e.Metadata.CorrelationID},
		{`"causationId":`, e.Metadata.CausationID},
		{`"actor":`, e.Metadata.Actor},
	} {
		if f.v == "" {
			continue
		}
		if sep {
			dst = append(dst, ',')
		}
		sep = true
		dst = append(dst, f.k...)
		dst = appendString(dst, f.v)
	}
	dst = append(dst, `},"recordedAt":`...)
	if y := e.RecordedAt.Year(); y < 0 || y >= 10000 {
		b, err := json.Marshal(e.RecordedAt) // the error json.Marshal gives
		if err != nil {
			return dst, err
		}
		dst = append(dst, b...)
	} else {
		dst = append(dst, '"')
		dst = e.RecordedAt.AppendFormat(dst, time.RFC3339Nano)
		dst = append(dst, '"')
	}
	if e.CommitLSN != "" {
		dst = append(dst, `,"commitLsn":`...)
		dst = appendString(dst, e.CommitLSN)
	}
	dst = append(dst, `,"audienceKey":"`...)
	dst = strconv.AppendInt(dst, e.AudienceKey, 10)
	dst = append(dst, `"}`...)
	return dst, nil
}

// appendRaw appends a raw JSON value compacted and HTML-escaped, as
// json.Marshal does with a json.RawMessage; null when empty. The value must
// be valid JSON (it comes from jsonb or from a decoded Kafka record): this
// is a single pass that drops whitespace outside strings and escapes <, >,
// & and U+2028/U+2029 inside them, without validating.
func appendRaw(dst []byte, raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return append(dst, "null"...)
	}
	in := false
	start := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if in {
			switch {
			case c == '\\':
				i++ // the escaped byte is copied as is
			case c == '"':
				in = false
			case c == '<' || c == '>' || c == '&':
				dst = append(dst, raw[start:i]...)
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
				start = i + 1
			case c == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && raw[i+2]&^1 == 0xA8:
				dst = append(dst, raw[start:i]...)
				dst = append(dst, '\\', 'u', '2', '0', '2', hex[raw[i+2]&0xF])
				i += 2
				start = i + 1
			}
			continue
		}
		switch c {
		case '"':
			in = true
		case ' ', '\t', '\n', '\r':
			dst = append(dst, raw[start:i]...)
			start = i + 1
		}
	}
	return append(dst, raw[start:]...)
}

const hex = "0123456789abcdef"

// appendString appends s as a JSON string the way encoding/json does with
// HTML escaping on: <, >, & and U+2028/U+2029 as \u escapes, invalid UTF-8
// as U+FFFD.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
