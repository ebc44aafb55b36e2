package rawsock

import (
	"syscall"
	"testing"
	"unsafe"
)

// cmsg appends one control message of level and typ carrying data.
func cmsg(b []byte, level, typ int32, data []byte) []byte {
	m := make([]byte, syscall.CmsgSpace(len(data)))
	h := (*syscall.Cmsghdr)(unsafe.Pointer(&m[0]))
	h.Level, h.Type = level, typ
	h.SetLen(syscall.CmsgLen(len(data)))
	copy(m[syscall.CmsgLen(0):], data)
	return append(b, m...)
}

func TestStampOf(t *testing.T) {
	ts := syscall.NsecToTimespec(1_764_000_000_123_456_789)
	tsBytes := unsafe.Slice((*byte)(unsafe.Pointer(&ts)), unsafe.Sizeof(ts))
	other := cmsg(nil, syscall.SOL_SOCKET, syscall.SCM_RIGHTS, []byte{1, 2, 3, 4})
	stamped := cmsg(nil, syscall.SOL_SOCKET, syscall.SCM_TIMESTAMPNS, tsBytes)
	short := cmsg(nil, syscall.SOL_SOCKET, syscall.SCM_TIMESTAMPNS, tsBytes[:4])
	bad := append([]byte(nil), stamped...)
	(*syscall.Cmsghdr)(unsafe.Pointer(&bad[0])).SetLen(len(bad) + 8) // longer than the buffer

	for _, c := range []struct {
		name string
		oob  []byte
		want int64
	}{
		{"none", nil, 0},
		{"a timestamp", stamped, ts.Nano()},
		{"after another message", append(append([]byte(nil), other...), stamped...), ts.Nano()},
		{"another message only", other, 0},
		{"a timestamp too short", short, 0},
		{"a length past the buffer", bad, 0},
		{"a truncated header", stamped[:syscall.SizeofCmsghdr-1], 0},
	} {
		if got := stampOf(c.oob); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
