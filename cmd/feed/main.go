// Command feed is the one binary of the system: each subcommand is one role
// (api, cdc, project, ...) and `feed dev` runs them all in one process.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand. run gets the arguments after its name.
type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

// commands is filled by init functions, one file per subcommand.
var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, args []string) error) {
	if _, dup := commands[name]; dup {
		panic("duplicate command " + name)
	}
	commands[name] = command{summary: summary, run: run}
}

// usageError makes main exit with code 2 (bad invocation), like flag does.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usage() {
	fmt.Fprintln(os.Stderr, "usage: feed COMMAND [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(os.Stderr, "\nConfiguration comes from the environment; see README.md.")
}

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "feed: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	startPprof(slog.Default())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := cmd.run(ctx, os.Args[2:])
	if err == nil || errors.Is(err, context.Canceled) {
		return
	}
	fmt.Fprintf(os.Stderr, "feed %s: %v\n", os.Args[1], err)
	var ue usageError
	if errors.As(err, &ue) {
		os.Exit(2)
	}
	os.Exit(1)
}
