package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/feedco/feed/bench"
	"github.com/feedco/feed/cdc"
	"github.com/feedco/feed/internal/auth"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/rebuild"
)

func init() {
	register("bench", "mixed workload against a running system, with baselines: feed bench [--duration 60s] [--rate R | --closed-loop --clients C]", runBench)
}

func runBench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c bench.Config
	fs.DurationVar(&c.Duration, "duration", 60*time.Second, "length of the mixed phase")
	fs.Float64Var(&c.Rate, "rate", 1000, "open loop: operations per second (reads and writes)")
	fs.BoolVar(&c.ClosedLoop, "closed-loop", false, "run --clients workers back to back instead of --rate")
	fs.IntVar(&c.Clients, "clients", 0, "workers (default 64 open loop, 16 closed loop); also the baselines' concurrency")
	fs.Float64Var(&c.ReadRatio, "read-ratio", 20, "feed reads per write (0: writes only)")
	fs.Float64Var(&c.PostShare, "post-share", 0.8, "share of writes that are posts (the rest: follows and unfollows, half each; 0: none)")
	fs.IntVar(&c.Readers, "readers", 2000, "users who read (warmed by one read each before the run)")
	fs.IntVar(&c.Churners, "churners", 500, "users who follow and unfollow")
	fs.Float64Var(&c.VisibleRate, "visible-rate", 20, "posts per second that get a post-to-visible probe")
	fs.DurationVar(&c.PollInterval, "poll", 10*time.Millisecond, "probe poll interval")
	fs.DurationVar(&c.BaselineDuration, "baseline", 10*time.Second, "length of each baseline phase, before and after (negative: none)")
	activate := fs.Bool("activate", true, "mark every user active before the run, so fan-out pushes to all followers")
	fs.Uint64Var(&c.Seed, "seed", 1, "choice of readers, churners and operations")
	out := fs.String("out", "bench-report", "report files: OUT.json and OUT.png")
	url := fs.String("url", "", "API base URL (default http://HTTP_ADDR)")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{"bench takes flags only"}
	}
	if err := noneFlags(&c); err != nil {
		return err
	}
	a, err := newApp(ctx, true, true)
	if err != nil {
		return err
	}
	defer a.Close()
	c.Activate = *activate
	c.CelebrityThreshold = a.Cfg.CelebrityThreshold
	c.BaseURL = strings.TrimRight(*url, "/")
	if c.BaseURL == "" {
		c.BaseURL = "http://" + a.Cfg.HTTPAddr
	}
	signer, err := auth.NewSigner(a.Cfg.JWTSecret)
	if err != nil {
		return usageError{err.Error()}
	}
	var tokMu sync.Mutex
	toks := map[int64]string{}
	tokens := func(u int64) string {
		tokMu.Lock()
		defer tokMu.Unlock()
		t, ok := toks[u]
		if !ok {
			t = signer.Sign(u, 24*time.Hour)
			toks[u] = t
		}
		return t
	}
	vs, err := readmodel.LoadVersions(ctx, a.Redis, "")
	if err != nil {
		return err
	}
	pop, err := bench.LoadPopulation(ctx, a.Pool, c.Readers, c.Churners, c.Seed)
	if err != nil {
		return err
	}
	rc := projections.RunnerConfig{Brokers: brokersOf(a.Cfg), Topic: a.Cfg.Topic}
	sampler := func(ctx context.Context) (bench.LagSample, error) {
		var s bench.LagSample
		st, err := cdc.Status(ctx, a.Pool, a.Cfg.Slot)
		if err != nil {
			return s, err
		}
		s.CDCLagBytes, s.CDCLagSeconds = st.LagBytes, st.LagSeconds
		ps, err := rebuild.ReadStatus(ctx, a.Pool, a.Redis, rc, "")
		s.ConsumerLag = map[string]int64{}
		for _, p := range ps.Projections {
			s.ConsumerLag[p.Name] = p.Lag
		}
		return s, err
	}
	r, err := bench.New(c, pop, tokens, bench.Deps{DB: a.Pool, Redis: a.Redis, Keys: readmodel.Keys{Versions: vs}, Sampler: sampler, Log: os.Stderr})
	if err != nil {
		return usageError{err.Error()}
	}
	rep, err := r.Run(ctx)
	if err != nil {
		return err
	}
	rep.Command = "feed bench " + strings.Join(args, " ")
	rep.WriteTable(os.Stdout)
	if err := rep.WriteJSON(*out + ".json"); err != nil {
		return err
	}
	if err := rep.WriteChart(*out + ".png"); err != nil {
		return err
	}
	fmt.Printf("\nreport: %s.json, chart: %s.png\n", *out, *out)
	return nil
}

// noneFlags maps an explicit 0 of --read-ratio and --post-share to the
// library's "none" (negative: its 0 means the default) and refuses
// negative values.
func noneFlags(c *bench.Config) error {
	if c.ReadRatio < 0 || c.PostShare < 0 {
		return usageError{fmt.Sprintf("--read-ratio %g, --post-share %g: want at least 0", c.ReadRatio, c.PostShare)}
	}
	if c.ReadRatio == 0 {
		c.ReadRatio = -1
	}
	if c.PostShare == 0 {
		c.PostShare = -1
	}
	return nil
}
