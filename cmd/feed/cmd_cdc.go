package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	wk "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/feedco/feed/cdc"
	"github.com/feedco/feed/internal/kafka"
)

func init() {
	register("cdc", "stream the event log to Kafka (--metrics-addr HOST:PORT); `feed cdc drop-slot` drops the slot", runCDC)
	// `feed dev` runs CDC too; the dev hooks set KafkaBrokers first.
	registerDevRole("cdc", func(ctx context.Context, a *App) error {
		return runCDCRole(ctx, a, a.Metrics)
	})
}

func runCDC(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "drop-slot" {
		return runDropSlot(ctx, args[1:])
	}
	fs := flag.NewFlagSet("cdc", flag.ContinueOnError)
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus /metrics on this address (default: none)")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("cdc: unexpected argument %q (did you mean `feed cdc drop-slot`?)", fs.Arg(0))}
	}
	a, err := newApp(ctx, true, false)
	if err != nil {
		return err
	}
	defer a.Close()
	a.Log = logger()
	if os.Getenv("GOGC") == "" {
		// CDC allocates a few short-lived objects per event (the watermill
		// message, sarama's record); collecting less often cut its CPU per
		// event by about a quarter in docs/benchmarks.md, for a heap of a
		// few hundred MiB at most. Only for the role alone, not `feed dev`.
		debug.SetGCPercent(400)
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = kafka.EnsureTopics(tctx, brokersOf(a.Cfg), topicsOf(a.Cfg))
	cancel()
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	defer serveMetrics(*metricsAddr, reg, a.Log, "cdc")()
	return runCDCRole(ctx, a, reg)
}

// runCDCRole streams until ctx ends. It waits for the broker when it is not
// up yet, like the replication side waits for PostgreSQL.
func runCDCRole(ctx context.Context, a *App, reg prometheus.Registerer) error {
	brokers := brokersOf(a.Cfg)
	var pub *wk.Publisher
	for backoff := 200 * time.Millisecond; ; backoff = min(backoff*2, 15*time.Second) {
		var err error
		if pub, err = kafka.NewPublisher(brokers, kafka.Logger(a.Log)); err == nil {
			break
		}
		a.Log.Warn("cdc: Kafka is not reachable yet, retrying", "brokers", brokers, "backoff", backoff, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
	defer pub.Close()
	c, err := cdc.New(cdc.Config{
		DatabaseURL:  a.Cfg.DatabaseURL,
		Slot:         a.Cfg.Slot,
		Topic:        a.Cfg.Topic,
		LagWarnBytes: a.Cfg.LagWarnBytes,
		OnSlotLoss:   cdc.SlotLossMode(os.Getenv("FEED_CDC_ON_SLOT_LOSS")), // "heal" (default) or "stop": docs/cdc.md, Slot loss
		Registerer:   reg,
		Logger:       a.Log,
	}, a.Pool, pub)
	if err != nil {
		return usageError{err.Error()}
	}
	fmt.Fprintf(os.Stderr, "cdc: slot %s -> topic %s on %v\n", a.Cfg.Slot, a.Cfg.Topic, brokers)
	return c.Run(ctx)
}

func runDropSlot(ctx context.Context, args []string) error {
	if len(args) > 0 {
		return usageError{"cdc drop-slot takes no arguments (the slot is FEED_SLOT, or derived from DATABASE_URL)"}
	}
	a, err := newApp(ctx, true, false)
	if err != nil {
		return err
	}
	defer a.Close()
	err = cdc.DropSlot(ctx, a.Pool, a.Cfg.Slot)
	switch {
	case errors.Is(err, cdc.ErrNoSlot):
		fmt.Printf("cdc: no replication slot %s; nothing dropped\n", a.Cfg.Slot)
		return nil
	case err != nil:
		return err
	}
	fmt.Printf("cdc: dropped replication slot %s and its progress row; PostgreSQL no longer keeps WAL for it.\n"+
		"A later `feed cdc` creates a new slot that starts at the WAL position of that moment: events committed in between are not streamed.\n", a.Cfg.Slot)
	return nil
}
