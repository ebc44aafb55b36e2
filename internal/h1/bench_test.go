package h1

import (
	"bufio"
	"bytes"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkServe: this server and net/http's serving the same handler (a
// 3.3 KB JSON page with its Content-Length, as the API's feed page) over
// loopback keep-alive connections, 16 clients back to back, each a bare
// connection that writes a prebuilt request and reads the response by its
// Content-Length. cpu-µs/op is the process's CPU (getrusage: user +
// system) per request, the clients' included; allocs/op are the server's
// and the clients' together.
//
//	go test -run '^$' -bench Serve -benchtime 3s -count 3 ./internal/h1/
func BenchmarkServe(b *testing.B) {
	page := bytes.Repeat([]byte(`{"id":"7400000000000000000","authorId":"1234","content":"x"},`), 55)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(page)))
		_, _ = w.Write(page)
	})
	for _, tc := range []struct {
		name  string
		serve func(net.Listener) (stop func())
	}{
		{"h1", func(ln net.Listener) func() {
			s := &Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second,
				WriteTimeout: 20 * time.Second, IdleTimeout: time.Minute, ErrorLog: log.New(io.Discard, "", 0)}
			go func() { _ = s.Serve(ln) }()
			return func() { _ = s.Close() }
		}},
		{"net-http", func(ln net.Listener) func() {
			s := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second,
				WriteTimeout: 20 * time.Second, IdleTimeout: time.Minute, ErrorLog: log.New(io.Discard, "", 0)}
			go func() { _ = s.Serve(ln) }()
			return func() { _ = s.Close() }
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			stop := tc.serve(ln)
			defer stop()
			req := []byte("GET /api/feed?limit=20 HTTP/1.1\r\nHost: " + ln.Addr().String() +
				"\r\nAuthorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl\r\nUser-Agent: bench\r\n\r\n")
			var ru0, ru1 syscall.Rusage
			b.SetParallelism(8) // 16 clients on 2 Ps
			b.ReportAllocs()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Error(err)
					return
				}
				defer c.Close()
				br := bufio.NewReaderSize(c, 16<<10)
				for pb.Next() {
					if err := roundTrip(c, br, req, len(page)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := time.Duration(ru1.Utime.Nano() - ru0.Utime.Nano() + ru1.Stime.Nano() - ru0.Stime.Nano())
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// roundTrip writes req and reads one response whose body must be want
// bytes long.
func roundTrip(c net.Conn, br *bufio.Reader, req []byte, want int) error {
	if _, err := c.Write(req); err != nil {
		return err
	}
	n := -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(k, []byte("Content-Length")) {
			n, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
	if n != want {
		return io.ErrUnexpectedEOF
	}
	_, err := br.Discard(n)
	return err
}
