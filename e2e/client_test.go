package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/feedco/feed/verify"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// apiPost and apiPage are a post and a page as the API returns them.
type (
	apiPost = verify.APIPost
	apiPage = verify.APIPage
)

// apiUser is the user resource.
type apiUser struct {
	ID             string `json:"id"`
	Name           string `json:"name"`
	FollowerCount  int64  `json:"followerCount"`
	FollowingCount int64  `json:"followingCount"`
}

// statusError is an unexpected HTTP answer.
type statusError struct {
	method, path string
	status       int
	body         string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s %s: HTTP %d: %s", e.method, e.path, e.status, e.body)
}

// retryable reports answers a well-behaved client retries (with the same
// Idempotency-Key): a lost concurrency race, shedding, a dependency blip.
func retryable(status int) bool {
	return status == http.StatusConflict || status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
}

// call sends one request as the user of token ("" for none) and decodes a
// JSON answer into out (nil: ignore). A retryable answer is retried a few
// times with the same Idempotency-Key; retries counts them.
func (s *system) call(ctx context.Context, method, path, token, idemKey string, body, out any, want int, retries *atomic.Int64) error {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return err
		}
	}
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, method, s.baseURL+path, bytes.NewReader(raw))
		if err != nil {
			return err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if idemKey != "" {
			req.Header.Set("Idempotency-Key", idemKey)
		}
		resp, err := s.http.Do(req)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("%s %s: read body: %w", method, path, err)
		}
		if retryable(resp.StatusCode) && attempt < 5 {
			if retries != nil {
				retries.Add(1)
			}
			time.Sleep(time.Duration(10<<attempt) * time.Millisecond) // the client's backoff before its retry
			continue
		}
		if resp.StatusCode != want {
			return &statusError{method: method, path: path, status: resp.StatusCode, body: string(b)}
		}
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				return fmt.Errorf("%s %s: decode %q: %w", method, path, b, err)
			}
		}
		return nil
	}
}

// readAll reads a paged endpoint (path without query) to its end with the
// given page size, as the user of token (verify.ReadAll).
func (s *system) readAll(ctx context.Context, path, token string, limit, maxPages int) ([]apiPost, error) {
	get := func(ctx context.Context, pathAndQuery string, p *apiPage) error {
		return s.call(ctx, http.MethodGet, pathAndQuery, token, "", nil, p, http.StatusOK, nil)
	}
	return verify.ReadAll(ctx, get, path, limit, maxPages)
}
