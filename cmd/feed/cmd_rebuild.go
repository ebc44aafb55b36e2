package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/rebuild"
)

func init() {
	register("rebuild", "rebuild a projection from scratch, blue/green (inbox, timelines, followers, posts, or all)", runRebuild)
}

func runRebuild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("rebuild", flag.ContinueOnError)
	catchUpLag := fs.Int64("catch-up-lag", 1000, "switch once the new version is at most this many messages behind")
	handover := fs.Duration("handover", 3*time.Second, "keep the catch-up consumer running this long after the switch")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: feed rebuild [flags] inbox|timelines|followers|posts|all")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if fs.NArg() != 1 {
		return usageError{"rebuild takes one projection name: inbox, timelines, followers, posts or all"}
	}
	name := fs.Arg(0)
	if _, err := rebuild.Names(name); err != nil {
		return usageError{err.Error()}
	}
	if *catchUpLag < 0 {
		return usageError{"--catch-up-lag must not be negative"}
	}
	a, err := newApp(ctx, true, true)
	if err != nil {
		return err
	}
	defer a.Close()
	prog := rebuild.NewProgress(os.Stderr, isTerminal(os.Stderr))
	r, err := rebuild.New(rebuild.Config{
		Projections: projectionConfig(a.Cfg),
		Runner:      projections.RunnerConfig{Brokers: brokersOf(a.Cfg), Topic: a.Cfg.Topic, Logger: a.Log},
		CatchUpLag:  *catchUpLag,
		Handover:    *handover,
		Progress:    prog,
		Logger:      a.Log,
	}, a.Pool, a.Redis)
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := r.Run(ctx, name)
	for _, x := range res {
		fmt.Fprintf(os.Stderr, "rebuild: %s version %d -> %d: built %d %s in %v, caught up in %v\n",
			x.Projection, x.From, x.To, x.Built, x.Unit, x.BuildFor.Round(time.Millisecond), x.CatchUpFor.Round(time.Millisecond))
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "rebuild: interrupted; the live versions are untouched, run it again to start over")
		return err
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "rebuild: %s done in %v\n", name, time.Since(start).Round(time.Millisecond))
	return nil
}
