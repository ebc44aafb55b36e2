package events

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends the JSON of e byte for byte as json.Marshal(e) prints
// it (field order, omitempty, string-encoded int64s, HTML-safe escaping),
// without reflection: CDC and the replay encode every event, and
// json.Marshal(e), the plain way, takes about ten times the CPU and ten
// allocations (BenchmarkAppendJSON in jsonenc_test.go).
// TestAppendJSONMatchesEncodingJSON and FuzzAppendJSON hold the two equal.
//
// With rawPayload the payload is copied as it is (PostgreSQL's jsonb text:
// the same JSON value, possibly with other whitespace) instead of compacted
// and HTML-escaped as json.Marshal does with a json.RawMessage. The payload
// must be valid JSON either way; it is not validated.
func (e *Envelope) AppendJSON(dst []byte, rawPayload bool) ([]byte, error) {
	dst = append(dst, `{"eventId":`...)
	dst = AppendJSONString(dst, e.EventID)
	dst = append(dst, `,"position":"`...)
	dst = strconv.AppendInt(dst, e.Position, 10)
	dst = append(dst, `","streamId":`...)
	dst = AppendJSONString(dst, e.StreamID)
	dst = append(dst, `,"streamVersion":`...)
	dst = strconv.AppendInt(dst, e.StreamVersion, 10)
	dst = append(dst, `,"type":`...)
	dst = AppendJSONString(dst, e.Type)
	dst = append(dst, `,"payload":`...)
	if rawPayload && len(e.Payload) > 0 {
		dst = append(dst, e.Payload...)
	} else {
		dst = AppendCompactJSON(dst, e.Payload)
	}
	dst = append(dst, `,"metadata":{`...)
	sep := false
	for _, f := range [...]struct{ k, v string }{
		{`"correlationId":`, e.Metadata.CorrelationID},
		{`"causationId":`, e.Metadata.CausationID},
		{`"actor":`, e.Metadata.Actor},
		{`"traceparent":`, e.Metadata.TraceParent},
	} {
		if f.v == "" {
			continue
		}
		if sep {
			dst = append(dst, ',')
		}
		sep = true
		dst = append(dst, f.k...)
		dst = AppendJSONString(dst, f.v)
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
		dst = AppendJSONString(dst, e.CommitLSN)
	}
	dst = append(dst, `,"audienceKey":"`...)
	dst = strconv.AppendInt(dst, e.AudienceKey, 10)
	dst = append(dst, `"}`...)
	return dst, nil
}

// AppendCompactJSON appends a raw JSON value compacted and HTML-escaped, as
// json.Marshal does with a json.RawMessage (null when empty): a single pass
// that drops whitespace outside strings and escapes <, >, & and
// U+2028/U+2029 inside them. The value must be valid JSON (from jsonb or a
// decoded record); it is not validated.
func AppendCompactJSON(dst []byte, raw json.RawMessage) []byte {
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
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
				start = i + 1
			case c == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && raw[i+2]&^1 == 0xA8:
				dst = append(dst, raw[start:i]...)
				dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[raw[i+2]&0xF])
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

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s as a JSON string the way encoding/json does
// with HTML escaping on: <, >, & and U+2028/U+2029 as \u escapes, control
// characters escaped, invalid UTF-8 as U+FFFD.
func AppendJSONString(dst []byte, s string) []byte {
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
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
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
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
