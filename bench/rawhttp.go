package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"
)

// RawHTTP is the raw cost of the HTTP half of a feed read: a plain
// net/http server (ServeRawHTTP, in a process of its own) answering every
// GET with the bytes of a real first page of the API, driven as the mixed
// phase drives the API (open loop, one request per interval, at the mixed
// phase's read rate, the same client and connections). The server's CPU
// per request is the floor under the API's CPU per read: what is left
// above it is the feed's own work (auth, the merge, hydration, JSON).
type RawHTTP struct {
	Requests     int64   `json:"requests"`
	Seconds      float64 `json:"seconds"`
	Rate         float64 `json:"rate"`
	BodyBytes    int     `json:"bodyBytes"`
	ServerUsPer  float64 `json:"serverCpuUsPerRequest"`
	Errors       int64   `json:"errors"`
	PerReadFeed  float64 `json:"feedCpuUsPerRead,omitempty"`
	PerReadRatio float64 `json:"feedOverRaw,omitempty"`
}

// ServeRawHTTP is the raw HTTP baseline's server: it listens on a free
// loopback port, prints "listening ADDR" on stdout, and answers every
// request with body as application/json with net/http's server until ctx
// ends.
func ServeRawHTTP(ctx context.Context, body []byte, stdout io.Writer) error {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	fmt.Fprintf(stdout, "listening %s\n", ln.Addr())
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// runRawHTTP measures RawHTTP with the server Config.RawHTTPServer starts
// (nil: skipped), at rate requests per second.
func (r *Runner) runRawHTTP(ctx context.Context, rate float64) (*RawHTTP, error) {
	if r.cfg.RawHTTPServer == nil || rate <= 0 || len(r.pop.Readers) == 0 {
		return nil, nil
	}
	status, body, err := r.do(ctx, http.MethodGet, "/api/feed?limit=20", r.pop.Readers[0], "")
	if err != nil || status != http.StatusOK {
		return nil, fmt.Errorf("raw HTTP: a page to serve: status %d, %v", status, err)
	}
	f, err := os.CreateTemp("", "feed-bench-page-*.json")
	if err != nil {
		return nil, fmt.Errorf("raw HTTP: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(body); err != nil {
		return nil, fmt.Errorf("raw HTTP: %w", err)
	}
	_ = f.Close()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	cmd := r.cfg.RawHTTPServer(sctx, f.Name())
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("raw HTTP: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("raw HTTP: start the server: %w", err)
	}
	defer func() { stop(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		return nil, fmt.Errorf("raw HTTP: the server did not say where it listens: %q, %v", line, err)
	}
	lc, err := newLeanClient("http://"+addr, r.cfg.RequestTimeout, 4*r.cfg.Clients)
	if err != nil {
		return nil, fmt.Errorf("raw HTTP: %w", err)
	}
	lc.plain = r.cfg.PlainSockets
	defer lc.closeIdle()
	proc, err := procfs.NewProc(cmd.Process.Pid)
	if err != nil {
		return nil, fmt.Errorf("raw HTTP: %w", err)
	}
	fmt.Fprintf(r.deps.Log, "bench: baseline raw HTTP (net/http, the API's %d-byte page), %s at %.0f/s\n", len(body), r.cfg.BaselineDuration, rate)
	auth := "Bearer " + r.tokens(r.pop.Readers[0])
	var (
		mu         sync.Mutex
		sent, errs int64
	)
	ticks := func() uint64 {
		_, t, _, _ := procCPU(proc)
		return t
	}
	// Warm the connections, as the mixed phase's are.
	r.openLoop(ctx, rate, time.Second, func() { _, _, _ = lc.do(ctx, http.MethodGet, "/api/feed?limit=20", auth, "") })
	t0, start := ticks(), time.Now()
	r.openLoop(ctx, rate, r.cfg.BaselineDuration, func() {
		st, _, err := lc.do(ctx, http.MethodGet, "/api/feed?limit=20", auth, "")
		mu.Lock()
		sent++
		if err != nil || st != http.StatusOK {
			errs++
		}
		mu.Unlock()
	})
	el, used := time.Since(start), float64(ticks()-t0)/clockTicks
	res := &RawHTTP{Requests: sent, Seconds: el.Seconds(), Rate: float64(sent) / el.Seconds(), BodyBytes: len(body), Errors: errs}
	if sent > 0 {
		res.ServerUsPer = used / float64(sent) * 1e6
	}
	return res, nil
}

// openLoop calls fn once per 1/rate for d from Clients workers, as the
// mixed phase dispatches its operations (an operation due while every
// worker is busy is dropped).
func (r *Runner) openLoop(ctx context.Context, rate float64, d time.Duration, fn func()) {
	ch := make(chan struct{}, r.cfg.Clients)
	var wg sync.WaitGroup
	for range r.cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range ch {
				fn()
			}
		}()
	}
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	for i := int64(0); ctx.Err() == nil; i++ {
		due := start.Add(time.Duration(i) * interval)
		if due.Sub(start) >= d {
			break
		}
		if w := time.Until(due); w > 0 {
			time.Sleep(w)
		}
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	close(ch)
	wg.Wait()
}

// compare sets the API's feed CPU per read beside the raw cost, for a
// mixed phase of reads alone (writes under 1% of the operations; with
// more, the feed process's CPU is the fan-out's too and is not split).
func (h *RawHTTP) compare(m *Mixed) {
	if h == nil || m.SystemCPU == nil || m.Reads.Count == 0 {
		return
	}
	writes := m.Posts.Count + m.Follows.Count + m.Unfollows.Count
	if writes*100 > m.Reads.Count {
		return
	}
	feed := m.SystemCPU.Percent[cpuFeed] / 100 * m.SystemCPU.Seconds
	h.PerReadFeed = feed / float64(m.Reads.Count) * 1e6
	if h.ServerUsPer > 0 {
		h.PerReadRatio = h.PerReadFeed / h.ServerUsPer
	}
}
