package replay

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// BoundKind says what a range bound is measured in.
type BoundKind int

// The kinds of bounds --from and --to accept.
const (
	// BoundNone is an absent bound.
	BoundNone BoundKind = iota
	// BoundPosition is the log's bigserial position.
	BoundPosition
	// BoundLSN is the commit LSN of the writing transaction (Kafka source only).
	BoundLSN
	// BoundTime is the event's recorded_at.
	BoundTime
)

// String names the kind in error messages.
func (k BoundKind) String() string {
	switch k {
	case BoundPosition:
		return "position"
	case BoundLSN:
		return "commit LSN"
	case BoundTime:
		return "timestamp"
	}
	return "none"
}

// Bound is one inclusive end of a range (--from or --to).
type Bound struct {
	Kind     BoundKind
	Position int64
	LSN      uint64
	Time     time.Time
}

// ParseBound reads a position ("12345"), a commit LSN as PostgreSQL prints
// it ("16/B374D848") or an RFC 3339 timestamp ("2026-11-30T09:41:12Z").
// The empty string is no bound.
func ParseBound(s string) (Bound, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Bound{}, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return Bound{}, invalidf("position %q: must not be negative", s)
		}
		return Bound{Kind: BoundPosition, Position: n}, nil
	}
	if hi, lo, ok := strings.Cut(s, "/"); ok {
		lsn, err := ParseLSN(hi + "/" + lo)
		if err != nil {
			return Bound{}, err
		}
		return Bound{Kind: BoundLSN, LSN: lsn}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return Bound{}, invalidf("%q is neither a position (integer), a commit LSN (like 16/B374D848) nor an RFC 3339 timestamp (like 2026-11-30T09:41:12Z)", s)
	}
	return Bound{Kind: BoundTime, Time: t}, nil
}

// ParseLSN reads an LSN as PostgreSQL prints it: two hexadecimal 32-bit
// halves separated by a slash.
func ParseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok || hi == "" || lo == "" {
		return 0, invalidf("commit LSN %q: want two hexadecimal halves like 16/B374D848", s)
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, invalidf("commit LSN %q: want two hexadecimal halves like 16/B374D848", s)
	}
	return h<<32 | l, nil
}

// FormatLSN prints an LSN the way PostgreSQL does.
func FormatLSN(lsn uint64) string {
	return fmt.Sprintf("%X/%X", lsn>>32, uint32(lsn))
}
