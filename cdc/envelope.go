package cdc

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/feedco/feed/events"
)

// appendEnvelope appends the JSON of env exactly as encoding/json writes an
// events.Envelope (same field names, order, string-encoded int64s and
// omitempty), except that the payload is copied as PostgreSQL's jsonb
// printed it instead of being compacted: the same JSON value. Reflection
// and compaction were a third of CDC's CPU per event; TestAppendEnvelope
// and FuzzAppendEnvelope hold it equal to json.Marshal.
func appendEnvelope(b []byte, env *events.Envelope) []byte {
	b = append(b, `{"eventId":`...)
	b = appendString(b, env.EventID)
	b = append(b, `,"position":"`...)
	b = strconv.AppendInt(b, env.Position, 10)
	b = append(b, `","streamId":`...)
	b = appendString(b, env.StreamID)
	b = append(b, `,"streamVersion":`...)
	b = strconv.AppendInt(b, env.StreamVersion, 10)
	b = append(b, `,"type":`...)
	b = appendString(b, env.Type)
	b = append(b, `,"payload":`...)
	if len(env.Payload) == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, env.Payload...)
	}
	b = append(b, `,"metadata":{`...)
	sep := ""
	for _, f := range [...]struct{ name, v string }{
		{"correlationId", env.Metadata.CorrelationID},
		{"causationId", env.Metadata.CausationID},
		{"actor", env.Metadata.Actor},
	} {
		if f.v == "" {
			continue
		}
		b = append(b, sep...)
		b = append(b, '"')
		b = append(b, f.name...)
		b = append(b, `":`...)
		b = appendString(b, f.v)
		sep = ","
	}
	b = append(b, `},"recordedAt":"`...)
	b = env.RecordedAt.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if env.CommitLSN != "" {
		b = append(b, `,"commitLsn":`...)
		b = appendString(b, env.CommitLSN)
	}
	b = append(b, `,"audienceKey":"`...)
	b = strconv.AppendInt(b, env.AudienceKey, 10)
	b = append(b, `"}`...)
	return b
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string the way encoding/json does:
// HTML-sensitive characters, control characters, U+2028/2029 escaped and
// invalid UTF-8 replaced by U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
