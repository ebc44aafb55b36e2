package queries

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/readmodel"
)

// key orders feed entries in events.FeedKey's order: newest first means
// descending (ms, id). It is the position of a post in every feed and the
// content of a cursor.
type key struct {
	ms int64 // created_at, epoch milliseconds
	id int64 // post id, the tie-break inside one millisecond
}

// less reports whether a sorts before b in ascending (ms, id) order, i.e.
// a is older than b in the feed.
func (a key) less(b key) bool {
	return events.FeedKey{Ms: b.ms, ID: b.id}.Newer(events.FeedKey{Ms: a.ms, ID: a.id})
}

var (
	// startKey is the cursor of the first page: every post is older.
	startKey = key{ms: math.MaxInt64, id: math.MaxInt64}
	// minKey is below every post: a source bounded by it is complete.
	minKey = key{ms: math.MinInt64, id: math.MinInt64}
)

// below returns the key that bounds "every entry with a score above ms":
// entries strictly greater than it are exactly those with a larger ms.
func below(ms int64) key { return key{ms: ms, id: math.MaxInt64} }

// Cursor wire format, version 1: base64url (no padding, canonical) of one
// version byte followed by created_at ms and post id, both big-endian int64.
// The version byte lets the format change later while old cursors still
// parse (or are rejected with a clear error).
const (
	cursorV1    = 1
	cursorV1Len = 1 + 8 + 8
)

var cursorEncoding = base64.RawURLEncoding.Strict()

// encodeCursor returns the opaque cursor of the page that continues strictly
// after k.
func encodeCursor(k key) string {
	var b [cursorV1Len]byte
	b[0] = cursorV1
	binary.BigEndian.PutUint64(b[1:9], uint64(k.ms))
	binary.BigEndian.PutUint64(b[9:17], uint64(k.id))
	return cursorEncoding.EncodeToString(b[:])
}

// parseCursor decodes a cursor; "" is the first page.
func parseCursor(s string) (key, error) {
	if s == "" {
		return startKey, nil
	}
	if len(s) > 64 {
		return key{}, &CursorError{Reason: "too long"}
	}
	for i := 0; i < len(s); i++ {
		// The decoder skips '\r' and '\n'; a cursor has one spelling only.
		if c := s[i]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return key{}, &CursorError{Reason: "not base64url"}
		}
	}
	b, err := cursorEncoding.DecodeString(s)
	if err != nil {
		return key{}, &CursorError{Reason: "not base64url", Err: err}
	}
	if len(b) == 0 || b[0] != cursorV1 {
		return key{}, &CursorError{Reason: "unknown version"}
	}
	if len(b) != cursorV1Len {
		return key{}, &CursorError{Reason: "wrong length"}
	}
	k := key{ms: int64(binary.BigEndian.Uint64(b[1:9])), id: int64(binary.BigEndian.Uint64(b[9:17]))}
	if k.ms < 0 || k.id <= 0 || k.ms > maxCursorMs {
		return key{}, &CursorError{Reason: "out of range"}
	}
	return k, nil
}

// maxCursorMs keeps scores exact as Redis doubles (2^53) and far beyond any
// real timestamp.
const maxCursorMs = readmodel.MaxScoreMs

// CursorError says a cursor is malformed. The api maps it to 400 through
// BadCursor, so callers never depend on this concrete type.
type CursorError struct {
	Reason string
	Err    error
}

// Error describes what is wrong with the cursor, never echoing it whole.
func (e *CursorError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("bad cursor: %s: %v", e.Reason, e.Err)
	}
	return "bad cursor: " + e.Reason
}

// Unwrap returns the decoding error, if any.
func (e *CursorError) Unwrap() error { return e.Err }

// BadCursor reports that the error is the client's malformed cursor (HTTP 400).
func (e *CursorError) BadCursor() bool { return true }
