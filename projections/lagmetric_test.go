package projections_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/projections"
	"github.com/feedco/feed/testkit/kafkatest"
	"github.com/feedco/feed/testkit/testenv"
)

// versioned is a projector of one name at a given version (its consumer
// group carries the version, as the real ones' do). Apply blocks while
// hold is open, so the group commits nothing.
type versioned struct {
	version int
	hold    chan struct{}
}

func (*versioned) Name() string { return "lagged" }
func (p *versioned) Group() string {
	return projections.GroupFor("lagged", p.version)
}
func (p *versioned) Apply(ctx context.Context, _ events.Envelope, _ events.Event) error {
	if p.hold == nil {
		return nil
	}
	select {
	case <-p.hold:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lagSeries returns the feed_projection_consumer_lag series in reg, as
// label set -> value.
func lagSeries(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	return series(t, reg, "feed_projection_consumer_lag")
}

// series returns the series of the gauge or counter name in reg, as label
// set -> value.
func series(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			v := m.GetGauge().GetValue()
			if m.Counter != nil {
				v = m.GetCounter().GetValue()
			}
			out[labelString(m.GetLabel())] = v
		}
	}
	return out
}

func labelString(ls []*dto.LabelPair) string {
	s := ""
	for _, l := range ls {
		s += fmt.Sprintf("%s=%q,", l.GetName(), l.GetValue())
	}
	return s
}

// The consumer-lag gauge is keyed by projection, not by consumer group:
// when a rebuild switches a projection to a new version (a new group), the
// same series carries the new group's lag and no series of the old
// version stays behind.
func TestConsumerLagSeriesSurvivesVersionSwitch(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	topic := b.Topic(t, 2)
	var envs []events.Envelope
	for i := int64(1); i <= 3; i++ {
		ev := events.UserRegistered{UserID: i, Name: fmt.Sprintf("u%d", i)}
		payload, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, events.Envelope{EventID: uuid.NewString(), Position: i, StreamID: ev.StreamID(), StreamVersion: 1,
			Type: ev.EventType(), Payload: payload, RecordedAt: time.Now().UTC(), CommitLSN: fmt.Sprintf("0/%X", i*64), AudienceKey: ev.AudienceKey()})
	}
	b.PublishEvents(t, topic, envs...)
	reg := prometheus.NewRegistry()
	m, err := projections.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	run := func(p *versioned) context.CancelFunc {
		r, err := projections.NewRunner(projections.RunnerConfig{Brokers: b.Addrs(), Topic: topic, GroupPrefix: topic + ".",
			Logger: quietLogger(), LagInterval: 50 * time.Millisecond, DrainTimeout: time.Second, Metrics: m}, p)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("runner: %v", err)
			}
		}
	}
	want := `projection="lagged",`

	// Version 1 consumes everything: its lag reaches 0.
	stop := run(&versioned{version: 1})
	testenv.Eventually(t, 60*time.Second, "version 1 caught up", func() bool {
		v, ok := lagSeries(t, reg)[want]
		return ok && v == 0
	})
	stop()

	// Version 2, a new group that commits nothing, lags by all three.
	hold := make(chan struct{})
	stop = run(&versioned{version: 2, hold: hold})
	testenv.Eventually(t, 60*time.Second, "version 2's lag on the same series", func() bool {
		return lagSeries(t, reg)[want] == 3
	})
	close(hold)
	stop()
	if got := lagSeries(t, reg); len(got) != 1 {
		t.Fatalf("consumer-lag series after the switch: %v, want only {%s}", got, want)
	}
}

// TestEntriesWrittenExportedFromZero: the inbox's entry counter is a
// series before anything is written, so that a scrape right after a start
// has it (feedbench divides CPU by its difference).
func TestEntriesWrittenExportedFromZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := projections.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	v, ok := series(t, reg, "feed_projection_entries_written_total")[`projector="inbox",`]
	if !ok || v != 0 {
		t.Fatalf(`feed_projection_entries_written_total{projector="inbox"}: %v (present %v) before any write, want 0`, v, ok)
	}
}
