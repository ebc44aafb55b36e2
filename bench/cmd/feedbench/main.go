// Command feedbench is the feed backend's load generator: a mixed
// read/write workload against a running system over HTTP, beside the
// pull-SQL, raw-Redis, raw-push and raw-HTTP baselines measured in the
// same run on the same data; a table on stdout, OUT.json, OUT.png and
// OUT.svg (docs/bench.md). It is a module of its own, so that the product's
// binary ships none of it:
//
//	cd bench && go build -o ../bin/feedbench ./cmd/feedbench
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/feedco/feed/bench"
	"github.com/feedco/feed/cdc"
	"github.com/feedco/feed/homefeed"
	"github.com/feedco/feed/internal/auth"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/readmodel"
	"github.com/feedco/feed/rebuild"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr, loadConfig)
	stop()
	os.Exit(code)
}

// Exit codes: a runtime failure, and a bad invocation (unknown flag,
// unexpected argument, invalid configuration), as feed's.
const (
	exitFailure = 1
	exitUsage   = 2
)

// usageError is a bad invocation: execute exits with exitUsage.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// execute runs the command line args (without the program name) and
// returns the process's exit code; tests call it in-process with a
// configuration of their own.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer, load func() (config, error)) int {
	root := newRootCommand(stdout, stderr, load)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil || errors.Is(err, context.Canceled) {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return exitUsage
	}
	return exitFailure
}

// options are feedbench's flags besides bench.Config's.
type options struct {
	activate bool
	vacuum   bool
	out, url string
}

func newRootCommand(stdout, stderr io.Writer, load func() (config, error)) *cobra.Command {
	var bc bench.Config
	var o options
	cmd := &cobra.Command{
		Use:   "feedbench",
		Short: "Mixed read/write workload against a running feed system, with baselines",
		Long: "Runs a mixed workload against a running system (open loop at --rate, or --closed-loop with --clients):\n" +
			"reads/s and latency percentiles, post-to-visible latency, lags, errors, beside the pull-SQL and raw-Redis\n" +
			"baselines; a table on stdout, OUT.json, OUT.png and OUT.svg (docs/bench.md). The feed policy (celebrity\n" +
			"threshold, inbox layout and bound) is the active inbox version's recorded one.",
		Args:          noArgs,
		SilenceErrors: true, // execute prints them, naming the command once
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := noneFlags(&bc); err != nil {
				return err
			}
			cfg, err := load()
			if err != nil {
				return usageError{err.Error()}
			}
			bc.Activate = o.activate
			bc.Vacuum = o.vacuum
			command := []string{cmd.CommandPath()}
			cmd.Flags().Visit(func(f *pflag.Flag) { command = append(command, "--"+f.Name+"="+f.Value.String()) })
			return run(cmd.Context(), cfg, bc, o, strings.Join(command, " "), stdout, stderr)
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	usage := cmd.UsageTemplate()
	cmd.SetUsageTemplate(usage + "\n" + envHelp() + "\n")
	cmd.CompletionOptions.DisableDefaultCmd = true
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err.Error()} })
	f := cmd.Flags()
	f.DurationVar(&bc.Duration, "duration", 60*time.Second, "length of the mixed phase")
	f.Float64Var(&bc.Rate, "rate", 1000, "open loop: operations per second (reads and writes)")
	f.BoolVar(&bc.ClosedLoop, "closed-loop", false, "run --clients workers back to back instead of --rate")
	f.IntVar(&bc.Clients, "clients", 0, "workers (default 64 open loop, 16 closed loop); also the baselines' concurrency")
	f.IntVar(&bc.Procs, "procs", 1, "the load generator's GOMAXPROCS in the mixed phase (negative: the process's)")
	f.BoolVar(&bc.PlainSockets, "plain-sockets", false, "the load generator's HTTP connections use Go's own socket calls, not raw ones (to compare)")
	f.Float64Var(&bc.ReadRatio, "read-ratio", 20, "feed reads per write (0: writes only)")
	f.Float64Var(&bc.PostShare, "post-share", 0.8, "share of writes that are posts (the rest: follows and unfollows, half each; 0: none)")
	f.Float64Var(&bc.RepostShare, "repost-share", 0.1, "share of the post operations that repost a recent post (stated, not measured; 0: none)")
	f.Float64Var(&bc.ReplyShare, "reply-share", 0.1, "share of the post operations that reply to a recent post (0: none)")
	f.Float64Var(&bc.LikeShare, "like-share", 0.3, "share of the post operations that like a recent post (0: none)")
	f.IntVar(&bc.Readers, "readers", 2000, "users who read (warmed by one read each before the run)")
	f.IntVar(&bc.Churners, "churners", 500, "users who follow and unfollow")
	f.Float64Var(&bc.VisibleRate, "visible-rate", 20, "posts per second that get a post-to-visible probe")
	f.IntVar(&bc.Streams, "streams", 0, "readers (the first of --readers) holding a live stream (GET /api/feed/stream) through the mixed phase: post-to-stream beside post-to-visible")
	f.DurationVar(&bc.PollInterval, "poll", 10*time.Millisecond, "probe poll interval")
	f.DurationVar(&bc.BaselineDuration, "baseline", 10*time.Second, "length of each baseline phase, before and after (negative: none)")
	f.BoolVar(&o.activate, "activate", true, "mark every user active before the run, so fan-out pushes to all followers")
	f.BoolVar(&o.vacuum, "vacuum", true, "VACUUM (ANALYZE) the tables runs change before the run, when the server's autovacuum is off")
	f.Uint64Var(&bc.Seed, "seed", 1, "choice of readers, churners and operations")
	f.StringVar(&o.out, "out", "bench-report", "report files: OUT.json, OUT.png and OUT.svg")
	f.StringVar(&o.url, "url", "", "API base URL (default http://HTTP_ADDR)")
	raw := newRawHTTPServerCommand(stdout)
	raw.SetUsageTemplate(usage) // it reads no environment
	cmd.AddCommand(raw)
	return cmd
}

// newRawHTTPServerCommand is the hidden `feedbench raw-http-server PAGE`,
// the process of the raw HTTP baseline (bench.RawHTTP): it serves the
// bytes of the file PAGE to every request with net/http's server until it
// is stopped.
func newRawHTTPServerCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:    "raw-http-server PAGE",
		Short:  "Serve the bytes of PAGE to every HTTP request (the raw HTTP baseline)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body, err := os.ReadFile(args[0])
			if err != nil {
				return fmt.Errorf("read the page: %w", err)
			}
			return bench.ServeRawHTTP(cmd.Context(), body, stdout)
		},
	}
}

// noArgs refuses positional arguments: the command takes flags only.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", args[0])}
	}
	return nil
}

// noneFlags maps an explicit 0 of --read-ratio, --post-share and the
// share flags to the
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
	for _, v := range []*float64{&c.RepostShare, &c.ReplyShare, &c.LikeShare} {
		if *v < 0 {
			return usageError{fmt.Sprintf("--repost-share %g, --reply-share %g, --like-share %g: want at least 0", c.RepostShare, c.ReplyShare, c.LikeShare)}
		}
		if *v == 0 {
			*v = -1
		}
	}
	return nil
}

// rawHTTPServer is bench.Config.RawHTTPServer: this binary's hidden
// raw-http-server command.
func rawHTTPServer(ctx context.Context, page string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return exec.CommandContext(ctx, exe, "raw-http-server", page)
}

// run is one benchmark; command is its command line, for the report.
func run(ctx context.Context, cfg config, c bench.Config, o options, command string, stdout, stderr io.Writer) error {
	s, err := open(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.close()
	c.CelebrityThreshold = s.policy.CelebrityThreshold
	c.RawHTTPServer = rawHTTPServer
	c.BaseURL = strings.TrimRight(o.url, "/")
	if c.BaseURL == "" {
		c.BaseURL = "http://" + cfg.httpAddr
	}
	c.MetricsURL = "http://" + cfg.adminAddr
	signer, err := auth.New(cfg.jwt)
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
	keys := readmodel.Keys{Versions: s.versions}
	pop, err := bench.LoadPopulation(ctx, s.pool, c.Readers, c.Churners, c.Seed)
	if err != nil {
		return err
	}
	rc := projections.RunnerConfig{Brokers: cfg.brokers, Security: cfg.kafkaSecurity, Topic: cfg.topic}
	sampler := func(ctx context.Context) (bench.LagSample, error) {
		var ls bench.LagSample
		st, err := cdc.Status(ctx, s.pool, s.slot)
		if err != nil {
			return ls, err
		}
		ls.CDCLagBytes, ls.CDCLagSeconds = st.LagBytes, st.LagSeconds
		ps, err := rebuild.ReadStatus(ctx, s.pool, s.redis, rc, "")
		ls.ConsumerLag = map[string]int64{}
		for _, p := range ps.Projections {
			ls.ConsumerLag[p.Name] = p.Lag
		}
		return ls, err
	}
	r, err := bench.New(c, pop, tokens, bench.Deps{DB: s.pool, Redis: s.redis, Keys: keys,
		Inboxes: new(homefeed.NewInboxes(keys, s.policy)), Sampler: sampler, Log: stderr})
	if err != nil {
		return usageError{err.Error()}
	}
	rep, err := r.Run(ctx)
	if err != nil {
		return err
	}
	rep.Command = command
	rep.WriteTable(stdout)
	if err := rep.WriteJSON(o.out + ".json"); err != nil {
		return err
	}
	for _, ext := range []string{".png", ".svg"} {
		if err := rep.WriteChart(o.out + ext); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "\nreport: %s.json, chart: %s.png and %s.svg\n", o.out, o.out, o.out)
	return nil
}
