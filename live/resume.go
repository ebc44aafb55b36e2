package live

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math"
	"slices"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/readmodel"
)

// Resume is where a stream stands, carried whole in each event's id, so a
// client that reconnects with it (Last-Event-ID) resumes exactly:
//
//   - B: the client has every entry the stream showed in (B0, B];
//   - Sent: the entries above B the client has received (ascending), so
//     that a read above B sends only the others;
//   - C: the changes stream's position the client has seen edits and
//     deletions up to;
//   - B0: where the stream started (edits and deletions concern the
//     entries in (B0, B] and Sent).
type Resume struct {
	B, B0 events.FeedKey
	Sent  []events.FeedKey
	C     readmodel.ChangePos
}

// MaxSent bounds Resume.Sent: beyond it, B moves up to the newest sent
// entry (the one case where an entry projected late, below it, may be
// skipped: counted by feed_stream_sent_overflow_total).
const MaxSent = 64

// resumeV1 is the id format's version byte: base64url (no padding) of the
// version, B and B0 (ms and id, big-endian int64), C (two uvarints), the
// number of Sent keys (a uvarint) and each as uvarint differences from the
// one before (from B): ms, then id as a zigzag varint.
const resumeV1 = 1

var idEncoding = base64.RawURLEncoding.Strict()

// MaxIDLen bounds an id a client sends back.
const MaxIDLen = 2048

// Encode returns the event id of r.
func (r Resume) Encode() string {
	b := make([]byte, 0, 1+32+20+2+len(r.Sent)*12)
	b = append(b, resumeV1)
	for _, k := range []events.FeedKey{r.B, r.B0} {
		b = binary.BigEndian.AppendUint64(b, uint64(k.Ms))
		b = binary.BigEndian.AppendUint64(b, uint64(k.ID))
	}
	b = binary.AppendUvarint(b, r.C.Ms)
	b = binary.AppendUvarint(b, r.C.Seq)
	b = binary.AppendUvarint(b, uint64(len(r.Sent)))
	prev := r.B
	for _, k := range r.Sent {
		b = binary.AppendUvarint(b, uint64(k.Ms-prev.Ms))
		b = binary.AppendVarint(b, k.ID-prev.ID)
		prev = k
	}
	return idEncoding.EncodeToString(b)
}

// ErrBadID is a Last-Event-ID that no stream issued.
var ErrBadID = errors.New("malformed stream event id")

// DecodeResume parses an event id.
func DecodeResume(s string) (Resume, error) {
	if len(s) > MaxIDLen {
		return Resume{}, ErrBadID
	}
	b, err := idEncoding.DecodeString(s)
	if err != nil || len(b) < 1+32 || b[0] != resumeV1 {
		return Resume{}, ErrBadID
	}
	var r Resume
	r.B = events.FeedKey{Ms: int64(binary.BigEndian.Uint64(b[1:])), ID: int64(binary.BigEndian.Uint64(b[9:]))}
	r.B0 = events.FeedKey{Ms: int64(binary.BigEndian.Uint64(b[17:])), ID: int64(binary.BigEndian.Uint64(b[25:]))}
	rest := b[33:]
	next := func() (uint64, bool) {
		v, w := binary.Uvarint(rest)
		if w <= 0 {
			return 0, false
		}
		rest = rest[w:]
		return v, true
	}
	var ok1, ok2, ok3 bool
	var n uint64
	r.C.Ms, ok1 = next()
	r.C.Seq, ok2 = next()
	n, ok3 = next()
	if !ok1 || !ok2 || !ok3 || n > MaxSent+1 || r.B.Ms < 0 || r.B0.Ms < 0 || r.B0.Newer(r.B) {
		return Resume{}, ErrBadID
	}
	prev := r.B
	for range n {
		dms, ok := next()
		if !ok || dms > math.MaxInt64 {
			return Resume{}, ErrBadID
		}
		did, w := binary.Varint(rest)
		if w <= 0 {
			return Resume{}, ErrBadID
		}
		rest = rest[w:]
		k := events.FeedKey{Ms: prev.Ms + int64(dms), ID: prev.ID + did}
		if !k.Newer(prev) {
			return Resume{}, ErrBadID
		}
		r.Sent = append(r.Sent, k)
		prev = k
	}
	if len(rest) != 0 {
		return Resume{}, ErrBadID
	}
	return r, nil
}

// sent reports whether k is in r.Sent.
func (r *Resume) sent(k events.FeedKey) bool {
	_, ok := slices.BinarySearchFunc(r.Sent, k, cmpKey)
	return ok
}

// add records k as sent (it is above B).
func (r *Resume) add(k events.FeedKey) {
	i, ok := slices.BinarySearchFunc(r.Sent, k, cmpKey)
	if !ok {
		r.Sent = slices.Insert(r.Sent, i, k)
	}
}

// shown reports whether the entry at k was shown to the client: sent, or
// in (B0, B].
func (r *Resume) shown(k events.FeedKey) bool {
	return r.sent(k) || k.Newer(r.B0) && !k.Newer(r.B)
}

// raise moves B up to b (when above it) and drops the sent entries at or
// below it.
func (r *Resume) raise(b events.FeedKey) {
	if !b.Newer(r.B) {
		return
	}
	r.B = b
	i := 0
	for i < len(r.Sent) && !r.Sent[i].Newer(b) {
		i++
	}
	r.Sent = slices.Delete(r.Sent, 0, i)
}

func cmpKey(a, b events.FeedKey) int {
	switch {
	case a == b:
		return 0
	case b.Newer(a):
		return -1
	}
	return 1
}
