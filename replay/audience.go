package replay

import (
	"strconv"

	"github.com/feedco/feed/events"
)

// audienceField names, per current event type, the payload field holding
// the audience key (docs/architecture.md). TestAudienceFastPath checks it
// against each type's AudienceKey method.
var audienceField = map[string]string{
	events.TypeUserRegistered: "userId",
	events.TypePostCreated:    "authorId",
	events.TypePostDeleted:    "authorId",
	events.TypeFollowed:       "followeeId",
	events.TypeUnfollowed:     "followeeId",
}

// audienceKey returns the audience key of a stored event as CDC computes
// it (0 for a type this binary cannot decode). Current types take a fast
// path that reads one top-level field without decoding the whole payload;
// other types (old versions with upcasters) go through the codec.
func audienceKey(typ string, payload []byte) int64 {
	if field, ok := audienceField[typ]; ok {
		if v, ok := topLevelString(payload, field); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return n
			}
		}
	}
	ev, err := events.DefaultCodec.Decode(typ, payload)
	if err != nil {
		return 0
	}
	return ev.AudienceKey()
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
