package cdc

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/feedco/feed/internal/kafka"
	"github.com/feedco/feed/testkit/testenv"
)

// childEnv switches the test binary into a CDC process (see TestMain), so
// the crash test can kill -9 a real, separate process.
const childEnv = "FEED_CDC_TEST_CHILD"

func TestMain(m *testing.M) { testenv.ChildMain(m, childEnv, childMain) }

// childMain runs CDC until SIGTERM, configured by the environment.
func childMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	fail := func(err error) int {
		log.Error("child", "err", err)
		return 1
	}
	pool, err := pgxpool.New(ctx, os.Getenv("CHILD_DATABASE_URL"))
	if err != nil {
		return fail(err)
	}
	defer pool.Close()
	pub, err := kafka.NewPublisher(kafka.Conn{Brokers: strings.Split(os.Getenv("CHILD_BROKERS"), ",")}, watermill.NopLogger{})
	if err != nil {
		return fail(err)
	}
	defer pub.Close()
	c, err := New(Config{
		DatabaseURL:     os.Getenv("CHILD_DATABASE_URL"),
		Slot:            os.Getenv("CHILD_SLOT"),
		Topic:           os.Getenv("CHILD_TOPIC"),
		ConfirmInterval: 200 * time.Millisecond,
		MinBackoff:      50 * time.Millisecond,
		MaxBackoff:      500 * time.Millisecond,
		Logger:          log,
	}, pool, pub)
	if err != nil {
		return fail(err)
	}
	if err := c.Run(ctx); err != nil {
		return fail(err)
	}
	log.Info("child: clean exit", "published", value(c.m.published))
	return 0
}

// child is one CDC subprocess.
type child struct {
	cmd *exec.Cmd
	out *testenv.SyncBuffer
}

func (b *bundle) startChild(t *testing.T) *child {
	t.Helper()
	out := &testenv.SyncBuffer{}
	t.Cleanup(func() { // after StartChild's: the child is gone
		if t.Failed() {
			t.Logf("child output:\n%s", out.String())
		}
	})
	cmd := testenv.StartChild(t, childEnv, out,
		"CHILD_DATABASE_URL="+b.db.URL, "CHILD_SLOT="+b.slot, "CHILD_TOPIC="+b.topic,
		"CHILD_BROKERS="+strings.Join(b.broker.Addrs(), ","))
	return &child{cmd: cmd, out: out}
}

// The CDC process is killed with SIGKILL twice while writes continue, and
// restarted each time: every committed event is in Kafka at least once,
// each stream in version order and each key in commit order once
// redeliveries are skipped; duplicates are counted and reported. Finally a
// SIGTERM stops it cleanly.
func TestCrashRecoveryKill9(t *testing.T) {
	t.Parallel()
	b := setup(t, 6)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &workload{db: b.db, base: 5_000_000, rounds: 1500, pause: 2 * time.Millisecond}
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		w.run(ctx, t, 3)
	}()
	cons := newConsumer(t, b)
	kills := 0
	for i := 0; i < 2; i++ {
		ch := b.startChild(t)
		// Let it stream for a while, at least some events published.
		target := len(cons.byID) + 300
		cons.readUntil(t, 30*time.Second, fmt.Sprintf("%d events before kill %d", target, i+1), func(c *consumer) bool { return len(c.byID) >= target })
		time.Sleep(300 * time.Millisecond) // the scenario: the kill lands mid-stream, not right after the condition
		if err := ch.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = ch.cmd.Wait()
		kills++
		t.Logf("kill -9 #%d after %d distinct events seen; %d written so far", kills, len(cons.byID), w.written())
	}
	last := b.startChild(t)
	<-wdone
	want := committedIDs(t, b.db)
	cons.readUntil(t, 60*time.Second, "every committed event", func(c *consumer) bool { return c.hasAll(want) })
	cons.checkOrder(t)
	if len(cons.byID) != len(want) {
		t.Fatalf("read %d distinct events, database holds %d", len(cons.byID), len(want))
	}
	t.Logf("%d events written during %d kill -9s; %d records in Kafka, %d duplicates (%.1f%%)",
		len(want), kills, len(cons.recs), cons.duplicates(), 100*float64(cons.duplicates())/float64(len(want)))

	if err := last.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := last.cmd.Wait(); err != nil {
		t.Fatalf("child after SIGTERM: %v\n%s", err, last.out.String())
	}
	if !strings.Contains(last.out.String(), "clean exit") {
		t.Fatalf("child did not exit cleanly:\n%s", last.out.String())
	}
}
