package api_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/feedco/feed/api"
)

func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	feed := &stubFeed{delay: 300 * time.Millisecond}
	e := setup(t, options{tweak: func(d *api.Deps) { d.Feed = feed }})
	e.user(t, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.srv.Serve(ctx, ln) }()

	url := "http://" + ln.Addr().String()
	req, _ := http.NewRequest("GET", url+"/api/feed", nil)
	req.Header.Set("Authorization", e.bearer(1))
	inflight := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			inflight <- -1
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		inflight <- resp.StatusCode
	}()
	time.Sleep(100 * time.Millisecond) // the slow request is in flight
	cancel()
	if status := <-inflight; status != 200 {
		t.Fatalf("request in flight during shutdown: status %d, want 200", status)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve after shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after shutdown")
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Fatal("server still accepts connections after shutdown")
	}
}
