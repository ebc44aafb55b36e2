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
	var b [cursorV1EncLen]byte
	return string(appendCursor(b[:0], k))
}

// cursorV1EncLen is the length of a version 1 cursor (unpadded base64).
const cursorV1EncLen = (cursorV1Len*8 + 5) / 6

// appendCursor appends encodeCursor(k) to dst.
func appendCursor(dst []byte, k key) []byte {
	var b [cursorV1Len]byte
	b[0] = cursorV1
	binary.BigEndian.PutUint64(b[1:9], uint64(k.ms))
	binary.BigEndian.PutUint64(b[9:17], uint64(k.id))
	return cursorEncoding.AppendEncode(dst, b[:])
}

// parseCursor decodes a cursor of author pages (version 1 only); "" is
// the first page.
func parseCursor(s string) (key, error) {
	hc, err := parseHomeCursor(s)
	if err != nil {
		return key{}, err
	}
	if len(hc.exclude) > 0 {
		return key{}, &CursorError{Reason: "a home feed's resume cursor"}
	}
	return hc.at, nil
}

// Cursor wire format, version 2: the resume cursor of a degraded home page
// (home_degraded.go). One version byte, the position the page was read
// from (created_at ms and post id, big-endian int64; the first page's is
// startKey), the number of excluded keys (1..MaxLimit, a uvarint), then
// each excluded key, newest first, each strictly older than the one
// before (the position first): the millisecond as a uvarint difference
// from the one before, the id as a zigzag varint difference. A page read
// from it continues strictly below the position, leaving out the excluded
// keys (the posts the degraded page showed).
const (
	cursorV2 = 2
	// MaxCursorLen is the longest cursor the read side issues or accepts:
	// a resume cursor of MaxLimit keys at 20 bytes each at most, base64.
	MaxCursorLen = 2048
)

// homeCursor is a parsed home feed cursor: the page continues strictly
// below at, without the excluded keys (none for a version 1 cursor).
type homeCursor struct {
	at      key
	exclude []key // newest first, each strictly older than at
}

// encodeResume returns the version 2 cursor of (at, exclude); exclude is
// newest first, strictly below at, 1..MaxLimit keys.
func encodeResume(at key, exclude []key) string {
	b := make([]byte, 0, 1+16+1+len(exclude)*12)
	b = append(b, cursorV2)
	b = binary.BigEndian.AppendUint64(b, uint64(at.ms))
	b = binary.BigEndian.AppendUint64(b, uint64(at.id))
	b = binary.AppendUvarint(b, uint64(len(exclude)))
	prev := at
	for _, k := range exclude {
		b = binary.AppendUvarint(b, uint64(prev.ms-k.ms))
		b = binary.AppendVarint(b, prev.id-k.id)
		prev = k
	}
	return cursorEncoding.EncodeToString(b)
}

// lowest is the oldest key the cursor names: where a refresh from it
// (after=) starts, the bottom of the page it was the nextCursor of.
func (hc homeCursor) lowest() key {
	if n := len(hc.exclude); n > 0 {
		return hc.exclude[n-1]
	}
	return hc.at
}

// excluded reports whether k is one of the keys the cursor leaves out.
func (hc homeCursor) excluded(k key) bool {
	for _, e := range hc.exclude {
		if e == k {
			return true
		}
	}
	return false
}

// parseHomeCursor decodes a cursor of either version; "" is the first page.
func parseHomeCursor(s string) (homeCursor, error) {
	if s == "" {
		return homeCursor{at: startKey}, nil
	}
	if len(s) > MaxCursorLen {
		return homeCursor{}, &CursorError{Reason: "too long"}
	}
	for i := 0; i < len(s); i++ {
		// The decoder skips '\r' and '\n'; a cursor has one spelling only.
		if c := s[i]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return homeCursor{}, &CursorError{Reason: "not base64url"}
		}
	}
	b, err := cursorEncoding.DecodeString(s)
	if err != nil {
		return homeCursor{}, &CursorError{Reason: "not base64url", Err: err}
	}
	if len(b) == 0 || (b[0] != cursorV1 && b[0] != cursorV2) {
		return homeCursor{}, &CursorError{Reason: "unknown version"}
	}
	if len(b) < cursorV1Len || (b[0] == cursorV1 && len(b) != cursorV1Len) {
		return homeCursor{}, &CursorError{Reason: "wrong length"}
	}
	k := key{ms: int64(binary.BigEndian.Uint64(b[1:9])), id: int64(binary.BigEndian.Uint64(b[9:17]))}
	if b[0] == cursorV1 {
		if !inRange(k) {
			return homeCursor{}, &CursorError{Reason: "out of range"}
		}
		return homeCursor{at: k}, nil
	}
	if k != startKey && !inRange(k) {
		return homeCursor{}, &CursorError{Reason: "out of range"}
	}
	rest := b[cursorV1Len:]
	n, w := binary.Uvarint(rest)
	if w <= 0 || n < 1 || n > MaxLimit {
		return homeCursor{}, &CursorError{Reason: "bad exclusion count"}
	}
	rest = rest[w:]
	hc := homeCursor{at: k, exclude: make([]key, 0, n)}
	prev := k
	for range n {
		dms, w := binary.Uvarint(rest)
		if w <= 0 || dms > math.MaxInt64 {
			return homeCursor{}, &CursorError{Reason: "bad exclusion"}
		}
		rest = rest[w:]
		did, w := binary.Varint(rest)
		if w <= 0 {
			return homeCursor{}, &CursorError{Reason: "bad exclusion"}
		}
		rest = rest[w:]
		e := key{ms: prev.ms - int64(dms), id: prev.id - did}
		if !inRange(e) || !e.less(prev) {
			return homeCursor{}, &CursorError{Reason: "bad exclusion"}
		}
		hc.exclude = append(hc.exclude, e)
		prev = e
	}
	if len(rest) != 0 {
		return homeCursor{}, &CursorError{Reason: "wrong length"}
	}
	if encodeResume(hc.at, hc.exclude) != s {
		return homeCursor{}, &CursorError{Reason: "not canonical"} // an overlong varint: one spelling only
	}
	return hc, nil
}

// inRange reports whether k can be a post's key in a cursor.
func inRange(k key) bool { return k.ms >= 0 && k.id > 0 && k.ms <= maxCursorMs }

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
