package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
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

// benchOptions are `feed bench`'s flags besides bench.Config's.
type benchOptions struct {
	activate bool
	vacuum   bool
	out, url string
}

func newBenchCommand(c *cli) *cobra.Command {
	var bc bench.Config
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Mixed read/write workload against a running system, with baselines",
		Long: longHelp("Runs a mixed workload against a running system (open loop at --rate, or --closed-loop with --clients):\n"+
			"reads/s and latency percentiles, post-to-visible latency, lags, errors, beside the pull-SQL and raw-Redis\n"+
			"baselines; a table on stdout, OUT.json and OUT.png (docs/bench.md).",
			envPostgres, envRedis, []string{"HTTP_ADDR", "FEED_JWT_SECRET", "FEED_JWT_ISSUER", "FEED_JWT_AUDIENCE", "FEED_SLOT", "FEED_CELEBRITY_THRESHOLD"}, envKafka),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := noneFlags(&bc); err != nil {
				return err
			}
			cfg, log, err := c.config()
			if err != nil {
				return err
			}
			bc.Activate = o.activate
			bc.Vacuum = o.vacuum
			command := []string{cmd.CommandPath()}
			cmd.Flags().Visit(func(f *pflag.Flag) { command = append(command, "--"+f.Name+"="+f.Value.String()) })
			return runBench(cmd.Context(), cfg, log, bc, o, strings.Join(command, " "), c.stdout, c.stderr)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&bc.Duration, "duration", 60*time.Second, "length of the mixed phase")
	f.Float64Var(&bc.Rate, "rate", 1000, "open loop: operations per second (reads and writes)")
	f.BoolVar(&bc.ClosedLoop, "closed-loop", false, "run --clients workers back to back instead of --rate")
	f.IntVar(&bc.Clients, "clients", 0, "workers (default 64 open loop, 16 closed loop); also the baselines' concurrency")
	f.IntVar(&bc.Procs, "procs", 1, "the load generator's GOMAXPROCS in the mixed phase (negative: the process's)")
	f.BoolVar(&bc.PlainSockets, "plain-sockets", false, "the load generator's HTTP connections use Go's own socket calls, not raw ones (to compare)")
	f.Float64Var(&bc.ReadRatio, "read-ratio", 20, "feed reads per write (0: writes only)")
	f.Float64Var(&bc.PostShare, "post-share", 0.8, "share of writes that are posts (the rest: follows and unfollows, half each; 0: none)")
	f.IntVar(&bc.Readers, "readers", 2000, "users who read (warmed by one read each before the run)")
	f.IntVar(&bc.Churners, "churners", 500, "users who follow and unfollow")
	f.Float64Var(&bc.VisibleRate, "visible-rate", 20, "posts per second that get a post-to-visible probe")
	f.DurationVar(&bc.PollInterval, "poll", 10*time.Millisecond, "probe poll interval")
	f.DurationVar(&bc.BaselineDuration, "baseline", 10*time.Second, "length of each baseline phase, before and after (negative: none)")
	f.BoolVar(&o.activate, "activate", true, "mark every user active before the run, so fan-out pushes to all followers")
	f.BoolVar(&o.vacuum, "vacuum", true, "VACUUM (ANALYZE) the tables runs change before the run, when the server's autovacuum is off")
	f.Uint64Var(&bc.Seed, "seed", 1, "choice of readers, churners and operations")
	f.StringVar(&o.out, "out", "bench-report", "report files: OUT.json and OUT.png")
	f.StringVar(&o.url, "url", "", "API base URL (default http://HTTP_ADDR)")
	cmd.AddCommand(newRawHTTPServerCommand())
	return cmd
}

// newRawHTTPServerCommand is the hidden `feed bench raw-http-server PAGE`,
// the process of the raw HTTP baselines (bench.RawHTTP): it serves the
// bytes of the file PAGE to every request until it is stopped, with
// --server's server (net/http or h1).
func newRawHTTPServerCommand() *cobra.Command {
	var server string
	cmd := &cobra.Command{
		Use:    "raw-http-server PAGE",
		Short:  "Serve the bytes of PAGE to every HTTP request (feed bench's raw HTTP baselines)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			return bench.ServeRawHTTP(cmd.Context(), body, os.Stdout, server)
		},
	}
	cmd.Flags().StringVar(&server, "server", bench.RawServerNetHTTP, "net/http or h1")
	return cmd
}

// rawHTTPServer is bench.Config.RawHTTPServer: this binary's hidden
// raw-http-server command.
func rawHTTPServer(ctx context.Context, page, server string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return exec.CommandContext(ctx, exe, "bench", "raw-http-server", "--server", server, page)
}

// runBench is `feed bench`; command is its command line, for the report.
func runBench(ctx context.Context, cfg Config, log *slog.Logger, c bench.Config, o benchOptions, command string, stdout, stderr io.Writer) error {
	// The feed policy of the active versions: the inbox layout the raw
	// baseline reads and the celebrity threshold the report gives.
	a, cfg, err := openResolvedApp(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()
	c.CelebrityThreshold = cfg.CelebrityThreshold
	c.RawHTTPServer = rawHTTPServer
	c.BaseURL = strings.TrimRight(o.url, "/")
	if c.BaseURL == "" {
		c.BaseURL = "http://" + a.Cfg.HTTPAddr
	}
	signer, err := auth.New(a.Cfg.JWT())
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
	vs, err := readmodel.LoadVersions(ctx, a.Pool)
	if err != nil {
		return err
	}
	keys := readmodel.Keys{Versions: vs}
	pop, err := bench.LoadPopulation(ctx, a.Pool, c.Readers, c.Churners, c.Seed)
	if err != nil {
		return err
	}
	rc := projections.RunnerConfig{Brokers: brokersOf(a.Cfg), Security: a.Cfg.KafkaSecurity, Topic: a.Cfg.Topic}
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
	r, err := bench.New(c, pop, tokens, bench.Deps{DB: a.Pool, Redis: a.Redis, Keys: keys, Inboxes: new(homefeed.NewInboxes(keys, cfg.Policy)), Sampler: sampler, Log: stderr})
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
