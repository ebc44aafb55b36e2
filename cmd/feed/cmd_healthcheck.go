package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// newHealthcheckCommand is `feed healthcheck`: a container healthcheck for
// an image without curl (the distroless one of the Dockerfile). It GETs
// one URL and exits 0 on a 2xx answer, 1 otherwise with a one-line reason.
func newHealthcheckCommand(c *cli) *cobra.Command {
	var rawURL string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "healthcheck [--url URL]",
		Short: "GET a role's health endpoint: exit 0 when it answers 2xx, 1 otherwise",
		Long: longHelp("GETs a health endpoint and exits 0 when it answers 2xx within --timeout, 1 with a one-line reason otherwise:\n"+
			"a container healthcheck that needs no curl. Without --url it checks the API's readiness, http://HTTP_ADDR/readyz\n"+
			"(an unspecified host, 0.0.0.0 or [::], is asked on loopback); `feed cdc` and `feed project` serve /healthz\n"+
			"beside /metrics on --metrics-addr: --url http://127.0.0.1:9100/healthz.",
			[]string{"HTTP_ADDR"}),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return flagUsage("timeout", "must be positive")
			}
			target := rawURL
			if target == "" {
				// Only HTTP_ADDR is needed: the logger and FEED_PPROF_ADDR
				// of c.config() are left alone, so that a healthcheck never
				// competes with the role for its profiling port.
				cfg, err := c.loadConfig()
				if err != nil {
					return usageError{err.Error()}
				}
				target = readyzURL(cfg.HTTPAddr)
			} else if u, err := url.Parse(target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return flagUsage("url", "%q: want an http:// or https:// URL", target)
			}
			return healthcheck(cmd.Context(), target, timeout, c.stdout)
		},
	}
	cmd.Flags().StringVar(&rawURL, "url", "", "the endpoint to GET (default http://HTTP_ADDR/readyz)")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the whole answer")
	return cmd
}

// readyzURL is the API's readiness endpoint on addr, seen from the same
// host: an unspecified address is asked on loopback.
func readyzURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr + "/readyz"
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/readyz"
}

// healthcheck GETs target within timeout and reports its answer: a line on
// stdout when healthy, an error (one line) otherwise.
func healthcheck(ctx context.Context, target string, timeout time.Duration, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("GET %s: no answer within %v", target, timeout)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("GET %s: %v", target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 512))
	if err != nil {
		return fmt.Errorf("GET %s: %s, reading the body: %v", target, resp.Status, err)
	}
	line := strings.Join(strings.Fields(string(body)), " ")
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("GET %s: %s %s", target, resp.Status, line)
	}
	_, err = fmt.Fprintf(stdout, "%s: %s %s\n", target, resp.Status, line)
	return err
}
