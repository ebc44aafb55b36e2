// Command feed is the one binary of the system: each subcommand is one role
// (api, cdc, project, ...) and `feed dev` runs them all in one process.
// newRootCommand lists every subcommand; each role's wiring function (runAPI,
// runCDC, runProject, runDev, ...) opens its connections, builds its
// components and runs them.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/internal/service"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr, LoadConfig)
	stop()
	os.Exit(code)
}

// Exit codes: a runtime failure, and a bad invocation (unknown command or
// flag, unexpected argument, invalid configuration), like flag's.
const (
	exitFailure = 1
	exitUsage   = 2
)

// usageError is a bad invocation: execute exits with exitUsage.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// execute runs the command line args (without the program name) and
// returns the process's exit code. Commands write to stdout and stderr and
// read their configuration with loadConfig; tests call it in-process.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer, loadConfig func() (Config, error)) int {
	c := &cli{stdout: stdout, stderr: stderr, loadConfig: loadConfig}
	root := newRootCommand(c)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if c.pprof != nil {
		_ = c.pprof.Stop()
	}
	if c.tracing != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if serr := c.tracing.Shutdown(sctx); serr != nil {
			fmt.Fprintf(stderr, "feed: flush traces: %v\n", serr)
		}
		cancel()
	}
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

// cli is what every command shares: where it writes, and where its
// configuration comes from (the environment, or a test's Config).
type cli struct {
	stdout, stderr io.Writer
	loadConfig     func() (Config, error)
	command        string // the running command's path ("feed api"): Config.AppName
	// pprof serves the profiles while the command runs (FEED_PPROF_ADDR):
	// config starts it, execute stops it.
	pprof *service.Service
	// tracing is the tracer provider of the OTEL_* variables (nil: off):
	// config builds it, execute flushes it.
	tracing *sdktrace.TracerProvider
}

// config loads the configuration (a failure is a usage error) and the
// logger it asks for, on stderr.
func (c *cli) config() (Config, *slog.Logger, error) {
	cfg, err := c.loadConfig()
	if err != nil {
		return cfg, nil, usageError{err.Error()}
	}
	cfg.AppName = c.command
	log := newLogger(c.stderr, cfg.LogFormat, cfg.LogLevel)
	// For the libraries that log to the default logger, and go-redis's
	// connection pool.
	slog.SetDefault(log)
	redis.SetLogger(redisLogger{log})
	if c.pprof == nil {
		if c.pprof = newPprof(log); c.pprof != nil {
			_ = c.pprof.Start(context.Background())
		}
	}
	// Sarama's go-metrics registry is off unless asked for (nothing in
	// feed reads it; internal/kafka).
	if os.Getenv("FEED_KAFKA_CLIENT_METRICS") == "1" {
		kafka.ClientMetrics(true)
	}
	kafka.SetFetch(cfg.KafkaFetchMinBytes, cfg.KafkaFetchMaxWait)
	if c.tracing == nil {
		if c.tracing, err = newTracing(context.Background(), os.Getenv); err != nil {
			return cfg, nil, usageError{err.Error()}
		}
		if c.tracing != nil {
			tracerProvider = c.tracing
		}
	}
	return cfg, log, nil
}

// redisLogger sends go-redis's messages (failed dials, for one) to the
// process's logger as warnings.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}

// newLogger returns the process's logger: text or JSON lines on w, from
// level up.
func newLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
