package api

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
)

// Message framing (RFC 9112 §6): net/http's server accepts a request with
// both Content-Length and Transfer-Encoding (it drops Content-Length and
// reads the chunked body) and keeps the connection open, and it unfolds a
// header line continued on the next (obs-fold, §5.2). A proxy in front
// that frames by Content-Length would then send the rest of the body as
// the start of another request: request smuggling. RFC 9112 §6.1 says a
// server ought to treat such a request as an error and close the
// connection; the API does (400 `bad-request` with `Connection: close`).
// The server's parser drops the evidence (Content-Length is gone from the
// request it hands over), so each connection's bytes are followed here
// as the server reads them: request line, header fields, and the body's
// framing (Content-Length bytes, or the chunks and trailer), just enough
// to find where each request's header block begins and ends. A header
// block with both fields, or with a folded line, marks its request; the
// connection delivers nothing after that block to the server (no byte of
// a smuggled request is ever parsed), and the handler answers the
// request 400 and closes (framingCheck).

// framer follows one connection's requests.
type framer struct {
	state     framerState
	line      [64]byte // the start of the current line, lower-cased
	lineLen   int      // the current line's length so far
	remaining int64    // body or chunk bytes still to skip
	// The header block being read.
	firstLine, http10, hasCL, hasTE, teChunked, folded, badCL bool
	cl                                                        int64
	tail                                                      [9]byte // the request line's last bytes, lower-cased
	tailLen                                                   int
	// blocks counts the header blocks read; bad is the number of the
	// first refused one (0: none).
	blocks, bad int64
}

type framerState uint8

const (
	fsHead      framerState = iota // request line and header fields
	fsBody                         // Content-Length bytes
	fsChunkSize                    // a chunk's size line
	fsChunkData                    // a chunk's data
	fsChunkCRLF                    // the CRLF after a chunk's data
	fsTrailer                      // the trailer fields after the last chunk
	fsLost                         // a request the server refuses: it closes the connection
	fsStopped                      // after a refused header block
)

// feed follows p, the next bytes read from the connection, and returns
// how many of them the server may read: all, unless p holds the end of a
// refused header block, then up to that end.
func (f *framer) feed(p []byte) int {
	for i := 0; i < len(p); {
		switch f.state {
		case fsLost:
			return len(p)
		case fsStopped:
			return i
		case fsBody, fsChunkData:
			n := int(min(f.remaining, int64(len(p)-i)))
			i += n
			f.remaining -= int64(n)
			if f.remaining == 0 {
				if f.state == fsBody {
					f.startHead()
				} else {
					f.state, f.remaining = fsChunkCRLF, 2
				}
			}
		case fsChunkCRLF:
			i++
			if f.remaining--; f.remaining == 0 {
				f.state = fsChunkSize
			}
		default: // a line: fsHead, fsChunkSize, fsTrailer
			j := bytes.IndexByte(p[i:], '\n')
			end := len(p)
			if j >= 0 {
				end = i + j
			}
			for _, c := range p[i:end] {
				if 'A' <= c && c <= 'Z' {
					c += 'a' - 'A'
				}
				if f.lineLen < len(f.line) {
					f.line[f.lineLen] = c
				}
				f.lineLen++
				if f.firstLine && f.state == fsHead && c != '\r' {
					copy(f.tail[:], f.tail[1:])
					f.tail[len(f.tail)-1] = c
					f.tailLen++
				}
			}
			i = end
			if j < 0 {
				continue
			}
			i++ // the LF
			f.endLine()
			if f.state == fsStopped {
				return i
			}
		}
	}
	return len(p)
}

// startHead expects the next request.
func (f *framer) startHead() {
	*f = framer{state: fsHead, firstLine: true, blocks: f.blocks, bad: f.bad}
}

// endLine handles the line just read (f.line, without its LF).
func (f *framer) endLine() {
	n := f.lineLen
	line := f.line[:min(n, len(f.line))]
	if n > 0 && n <= len(f.line) && line[n-1] == '\r' {
		line, n = line[:n-1], n-1
	}
	f.lineLen = 0
	switch f.state {
	case fsChunkSize:
		if k := bytes.IndexByte(line, ';'); k >= 0 {
			line = line[:k]
		}
		size, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
		switch {
		case err != nil || size < 0 || n > len(f.line):
			f.state = fsLost // the server refuses the chunk and closes
		case size == 0:
			f.state = fsTrailer
		default:
			f.state, f.remaining = fsChunkData, size
		}
		return
	case fsTrailer:
		if n == 0 {
			f.startHead()
		}
		return
	}
	// fsHead
	if f.firstLine {
		if n == 0 {
			return // net/http reads past empty lines before a request line
		}
		f.firstLine = false
		f.http10 = f.tailLen >= len(f.tail) && string(f.tail[:]) == " http/1.0"
		return
	}
	if n == 0 {
		f.endHead()
		return
	}
	if line[0] == ' ' || line[0] == '\t' {
		f.folded = true
		return
	}
	name, value, _ := bytes.Cut(line, []byte(":"))
	switch string(name) {
	case "content-length":
		v, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64)
		if err != nil || n > len(f.line) || (f.hasCL && v != f.cl) {
			f.badCL = true // the server refuses it too
		}
		f.hasCL, f.cl = true, v
	case "transfer-encoding":
		f.teChunked = !f.hasTE && n <= len(f.line) && string(bytes.TrimSpace(value)) == "chunked"
		f.hasTE = true
	}
}

// endHead decides the request whose header block just ended: refused, or
// framed by its body.
func (f *framer) endHead() {
	f.blocks++
	switch {
	case (f.hasCL && f.hasTE) || f.folded:
		f.bad, f.state = f.blocks, fsStopped
	case f.hasTE && !f.http10:
		if f.teChunked {
			f.state = fsChunkSize
		} else {
			f.state = fsLost // 501: the server closes the connection
		}
	case f.badCL:
		f.state = fsLost // 400: the server closes the connection
	case f.hasCL && f.cl > 0:
		f.state, f.remaining = fsBody, f.cl
	default:
		f.startHead()
	}
}

// framedConn is a server connection whose requests a framer follows.
type framedConn struct {
	f framer // the server's reads only (one at a time)
	// bad is the number of the first refused request (0: none), served
	// the requests the handler has seen: the handler's side.
	bad, served atomic.Int64
}

// read reads from r into p through the framer: after a refused header
// block the server reads EOF.
func (c *framedConn) read(r io.Reader, p []byte) (int, error) {
	if c.f.state == fsStopped {
		return 0, io.EOF
	}
	n, err := r.Read(p)
	if n > 0 {
		n = c.f.feed(p[:n])
		if c.f.bad != 0 {
			c.bad.Store(c.f.bad)
		}
	}
	return n, err
}

// errFraming is a request refused for its framing.
var errFraming = &badInput{"a request must not have both Content-Length and Transfer-Encoding, nor a header line folded onto the next (RFC 9112 §6.1, §5.2); the connection is closed"}

// framingCheck answers a request its connection's framer refused: 400,
// and the connection closed. It counts the connection's requests as the
// server hands them over (the server answers none itself but those after
// which it closes the connection; OPTIONS * is routed, see Serve).
func (s *Server) framingCheck(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(*trackedConn); ok {
			n := c.served.Add(1)
			if bad := c.bad.Load(); bad != 0 && n >= bad {
				w.Header().Set("Connection", "close")
				writeError(w, r, s.log, errFraming)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// connKey is the context key of a request's *trackedConn.
type connKey struct{}
