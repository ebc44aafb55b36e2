package readmodel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strconv"
	"sync"
)

// A sorted set as Redis's RESTORE takes it: the serialization DUMP writes
// for a sorted set in the compact listpack encoding (Redis 7.0 and newer).
//
// Why: a ZADD of n members into a new inbox costs Redis O(n²) while the set
// is a listpack (each member is looked up by a linear scan before it is
// inserted); with zset-max-listpack-entries 1024 (production) that is ~2.7 µs
// a member for a 430-member inbox, 23 s of Redis CPU for the 8.6M members of
// the 1M-event benchmark. RESTORE of the finished listpack is one copy. The
// set RESTORE makes is the one the ZADD makes, byte for byte: same entries,
// same order, same encodings (build_listpack_test.go compares the server's
// own DUMPs of both), and Redis converts it to a skiplist itself when it is
// over the server's zset-max-listpack-entries, as ZADD would have made it.
//
// The format, from Redis's rdb.c and listpack.c:
//
//	payload  = type(17 = RDB_TYPE_ZSET_LISTPACK) rdb-string(listpack) rdb-version(2 bytes LE) crc64(8 bytes LE)
//	listpack = total-bytes(uint32 LE) count(uint16 LE) entry* 0xFF
//	entry    = encoding+data backlen
//
// entries alternate member and score, ascending by score, equal scores by
// the member's bytes. A member or score is stored as an integer when its
// text is a canonical int64 (Redis tries that on every insert), a score's
// text being Redis's d2string of the double; else as a string.

// lpRDBVersion is the RDB version the payload declares: 10, Redis 7.0's,
// which every later server loads (a server refuses only newer versions).
// Older servers refuse the payload; the build then falls back to ZADD.
const lpRDBVersion = 10

const rdbTypeZSetListpack = 17

// lpEntry is one member of a sorted set to encode: the decimal of id, or
// str when str is not empty (the sentinels).
type lpEntry struct {
	score float64
	id    int64
	str   string
}

// errNotEncodable marks a set this encoder does not write (a score that is
// not an integer, a long string member): the caller uses ZADD for it.
var errNotEncodable = errors.New("not encodable as a listpack payload")

// member renders e's member into buf.
func (e *lpEntry) member(buf []byte) []byte {
	if e.str != "" {
		return append(buf, e.str...)
	}
	return strconv.AppendInt(buf, e.id, 10)
}

// lpCompare is the order of a listpack sorted set: score, then the member's
// bytes (memcmp, as zzlCompareElements).
func lpCompare(a, b *lpEntry) int {
	if a.score != b.score {
		if a.score < b.score {
			return -1
		}
		return 1
	}
	if a.str == "" && b.str == "" && a.id >= 0 && b.id >= 0 && digits(a.id) == digits(b.id) {
		// Non-negative, same length: the decimal order is the numeric one.
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	}
	var x, y [24]byte
	return bytes.Compare(a.member(x[:0]), b.member(y[:0]))
}

// digits counts the decimal digits of v >= 0.
func digits(v int64) int {
	n := 1
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}

// sortListpack puts entries in the listpack's order. Input that is already
// in score order (the build's) costs one pass.
func sortListpack(es []lpEntry) {
	slices.SortFunc(es, func(a, b lpEntry) int { return lpCompare(&a, &b) })
}

// appendListpackPayload appends to dst the RESTORE payload of the sorted
// set es, which must be in listpack order (sortListpack) and free of
// duplicate members. scratch is reused for the listpack; both are returned.
func appendListpackPayload(dst, scratch []byte, es []lpEntry) (payload, lp []byte, err error) {
	if len(es) == 0 {
		return dst, scratch, errNotEncodable // RESTORE refuses empty sets
	}
	lp = append(scratch[:0], 0, 0, 0, 0, 0, 0) // header, filled below
	for i := range es {
		e := &es[i]
		if e.str != "" {
			if lp, err = lpAppendString(lp, e.str); err != nil {
				return dst, lp, err
			}
		} else {
			lp = lpAppendInt(lp, e.id)
		}
		switch s := e.score; {
		case math.IsInf(s, 1):
			lp, _ = lpAppendString(lp, "inf")
		case math.IsInf(s, -1):
			lp, _ = lpAppendString(lp, "-inf")
		case s == 0 && math.Signbit(s):
			return dst, lp, errNotEncodable // Redis keeps "-0" as a string
		case s > -4503599627370495 && s < 4503599627370496 && s == math.Trunc(s):
			// d2string prints these as integers, stored as integers.
			lp = lpAppendInt(lp, int64(s))
		default:
			return dst, lp, errNotEncodable
		}
	}
	lp = append(lp, 0xFF)
	n := uint32(len(lp))
	count := 2 * len(es)
	if count > math.MaxUint16-1 {
		count = math.MaxUint16 // "unknown", as Redis writes it
	}
	binary.LittleEndian.PutUint32(lp[0:4], n)
	binary.LittleEndian.PutUint16(lp[4:6], uint16(count))

	start := len(dst)
	dst = append(dst, rdbTypeZSetListpack)
	dst = appendRDBLen(dst, uint64(len(lp)))
	dst = append(dst, lp...)
	dst = append(dst, lpRDBVersion&0xFF, lpRDBVersion>>8)
	dst = binary.LittleEndian.AppendUint64(dst, redisCRC64(0, dst[start:]))
	return dst, lp, nil
}

// appendRDBLen is rdbSaveLen.
func appendRDBLen(b []byte, n uint64) []byte {
	switch {
	case n < 1<<6:
		return append(b, byte(n))
	case n < 1<<14:
		return append(b, byte(n>>8)|0x40, byte(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0x80), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, 0x81), n)
}

// lpAppendInt appends an integer entry in the smallest encoding Redis
// picks (lpEncodeIntegerGetType), with its one-byte backlen (every integer
// entry is at most 9 bytes).
func lpAppendInt(b []byte, v int64) []byte {
	var n byte
	switch {
	case v >= 0 && v <= 127:
		b = append(b, byte(v))
		n = 1
	case v >= -4096 && v <= 4095:
		u := v
		if u < 0 {
			u += 1 << 13
		}
		b = append(b, byte(u>>8)|0xC0, byte(u))
		n = 2
	case v >= math.MinInt16 && v <= math.MaxInt16:
		b = append(b, 0xF1, byte(v), byte(v>>8))
		n = 3
	case v >= -(1<<23) && v <= 1<<23-1:
		b = append(b, 0xF2, byte(v), byte(v>>8), byte(v>>16))
		n = 4
	case v >= math.MinInt32 && v <= math.MaxInt32:
		b = binary.LittleEndian.AppendUint32(append(b, 0xF3), uint32(v))
		n = 5
	default:
		b = binary.LittleEndian.AppendUint64(append(b, 0xF4), uint64(v))
		n = 9
	}
	return append(b, n)
}

// lpAppendString appends a string entry. Only the 6-bit length form (under
// 64 bytes, one-byte backlen) is written, and only for text Redis would not
// store as an integer; anything else is left to ZADD.
func lpAppendString(b []byte, s string) ([]byte, error) {
	if len(s) >= 64 {
		return b, errNotEncodable
	}
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		return b, errNotEncodable // an integer-looking string: not ours
	}
	b = append(b, 0x80|byte(len(s)))
	b = append(b, s...)
	return append(b, byte(1+len(s))), nil
}

// redisCRC64 is Redis's crc64 (Jones polynomial, reflected, no inversion),
// which checks DUMP payloads; slicing by 8.
func redisCRC64(crc uint64, p []byte) uint64 {
	crcTablesOnce.Do(makeCRCTables)
	t := &crcTables
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint64(p)
		crc = t[7][crc&0xff] ^ t[6][crc>>8&0xff] ^ t[5][crc>>16&0xff] ^ t[4][crc>>24&0xff] ^
			t[3][crc>>32&0xff] ^ t[2][crc>>40&0xff] ^ t[1][crc>>48&0xff] ^ t[0][crc>>56]
		p = p[8:]
	}
	for _, c := range p {
		crc = t[0][byte(crc)^c] ^ crc>>8
	}
	return crc
}

var (
	crcTablesOnce sync.Once
	crcTables     [8][256]uint64
)

func makeCRCTables() {
	const poly = 0x95ac9329ac4bc9b5 // 0xad93d23594c935a9 reflected
	for i := range 256 {
		c := uint64(i)
		for range 8 {
			if c&1 == 1 {
				c = c>>1 ^ poly
			} else {
				c >>= 1
			}
		}
		crcTables[0][i] = c
	}
	for i := range 256 {
		c := crcTables[0][i]
		for k := 1; k < 8; k++ {
			c = crcTables[0][c&0xff] ^ c>>8
			crcTables[k][i] = c
		}
	}
}
