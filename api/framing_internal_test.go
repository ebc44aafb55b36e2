package api

import "testing"

// The framer follows a connection's requests however the bytes arrive:
// bodies by Content-Length and chunks (with extensions and a trailer) are
// skipped, every header block counted, and the first refused one found.
func TestFramerFollowsRequests(t *testing.T) {
	good := "POST /api/posts HTTP/1.1\r\nHost: feed\r\nContent-Length: 5\r\n\r\nhello" +
		"POST /api/posts HTTP/1.1\r\nHost: feed\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"3;ext=1\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nX-Trailer: 1\r\n\r\n" +
		"\r\nGET /api/feed?" + string(make([]byte, 0)) + "q=" + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa HTTP/1.0\r\n" +
		"Transfer-Encoding: chunked\r\n\r\n" + // HTTP/1.0: the server ignores it, no body
		"GET /healthz HTTP/1.1\r\nHost: feed\r\n\r\n"
	cases := []struct {
		name, stream string
		blocks, bad  int64
		delivered    int // bytes the server may read; -1: all
	}{
		{"keep-alive mix", good, 4, 0, -1},
		{"CL and TE", good + "POST / HTTP/1.1\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n", 5, 5,
			len(good) + len("POST / HTTP/1.1\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n")},
		{"TE and CL", "POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-length: 6\r\n\r\n0\r\n\r\nX", 1, 1, -2},
		{"folded TE", "POST / HTTP/1.1\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n", 1, 1, -2},
	}
	for _, c := range cases {
		for step := 1; step <= len(c.stream); step++ {
			var f framer
			f.startHead()
			delivered := 0
			for i := 0; i < len(c.stream); i += step {
				chunk := c.stream[i:min(i+step, len(c.stream))]
				n := f.feed([]byte(chunk))
				delivered += n
				if n < len(chunk) {
					break
				}
			}
			want := c.delivered
			switch want {
			case -1:
				want = len(c.stream)
			case -2:
				want = len(c.stream) - len("0\r\n\r\n") - map[bool]int{true: 1, false: 0}[c.stream[len(c.stream)-1] == 'X']
			}
			if f.blocks != c.blocks || f.bad != c.bad || delivered != want {
				t.Fatalf("%s in steps of %d: %d blocks, bad %d, %d bytes delivered; want %d, %d, %d",
					c.name, step, f.blocks, f.bad, delivered, c.blocks, c.bad, want)
			}
		}
	}
}
