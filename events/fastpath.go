package events

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// audienceField names, per current event type, the payload field holding
// the audience key (docs/architecture.md). TestAudienceFastPath checks it
// against each type's AudienceKey method.
var audienceField = map[string]string{
	TypeUserRegistered: "userId",
	TypePostCreated:    "authorId",
	TypePostDeleted:    "authorId",
	TypePostEdited:     "authorId",
	TypeFollowed:       "followeeId",
	TypeUnfollowed:     "followeeId",
	TypeMuted:          "mutedId",
	TypeUnmuted:        "mutedId",
	TypeBlocked:        "blockedId",
	TypeUnblocked:      "blockedId",
	TypePostReposted:   "reposterId",
	TypePostUnreposted: "reposterId",
	TypePostLiked:      "authorId",
	TypePostUnliked:    "authorId",
}

// AudienceKeyOf returns the audience key of a stored event (its Kafka key,
// docs/architecture.md) without decoding the whole payload when it can:
// current types take a fast path that reads one top-level field; other
// types (old versions with upcasters), escaped or odd values go through
// the codec, and an event the codec cannot decode gives 0 and its error.
// The fast path does not validate the rest of the payload: consumers
// decode it and deal with what they cannot. Nor does it look for a second
// key of the same name (jsonb keeps one). The plain way, Decode and the
// event's AudienceKey, is what it falls back to; TestAudienceFastPath
// holds the two equal for every type, and BenchmarkEventToMessage in
// cdc/decode_test.go measures them (audience/fast against audience/codec).
func (c *Codec) AudienceKeyOf(typ string, payload []byte) (int64, error) {
	if _, up := c.upcasters[typ]; !up {
		if field, ok := audienceField[typ]; ok {
			if v, ok := topLevelString(payload, field); ok {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil {
					return n, nil
				}
			}
		}
	}
	ev, err := c.Decode(typ, payload)
	if err != nil {
		return 0, err
	}
	return ev.AudienceKey(), nil
}

// ParseMetadata decodes an envelope's metadata object as json.Unmarshal
// would, with a fast path for the flat object of plain strings that the
// commands write (and PostgreSQL's jsonb prints): CDC parses one per event.
// The input is expected to be valid JSON (it comes from jsonb): the fast
// path does not reject every malformed value that it skips. json.Unmarshal
// is the fallback; TestParseMetadata and FuzzParseMetadata hold the two
// equal, and BenchmarkEventToMessage in cdc/decode_test.go measures them
// (metadata/fast against metadata/json).
func ParseMetadata(b []byte) (Metadata, error) {
	var m Metadata
	if parseMetadataFast(b, &m) {
		return m, nil
	}
	m = Metadata{}
	err := json.Unmarshal(b, &m)
	return m, err
}

// parseMetadataFast fills m from a flat JSON object whose known fields are
// strings without escapes; false means "decode properly" (anything else:
// escapes, a known field of another type, a key that matches a field only
// case-insensitively, invalid JSON).
func parseMetadataFast(b []byte, m *Metadata) bool {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipWS(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		ks, ke, ok := plainString(b, i)
		if !ok {
			return false
		}
		i = skipWS(b, ke+1)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipWS(b, i+1)
		var dst *string
		switch k := string(b[ks:ke]); k {
		case "correlationId":
			dst = &m.CorrelationID
		case "causationId":
			dst = &m.CausationID
		case "actor":
			dst = &m.Actor
		case "traceparent":
			dst = &m.TraceParent
		default:
			if strings.EqualFold(k, "correlationId") || strings.EqualFold(k, "causationId") || strings.EqualFold(k, "actor") ||
				strings.EqualFold(k, "traceparent") {
				return false
			}
		}
		if dst != nil {
			if i >= len(b) || b[i] != '"' {
				return false
			}
			vs, ve, ok := plainString(b, i)
			if !ok || !cleanString(b[vs:ve]) {
				return false
			}
			*dst = string(b[vs:ve])
			i = ve + 1
		} else if i = skipValue(b, i); i < 0 {
			return false
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return skipWS(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// topLevelString finds key in a JSON object and returns its value when it
// is a string without escapes; ok is false otherwise (the caller then
// decodes properly). The input is valid JSON (it comes from jsonb).
func topLevelString(b []byte, key string) (string, bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return "", false
	}
	i++
	for {
		i = skipWS(b, i)
		if i >= len(b) || b[i] != '"' {
			return "", false
		}
		ks, ke, ok := plainString(b, i)
		if !ok {
			return "", false
		}
		i = skipWS(b, ke+1)
		if i >= len(b) || b[i] != ':' {
			return "", false
		}
		i = skipWS(b, i+1)
		if string(b[ks:ke]) == key {
			if i >= len(b) || b[i] != '"' {
				return "", false
			}
			vs, ve, ok := plainString(b, i)
			if !ok {
				return "", false
			}
			return string(b[vs:ve]), true
		}
		if i = skipValue(b, i); i < 0 {
			return "", false
		}
		i = skipWS(b, i)
		if i >= len(b) || b[i] != ',' {
			return "", false
		}
		i++
	}
}

// cleanString reports whether s is valid UTF-8 without control characters:
// json.Unmarshal would take it as it is.
func cleanString(s []byte) bool {
	for _, c := range s {
		if c < 0x20 {
			return false
		}
	}
	return utf8.Valid(s)
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainString returns the content bounds of the string starting at b[i]
// ('"'); ok is false if it has escapes or does not end.
func plainString(b []byte, i int) (start, end int, ok bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			return 0, 0, false
		case '"':
			return i + 1, j, true
		}
	}
	return 0, 0, false
}

// skipValue returns the index just past the value starting at b[i], or -1.
func skipValue(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch c := b[i]; c {
		case '"':
			i++
			for i < len(b) && b[i] != '"' {
				if b[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(b) {
				return -1
			}
			i++
		case '{', '[':
			depth++
			i++
		case '}', ']':
			if depth == 0 {
				return i
			}
			depth--
			i++
		case ',':
			if depth == 0 {
				return i
			}
			i++
		default:
			i++
		}
		if depth == 0 && i < len(b) && (b[i] == ',' || b[i] == '}' || b[i] == ']') {
			return i
		}
	}
	if depth == 0 {
		return i
	}
	return -1
}
