// Package bench drives a mixed workload (feed reads, posts, follows,
// unfollows) against a running system over HTTP and measures what users
// feel: read latency, write latency, and the time from a post's 201 to its
// appearance in a follower's feed; beside it the pipeline's lags and the
// fan-out rate, and, on the same data and at the same concurrency, two
// baselines: the naive pull SQL query and the raw Redis commands of a read.
package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"time"
)

// Config tunes a run. The zero value means the defaults (except BaseURL).
type Config struct {
	// BaseURL is the API, e.g. http://127.0.0.1:8080.
	BaseURL string
	// MetricsURL serves the API's /metrics: its admin listener
	// (FEED_ADMIN_ADDR), e.g. http://127.0.0.1:9100. Default BaseURL.
	MetricsURL string
	// Duration of the mixed phase. Default 60s.
	Duration time.Duration
	// Rate is the open-loop arrival rate of operations per second (reads
	// and writes together). 0 with ClosedLoop false means 1,000.
	Rate float64
	// ClosedLoop runs Clients workers back to back instead of a rate.
	ClosedLoop bool
	// Clients is the number of concurrent workers (the open loop's pool
	// too) and the concurrency of the baselines. Default 64 (open loop) or
	// 16 (closed loop).
	Clients int
	// Procs is the load generator's GOMAXPROCS through the mixed phase
	// (its probes included); the baselines keep the process's. Default 1:
	// the workers mostly wait on the network, and with a second P the
	// runtime spends more on waking and parking threads than on the
	// requests, CPU the system under test on the same machine then lacks
	// (docs/bench.md). Negative keeps the process's.
	Procs int
	// PlainSockets makes the load generator's HTTP connections use Go's
	// own socket calls instead of raw ones (internal/rawsock), to compare.
	PlainSockets bool
	// ReadRatio is how many feed reads per write. Default 20; negative for
	// none (writes only), since 0 is the default.
	ReadRatio float64
	// PostShare is the share of writes that are posts; the rest are split
	// evenly between follows and unfollows. Default 0.8; negative for none
	// (follows and unfollows only).
	PostShare float64
	// RepostShare, ReplyShare and LikeShare are the shares of the post
	// operations that are reposts, replies and likes of a recent post
	// (the rest are plain posts). No measured ratio stands behind the
	// defaults (0.1, 0.1, 0.3): they are stated, and set to 0 to compare
	// with a text-only run. Negative means 0 (0 is the default).
	RepostShare, ReplyShare, LikeShare float64
	// Readers is how many users read (warmed before the run: one read each
	// builds their inbox). Default 2,000.
	Readers int
	// Churners is how many users follow and unfollow. Default 500.
	Churners int
	// VisibleRate is how many posts per second get a visibility probe.
	// Default 20.
	VisibleRate float64
	// Streams is how many readers (the first of Readers) hold a live
	// stream of their home feed open through the mixed phase; every plain
	// post by an author they follow is timed from its 201 to its event on
	// each follower's stream (streams.go). 0: none.
	Streams int
	// PollInterval is how often a probe reads the follower's first page.
	// Default 10ms.
	PollInterval time.Duration
	// VisibleTimeout gives up on a probe (counted as an error). Default 30s.
	VisibleTimeout time.Duration
	// BaselineDuration is the length of each baseline phase (pull SQL, raw
	// Redis), run before and after the mixed phase. 0 means 10s; negative
	// skips them.
	BaselineDuration time.Duration
	// CelebrityThreshold: posts of authors at or over it are pulled at read
	// time (visible after the celebrity cache TTL); probes skip them.
	// Default 10,000.
	CelebrityThreshold int64
	// Activate marks every user active (user_activity = now) before the
	// run, so fan-out pushes to all followers, as for a population that
	// reads daily (Activate).
	Activate bool
	// Vacuum runs VACUUM (ANALYZE) on the tables the runs change before
	// the warm-up, when the server's autovacuum is off (VacuumIfOff).
	Vacuum bool
	// SampleEvery is the lag sampling interval. Default 1s.
	SampleEvery time.Duration
	// Seed makes the choice of readers and operations repeatable. Default 1.
	Seed uint64
	// RequestTimeout bounds one HTTP request. Default 10s.
	RequestTimeout time.Duration
	// RawHTTPServer, when set, makes the command that serves the raw HTTP
	// baseline (RawHTTP): a process that runs ServeRawHTTP with the page
	// in the named file. nil: no raw HTTP baseline.
	RawHTTPServer func(ctx context.Context, page string) *exec.Cmd `json:"-"`
}

func (c Config) withDefaults() Config {
	c.Duration = cmp.Or(c.Duration, 60*time.Second)
	if !c.ClosedLoop {
		c.Rate = cmp.Or(c.Rate, 1000)
		c.Clients = cmp.Or(c.Clients, 64)
	}
	c.Procs = cmp.Or(c.Procs, 1)
	c.Clients = cmp.Or(c.Clients, 16)
	c.ReadRatio = cmp.Or(c.ReadRatio, 20)
	c.PostShare = cmp.Or(c.PostShare, 0.8)
	c.RepostShare = cmp.Or(c.RepostShare, 0.1)
	c.ReplyShare = cmp.Or(c.ReplyShare, 0.1)
	c.LikeShare = cmp.Or(c.LikeShare, 0.3)
	c.Readers = cmp.Or(c.Readers, 2000)
	c.Churners = cmp.Or(c.Churners, 500)
	c.VisibleRate = cmp.Or(c.VisibleRate, 20)
	c.PollInterval = cmp.Or(c.PollInterval, 10*time.Millisecond)
	c.VisibleTimeout = cmp.Or(c.VisibleTimeout, 30*time.Second)
	c.BaselineDuration = cmp.Or(c.BaselineDuration, 10*time.Second)
	c.CelebrityThreshold = cmp.Or(c.CelebrityThreshold, 10_000)
	c.SampleEvery = cmp.Or(c.SampleEvery, time.Second)
	c.Seed = cmp.Or(c.Seed, 1)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, 10*time.Second)
	return c
}

// readRatio is ReadRatio with "none" as 0.
func (c Config) readRatio() float64 { return max(c.ReadRatio, 0) }

// postShare is PostShare with "none" as 0.
func (c Config) postShare() float64 { return max(c.PostShare, 0) }

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.BaseURL == "":
		return errors.New("base URL: not set")
	case c.Duration <= 0:
		return fmt.Errorf("duration %v: want positive", c.Duration)
	case !c.ClosedLoop && c.Rate <= 0:
		return fmt.Errorf("rate %g: want positive", c.Rate)
	case c.Clients < 1:
		return fmt.Errorf("clients %d: want at least 1", c.Clients)
	case math.IsNaN(c.ReadRatio) || math.IsInf(c.ReadRatio, 0):
		return fmt.Errorf("read ratio %g: want a number (negative for no reads)", c.ReadRatio)
	case math.IsNaN(c.PostShare) || c.PostShare > 1:
		return fmt.Errorf("post share %g: want up to 1 (negative for no posts)", c.PostShare)
	case max(c.RepostShare, 0)+max(c.ReplyShare, 0)+max(c.LikeShare, 0) > 1:
		return fmt.Errorf("repost %g, reply %g and like %g shares: want a sum up to 1", c.RepostShare, c.ReplyShare, c.LikeShare)
	case c.Readers < 1 || c.Churners < 1:
		return fmt.Errorf("readers %d, churners %d: want at least 1 each", c.Readers, c.Churners)
	case c.Streams < 0 || c.Streams > c.Readers:
		return fmt.Errorf("streams %d: want 0 to readers (%d)", c.Streams, c.Readers)
	case c.VisibleRate < 0 || c.PollInterval <= 0 || c.VisibleTimeout <= 0:
		return errors.New("visibility probes: want a non-negative rate and positive interval and timeout")
	}
	return nil
}
